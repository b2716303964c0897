"""A host slower than its peers at the same work, with no pause and no quota period to remove: CPU
stolen by the hypervisor (a noisy neighbour), a throttled host without a period the run shows. Every
span's own time on that host is stretched, none stops. The fix: that host's spans at the other hosts'
speed (see levers.py)."""

from __future__ import annotations

from typing import Any

import numpy as np

from tailscope.analysis.whatif.levers import SOFTWARE, Inputs, Lever
from tailscope.analysis.whatif.retime import Edit

SLOW_HOST = 1.2  # a host whose median time at the finding's span is this much over its peers' is slow
MIN_SPANS = 20  # per span name, on the host and on its peers, to map one onto the other


def own_times(x: Inputs) -> np.ndarray:
    """Each span's own time (ns): a leaf its duration; a parent the gaps before its children and its
    trailing time after the last (the time no child covers)."""
    lay = x.lay
    child = np.nonzero(lay.parent >= 0)[0]
    gaps = np.bincount(lay.parent[child], weights=lay.gap[child].astype(np.float64), minlength=len(x.frame))
    return np.where(lay.has_children, gaps + lay.trailing, x.frame.dur).astype(np.float64)


def named_instances(instances: list[str], finding: dict[str, Any]) -> list[int]:
    """The codes of the instances the finding names, as the run writes them ('service/id') or the id
    alone, in code order."""
    named = {str(n) for n in ((finding.get("evidence") or {}).get("stats") or {}).get("instances") or []}
    return [i for i, n in enumerate(instances) if n in named or n.rpartition("/")[2] in named]


def slow_hosts(x: Inputs, finding: dict[str, Any]) -> list[int]:
    """The instances the finding names, else those whose median time at the finding's span is over
    SLOW_HOST times the median of the other instances' medians (only hosts with peers: a service's
    every instance slow leaves no speed to take)."""
    f = x.frame
    codes = named_instances(f.instances, finding)
    if not codes:
        spans = x.spans_named(finding.get("span_name"))
        inst = f.instance[spans]
        med = {int(i): float(np.median(f.dur[spans[inst == i]])) for i in np.unique(inst).tolist()
               if (inst == i).sum() >= MIN_SPANS}
        for i, m in med.items():
            peers = [v for j, v in med.items() if j != i]
            if peers and m > SLOW_HOST * float(np.median(peers)):
                codes.append(i)
    out = []
    for c in codes:
        service = f.service[f.instance == c]
        if len(service) == 0:
            continue
        peers = np.unique(f.instance[(f.service == service[0]) & ~np.isin(f.instance, codes)])
        if len(peers):
            out.append(c)
    return out


def host_as_peers(x: Inputs, finding: dict[str, Any]) -> Lever | None:
    """A cpu_throttling finding with no quota period (no_throttling has no stall to remove), or a
    compute_bound one on some of a service's hosts (their peers do the same work faster): on the
    slow hosts, each span's own time takes its quantile among the same span name's own times on the
    other hosts of its service (a host's slowest calls become the peers' slowest, its usual ones their
    usual ones; never longer than it was). A parent's own time (gaps before its children, time after
    the last) shrinks by its factor; children keep their own name's."""
    hosts = slow_hosts(x, finding)
    if not hosts:
        return None
    f, lay = x.frame, x.lay
    own = own_times(x)
    factor = np.ones(len(f))
    on = np.isin(f.instance, hosts)
    for code in np.unique(f.name[on]).tolist():
        mine = np.nonzero(on & (f.name == code))[0]
        service = f.service[mine[0]]
        peers = own[(f.name == code) & ~on & (f.service == service)]
        if len(mine) < MIN_SPANS or len(peers) < MIN_SPANS:
            continue
        rank = np.argsort(np.argsort(own[mine], kind="stable"), kind="stable")
        mapped = np.quantile(peers, (rank + 0.5) / len(mine))
        factor[mine] = np.where(own[mine] > 0, np.minimum(mapped / np.maximum(own[mine], 1.0), 1.0), 1.0)
    rows = np.nonzero(factor < 1.0)[0]
    if len(rows) == 0:
        return None
    edit = Edit.none(len(f))
    leaf = ~lay.has_children[rows]
    edit.dur[rows[leaf]] = f.dur[rows[leaf]] * factor[rows[leaf]]
    parent = rows[~leaf]
    edit.cut_after[parent] = lay.trailing[parent] * (1.0 - factor[parent])
    child = np.nonzero((lay.parent >= 0) & np.isin(lay.parent, parent))[0]
    edit.cut_before[child] = lay.gap[child] * (1.0 - factor[lay.parent[child]])
    names = ", ".join(f.instances[h] for h in hosts[:3]) + ("…" if len(hosts) > 3 else "")
    return Lever(
        "host_as_peers",
        f"The slow host{'s' if len(hosts) > 1 else ''} at the peers' speed ({names})",
        SOFTWARE,
        "on the hosts slower than their peers at the same work (CPU stolen, no pause or quota period "
        "seen), each span's own time takes its quantile among the same span's own times on the other "
        "hosts of its service: the host moved or its neighbour quietened; what its extra load did to "
        "the others is not modelled",
        edit,
        pattern="cpu_throttling",
        params={"hosts": len(hosts), "spans_retimed": len(rows)},
    )


def lock_as_peers(x: Inputs, finding: dict[str, Any]) -> Lever | None:
    """A lock_contention finding that names some of its service's instances: a lock of each process
    (a `synchronized` wrapper, a per-process mutex) held longer there than on the peers (a canary's
    larger model inside it). Where the lock pins the threads that run everything else (carriers of
    virtual threads pinned while waiting at a monitor: a small pool of workers held by a slow section),
    every task on that process waits to be scheduled, not only those that take the lock; so with the
    holders as fast as the peers', every span's own time on those instances takes its quantile among
    the peers' (`host_as_peers`), the lock's waits and the schedule waits together. Assumption: the
    peers get the same traffic and run the same work. None where the finding names no instance or
    every instance of the service."""
    name = finding.get("span_name")
    return _named_as_peers(x, finding, f"no_lock_wait_as_peers:{name}", "lock_contention",
                           "the lock held on the named instances as briefly as on their peers (a "
                           "per-process lock whose waiters hold the threads everything else runs on): ")


def stalls_as_peers(x: Inputs, finding: dict[str, Any]) -> Lever | None:
    """A gc_pause finding that names some of its service's instances (one process's heap near its
    limit: its allocating threads stall, assist the collector, all run long): those instances' spans'
    own times at their peers' (`host_as_peers`). None where it names none, or every instance."""
    return _named_as_peers(x, finding, "no_gc_stalls_host_as_peers", "gc_pause",
                           "the named instances' collector keeping up as their peers' does: ")


def _named_as_peers(x: Inputs, finding: dict[str, Any], key: str, pattern: str, why: str) -> Lever | None:
    named = (finding.get("evidence") or {}).get("stats", {}).get("instances") or []
    if not named:
        return None
    lever = host_as_peers(x, finding)
    if lever is None:
        return None
    lever.key, lever.pattern, lever.span_name = key, pattern, finding.get("span_name")
    lever.label = f"{lever.label.partition('(')[2].rstrip(')')} as its peers"
    lever.model = why + lever.model
    return lever
