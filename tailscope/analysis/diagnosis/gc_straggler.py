"""gc_pause without a stop on one instance: a heap near its limit makes its collector run back to back.

Mechanism. A process whose live heap sits near its limit (Go's GOMEMLIMIT, a JVM heap nearly full of
live objects) starts a collection as soon as the last one ends: its collector takes a share of the
CPU all the time and every goroutine or thread that allocates is made to help it mark (Go's mark
assists) or waits for memory to be freed (an allocation stall). Nothing stops: the pauses stay
sub-millisecond, so no long pause is reported and no stretch of the process is silent. What slows is
the process's own allocating work (decoding, parsing rows, building a response), on that instance
only and all the time, while its waits on other processes (a query's round trip, a call to a model
server) take what they take on the other instances. A CPU quota or a stop stretches everything the
process has in flight, long calls included (their replies are read late); a slow dependency slows its
calls from every caller alike.

Statistic, per service with >= 2 instances, over the leaf spans inside its requests outside the
instances' warm-up (not the request root, not queue waits or the model's batched forward): per
(instance, name) the median duration over the name's median on the service's other instances. An
instance is *slowed* where >= 2 names run >= SLOW x their peers' median there, while a name at least
as long as those (its peers' median) runs on it at under STEADY x: a process that was stopped, or had
its CPU quota spent, would have stretched that one too. The weight is the slowed spans' time over
their peers' median as a share of the tail excess (or what it adds to the mean request).

What names the collector. The runtime's own reports of its cycles (GC span events) on that instance
against its peers: many times more often there (>= GC_RATIO x, and >= MIN_CYCLES) is the collector
running back to back: gc_pause up to CONFIRMED_CAP. Reported on its service but no more often there:
the collector is not the cause (a CPU shared with a neighbour, a slower node): no finding. No cycles
reported in the run: a collector's assists and a CPU shared with something else on the node slow the
same steps alike, so the finding stays a possible cause (UNCONFIRMED_CAP) and says so.
"""

from __future__ import annotations

import numpy as np

from tailscope.analysis.diagnosis.frame import KIND_SERVER
from tailscope.analysis.diagnosis.gc_pause import PATTERN
from tailscope.analysis.diagnosis.long_stalls import warm_up_mask
from tailscope.analysis.diagnosis.model import Context, Finding
from tailscope.analysis.diagnosis.stats import clamp01, logistic, material_weight
from tailscope.vocabulary import ALL_STAGES

SLOW = 2.0  # a name this many times its peers' median on one instance is slowed there
STEADY = 1.3  # a name under this many times its peers' median there is not
MIN_SPANS = 20  # per (instance, name)
MIN_MEDIAN_NS = 200_000  # steps shorter than this are timer noise
GC_RATIO = 3.0
MIN_CYCLES = 10
CONFIRMED_CAP = 0.85
UNCONFIRMED_CAP = 0.45
ADVICE = (
    "One instance's collector runs back to back: its live heap sits near its limit (Go's GOMEMLIMIT, a "
    "JVM heap full of live objects), so every allocating step on it helps the collector mark or waits for "
    "memory while its calls to other services run as fast as anywhere. Find what holds the heap on that "
    "instance (a cache grown without a bound, a leak, one tenant's large objects): bound the cache by "
    "bytes, raise the memory limit and GOMEMLIMIT / -Xmx with it, or move the data off-heap; restart it to "
    "confirm. Watch the runtime's GC CPU fraction and heap-in-use per instance (Go: /gc/heap/live:bytes, "
    "/cpu/classes/gc/total:cpu-seconds; JVM: GC time and heap after GC)."
)
UNCONFIRMED = (
    " The run reports no GC cycles: a CPU shared with something else on that node (a neighbour, a "
    "sidecar, a background thread) slows the same steps alike; the runtime's GC CPU fraction on the "
    "instance tells them apart."
)


def _medians(keys: np.ndarray, d: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(unique keys, their median duration, their count)."""
    order = np.lexsort((d, keys))
    k, dd = keys[order], d[order]
    uniq, first, count = np.unique(k, return_index=True, return_counts=True)
    lo = dd[first + (count - 1) // 2]
    hi = dd[first + count // 2]
    return uniq, (lo + hi) / 2.0, count


def _slowed(ctx: Context, spans: np.ndarray) -> list[tuple[int, list[int], list[int]]]:
    """Per instance of the spans' service that is slowed (see the module docstring): (instance, the
    slowed names, the steady names at least as long)."""
    f = ctx.frame
    n_names = len(f.names)
    key = f.instance[spans].astype(np.int64) * n_names + f.name[spans]
    d = f.dur[spans].astype(np.float64)
    uniq, med, count = _medians(key, d)
    inst, name = uniq // n_names, uniq % n_names
    out = []
    for i in np.unique(inst).tolist():
        slowed, steady = [], []
        for k in np.nonzero((inst == i) & (count >= MIN_SPANS))[0].tolist():
            peers = (name == name[k]) & (inst != i) & (count >= MIN_SPANS)
            if not peers.any():
                continue
            base = float(np.median(med[peers]))
            if base < MIN_MEDIAN_NS:
                continue
            ratio = med[k] / base
            if ratio >= SLOW:
                slowed.append((int(name[k]), base))
            elif ratio < STEADY:
                steady.append((int(name[k]), base))
        if len(slowed) >= 2:
            longest = max(b for _, b in slowed)
            long_steady = [c for c, b in steady if b >= longest]
            if long_steady:
                out.append((int(i), [c for c, _ in slowed], long_steady))
    return out


def _cycles(f, inst: int, peers: list[int], t0: float, t1: float) -> tuple[float, float] | None:
    """Reported GC cycles per second on `inst` and on its peers (their mean); None: none reported."""
    if not len(f.gc_time) or not np.isin(f.gc_instance, [inst, *peers]).any():
        return None
    span = max(t1 - t0, 1.0) / 1e9
    mine = float((f.gc_instance == inst).sum()) / span
    theirs = float(np.isin(f.gc_instance, peers).sum()) / span / max(len(peers), 1)
    return mine, theirs


def detect(ctx: Context) -> list[Finding]:
    f = ctx.frame
    if len(f.requests) < 100:
        return []
    warm = warm_up_mask(ctx)
    inside = (f.request >= 0) & f.leaf & (f.kind != KIND_SERVER)
    inside[inside] = ~warm[f.request[inside]]
    skip = np.isin(ctx.stage, [ALL_STAGES.index("queue"), ALL_STAGES.index("model_forward")])
    base_ok = inside & ~skip
    best: Finding | None = None
    for svc in np.unique(f.service[base_ok]).tolist():
        spans = np.nonzero(base_ok & (f.service == svc))[0]
        insts = np.unique(f.instance[spans]).tolist()
        if len(insts) < 2:
            continue
        for inst, slowed, steady in _slowed(ctx, spans):
            peers = [i for i in insts if i != inst]
            mine = spans[(f.instance[spans] == inst) & np.isin(f.name[spans], slowed)]
            others = spans[(f.instance[spans] != inst) & np.isin(f.name[spans], slowed)]
            usual = np.zeros(len(f.names))
            for c in slowed:
                usual[c] = np.median(f.dur[others[f.name[others] == c]])
            values = np.zeros(len(f))
            values[mine] = np.maximum(f.dur[mine] - usual[f.name[mine]], 0.0)
            mask = np.zeros(len(f), bool)
            mask[mine] = True
            share = ctx.share_of(mask, values)
            added = float(values.sum() / ctx.n_requests / max(np.median(f.requests.latency), 1.0))
            weight = max(material_weight(share), logistic(added, 0.05, 0.015))
            rates = _cycles(f, inst, peers, float(f.start.min()), float(f.end.max()))
            if rates is not None and (f.gc_instance == inst).sum() < MIN_CYCLES:
                continue  # the runtime reports its cycles, and hardly any here: not the collector
            ratio = None if rates is None else rates[0] / max(rates[1], 1e-9)
            if ratio is not None and ratio < GC_RATIO:
                continue
            cap = UNCONFIRMED_CAP if ratio is None else CONFIRMED_CAP * logistic(ratio, 2 * GC_RATIO, 1.0)
            confidence = clamp01(cap * weight)
            if best is not None and confidence <= best.confidence:
                continue
            slow_ratio = {f.names[c]: round(float(np.median(f.dur[mine[f.name[mine] == c]]) / usual[c]), 1)
                          for c in slowed}
            stats = {
                "mechanism": "collector back to back on one instance",
                "services": [f.services[svc]],
                "instances": [f.instances[inst]],
                "slowed_steps_median_x": slow_ratio,
                "steady_steps": [f.names[c] for c in steady][:4],
                "gc_cycles_per_s": None if rates is None else round(rates[0], 2),
                "peer_gc_cycles_per_s": None if rates is None else round(rates[1], 2),
                "tail_excess_share": round(share, 3),
                "added_over_median_latency": round(added, 3),
            }
            steps = ", ".join(f"'{n}' {x}x" for n, x in list(slow_ratio.items())[:4])
            summary = (
                f"On {f.instances[inst]} ({f.services[svc]}) the process's own steps run slower than on its "
                f"other instances all along ({steps} their median there), while "
                f"{', '.join(repr(f.names[c]) for c in steady[:3])}, as long or longer, take what they "
                "take elsewhere: not a stop or a CPU quota (those stretch everything in flight, long calls "
                "included), not a slow dependency (it slows every caller's calls); the allocating work of "
                f"one process slowed, carrying {share:.0%} of the tail excess."
                + (f" Its runtime reports {rates[0]:.1f} GC cycles a second against {rates[1]:.1f} on its "
                   "peers: its collector runs back to back (a live heap near its limit), and allocating work "
                   "helps it mark or waits for memory." if rates is not None else UNCONFIRMED)
            )
            best = Finding(PATTERN, confidence, None, None, {"summary": summary, "stats": stats}, ADVICE)
    return [best] if best is not None and best.confidence >= 0.05 else []
