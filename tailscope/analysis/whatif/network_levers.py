"""The network lever: the time a call spends on the wire beyond the usual, removed.

A call's wire time is its CLIENT span minus its SERVER span (the crossing out and back). A fault on a
link (a slow route between two services) delays the calls of that link: each call's gap above its
link's median is removed. A fault on a node (a lossy overlay, a flapping NIC bond, conntrack drops)
delays every crossing to or from the instances on it, whichever link: their calls to every service,
the calls they receive, and the calls to callees that are not traced (a cache, a database: the delay
is inside the CLIENT span, with no SERVER span to take a gap from). Such instances are found from the
run itself: the crossings with a gap far beyond their link's usual one concentrate on them, many times
their service's other instances' share. Each of their crossings then takes the gap of a crossing of
the same link between other instances, and each of their calls to an untraced callee the time of the
same call made from another instance of the service (both drawn from the run: the healthy crossings'
own spread is kept, not cut to the median)."""

from __future__ import annotations

from typing import Any

import numpy as np

from tailscope.analysis.diagnosis.frame import KIND_CLIENT, KIND_SERVER, TraceFrame
from tailscope.analysis.diagnosis.network import large_gaps
from tailscope.analysis.whatif.levers import SOFTWARE, Inputs, Lever
from tailscope.analysis.whatif.retime import Edit

LOSSY_RATIO = 3.0  # an instance's share of large gaps over this many times its service's others'
LOSSY_FLOOR = 0.01  # and at least this share of its crossings
MIN_CROSSINGS = 50  # crossings an instance needs to be judged
MIN_POOL = 20  # healthy crossings (or calls) of a link (or name) to draw from


def _crossings(f: TraceFrame) -> tuple[np.ndarray, np.ndarray]:
    """(SERVER span, its CLIENT parent) for every call from one service to another."""
    srv = np.nonzero((f.kind == KIND_SERVER) & (f.parent >= 0))[0]
    cli = f.parent[srv]
    pair = (f.kind[cli] == KIND_CLIENT) & (f.service[cli] != f.service[srv])
    return srv[pair], cli[pair]


def _links(f: TraceFrame, srv: np.ndarray, cli: np.ndarray) -> np.ndarray:
    """Each crossing's link: the caller's service and the callee's (a call across regions and a local
    one can share a span name)."""
    return f.service[cli] * (len(f.services) + 1) + f.service[srv]


def _large(gap: np.ndarray, link: np.ndarray) -> np.ndarray:
    """Each crossing's gap far beyond its link's usual one (diagnosis/network.py's test, per link)."""
    big = np.zeros(len(gap), bool)
    for code in np.unique(link).tolist():
        sel = link == code
        big[sel] = large_gaps(gap[sel], float(np.median(gap[sel])))
    return big


def lossy_instances(f: TraceFrame, srv: np.ndarray, cli: np.ndarray, big: np.ndarray) -> list[int]:
    """The instances whose crossings (as caller or callee) carry large gaps many times as often as
    their service's other instances'. One at a time, the worst first: once its crossings are set
    aside, the instances it talked to are judged on their other crossings (a callee of a lossy caller
    is not lossy itself)."""
    chosen: list[int] = []
    active = np.ones(len(srv), bool)
    k = len(f.instances)
    service_of = np.full(k, -1)
    service_of[f.instance[srv]] = f.service[srv]
    service_of[f.instance[cli]] = f.service[cli]
    while True:
        ends = np.r_[f.instance[cli[active]], f.instance[srv[active]]]
        flags = np.r_[big[active], big[active]].astype(np.float64)
        count = np.bincount(ends, minlength=k)
        rate = np.bincount(ends, weights=flags, minlength=k) / np.maximum(count, 1)
        best, best_rate = -1, 0.0
        for i in np.nonzero(count >= MIN_CROSSINGS)[0].tolist():
            others = (service_of == service_of[i]) & (count >= MIN_CROSSINGS)
            others[i] = False
            if i in chosen or not others.any() or rate[i] < LOSSY_FLOOR:
                continue
            if rate[i] > LOSSY_RATIO * float(np.median(rate[others])) and rate[i] > best_rate:
                best, best_rate = i, float(rate[i])
        if best < 0:
            return chosen
        chosen.append(best)
        active &= (f.instance[cli] != best) & (f.instance[srv] != best)


MATE_SHARE = 0.9  # a proxy and its app: this share of each one's calls from another instance the other's


def node_mates(f: TraceFrame, lossy: list[int]) -> list[int]:
    """The instances on the same node as a lossy one: a sidecar proxy and its app call only each other
    from another instance (the proxy's inbound span is the app's request's parent; the app's calls go
    out through the proxy's outbound spans), so each of the pair takes at least 90 % of the other's
    spans called from another instance. The app's calls to untraced callees (a database) cross the
    same lossy network as the proxy's."""
    if not lossy:
        return []
    kid = np.nonzero(f.parent >= 0)[0]
    caller = f.instance[f.parent[kid]]
    callee = f.instance[kid]
    kid, caller, callee = kid[caller != callee], caller[caller != callee], callee[caller != callee]
    k = len(f.instances)
    pairs = np.bincount(callee * k + caller, minlength=k * k).reshape(k, k)  # [callee, caller]
    entries = pairs.sum(axis=1)
    mates = []
    for i in lossy:
        for j in range(k):
            if j == i or j in lossy or entries[i] == 0 or entries[j] == 0:
                continue
            if pairs[j, i] >= MATE_SHARE * entries[j] and pairs[i, j] >= MATE_SHARE * entries[i]:
                mates.append(j)
    return mates


NEARBY = 32  # a lossy instance's call takes the time of one of this many calls made about then elsewhere


def nearby_draw(rng: np.random.Generator, pool_start: np.ndarray, pool: np.ndarray, at: np.ndarray
                ) -> np.ndarray:
    """For each time in `at`: a value of `pool` drawn from the NEARBY entries whose starts are closest
    to it (what another instance's call took at about that moment: a callee slow for a stretch of the
    run, a pool exhausted then, stays so for the lossy instance's calls of that stretch)."""
    order = np.argsort(pool_start, kind="stable")
    starts, values = pool_start[order], pool[order]
    k = min(NEARBY, len(values))
    lo = np.clip(np.searchsorted(starts, at) - k // 2, 0, len(values) - k)
    return values[lo + rng.integers(0, k, len(at))]


def _untraced_calls(x: Inputs, lossy: list[int], traced: np.ndarray) -> tuple[np.ndarray, int]:
    """Each CLIENT span of the lossy instances whose callee is not traced takes the time of a call of
    the same name from another instance of the service at about that moment (nearby_draw), where the
    run has enough of those. Returns (their new durations over all spans, nan elsewhere; how many)."""
    f = x.frame
    calls = (f.kind == KIND_CLIENT) & ~np.isin(np.arange(len(f)), traced)
    on_lossy = np.isin(f.instance, lossy)
    new = np.full(len(f), np.nan)
    rng = x.rng(24)
    changed = 0
    for code in np.unique(f.name[calls & on_lossy]).tolist():
        spans = np.nonzero(calls & on_lossy & (f.name == code))[0]
        service = f.service[spans[0]]
        others = calls & ~on_lossy & (f.name == code) & (f.service == service)
        if others.sum() < MIN_POOL:
            continue
        new[spans] = nearby_draw(rng, f.start[others], f.dur[others], f.start[spans])
        changed += len(spans)
    return new, changed


OWN_TAIL = 0.99  # a span's own time beyond the other instances' p99 of it ...
OWN_TAIL_RATIO = 3.0  # ... this many times as often as there (1 %) on a lossy instance is wire time


def _own_times(x: Inputs, lossy: list[int], edit: Edit) -> int:
    """The wire time inside a lossy instance's own spans (not calls): a response body read after an
    SDK's CLIENT span ended at the headers, a reply written to the caller. Per span name, where the
    instance's own times (a parent's time after its last child, a leaf's duration) pass the same
    span's p99 on the service's other instances at least three times as often as there, each one past
    it takes an own time drawn from those instances. Work that does not cross the network (a decode)
    has the same spread everywhere and is left alone. Returns how many spans changed."""
    f, lay = x.frame, x.lay
    own = lay.trailing.astype(np.float64)
    on_lossy = np.isin(f.instance, lossy) & (f.kind != KIND_CLIENT)
    rng = x.rng(26)
    changed = 0
    for code in np.unique(f.name[on_lossy]).tolist():
        spans = np.nonzero(on_lossy & (f.name == code))[0]
        same = (f.name == code) & (f.service == f.service[spans[0]]) & ~np.isin(f.instance, lossy)
        same &= lay.has_children == lay.has_children[spans[0]]
        pool = own[same]
        if len(pool) < MIN_POOL:
            continue
        limit = float(np.quantile(pool, OWN_TAIL))
        past = spans[own[spans] > limit]
        if len(past) < 3 or len(past) < OWN_TAIL_RATIO * (1 - OWN_TAIL) * len(spans):
            continue
        drawn = nearby_draw(rng, f.start[same], pool, f.start[past])
        edit.cut_after[past] = np.maximum(own[past] - drawn, 0.0)
        changed += len(past)
    return changed


def lossy_by_calls(f: TraceFrame) -> list[int]:
    """Where no callee is traced (no crossing to read a gap from): the instances whose calls pass the
    same call's p99 on their service's other instances at least three times as often as those do
    (1 %), and at least 1 % of them. A node's network delays every call of its instances."""
    calls = np.nonzero(f.kind == KIND_CLIENT)[0]
    k = len(f.instances)
    past = np.zeros(k)
    count = np.bincount(f.instance[calls], minlength=k).astype(np.float64)
    for code in np.unique(f.name[calls]).tolist():
        spans = calls[f.name[calls] == code]
        for i in np.unique(f.instance[spans]).tolist():
            mine = f.instance[spans] == i
            others = spans[~mine & (f.service[spans] == f.service[spans[mine][0]])]
            if len(others) < MIN_POOL:
                continue
            past[i] += float((f.dur[spans[mine]] > np.quantile(f.dur[others], OWN_TAIL)).sum())
    rate = past / np.maximum(count, 1)
    limit = max(OWN_TAIL_RATIO * (1 - OWN_TAIL), LOSSY_FLOOR)
    return [i for i in np.nonzero((count >= MIN_CROSSINGS) & (rate >= limit))[0].tolist()]


def network_p50(x: Inputs, finding: dict[str, Any]) -> Lever | None:
    f, lay = x.frame, x.lay
    srv, cli = _crossings(f)
    if len(srv) == 0:  # nothing traced beyond the callers: the node from its calls' times alone
        lossy = lossy_by_calls(f)
        if not lossy:
            return _untraced_callee(x, finding.get("span_name")) or _named_nodes(x, finding)
        return _lossy_nodes(x, finding, srv, cli, np.zeros(0), np.zeros(0), np.zeros(0, np.int64), lossy)
    out_gap = lay.gap[srv].astype(np.float64)
    gap = out_gap + lay.trailing[cli].astype(np.float64)
    share_out = np.where(gap > 0, out_gap / np.maximum(gap, 1.0), 0.5)
    link = _links(f, srv, cli)
    wire = np.maximum(f.dur[cli] - f.dur[srv], 0).astype(np.float64)
    lossy = lossy_instances(f, srv, cli, _large(wire, link))
    lossy += [i for i in node_mates(f, lossy) if i not in lossy]
    name = finding.get("span_name")
    edit = Edit.none(len(f))
    if lossy:
        return _lossy_nodes(x, finding, srv, cli, gap, share_out, link, lossy)
    pair = f.name[cli] == f.names.index(name) if name in f.names else np.ones(len(srv), bool)
    srv, cli, gap, share_out, link = srv[pair], cli[pair], gap[pair], share_out[pair], link[pair]
    if len(srv) == 0:
        return _untraced_callee(x, name) or _named_nodes(x, finding)
    typical_of = np.zeros(len(gap))
    for code in np.unique(link).tolist():
        sel = link == code
        typical_of[sel] = np.median(gap[sel])
    typical = float(np.median(typical_of))
    excess = np.maximum(gap - typical_of, 0.0)
    edit.cut_before[srv] = excess * share_out
    edit.cut_after[cli] = excess * (1 - share_out)
    return Lever(
        f"network_p50:{name}",
        f"Network at its p50 ({typical / 1e6:.2f} ms client-server gap)",
        SOFTWARE,
        "each call's client-minus-server time above its median is removed",
        edit,
        pattern="network",
        span_name=name,
        params={"gap_p50_ms": round(typical / 1e6, 3)},
    )


def _lossy_nodes(x: Inputs, finding: dict[str, Any], srv: np.ndarray, cli: np.ndarray, gap: np.ndarray,
                 share_out: np.ndarray, link: np.ndarray, lossy: list[int]) -> Lever | None:
    """Every crossing to or from the lossy instances takes the gap of a crossing of the same link
    between other instances; their calls to untraced callees, a call's time from another instance."""
    f = x.frame
    touched = np.isin(f.instance[cli], lossy) | np.isin(f.instance[srv], lossy)
    edit = Edit.none(len(f))
    rng = x.rng(25)
    redrawn = 0
    for code in np.unique(link[touched]).tolist():
        pool = gap[~touched & (link == code)]
        rows = np.nonzero(touched & (link == code))[0]
        if len(pool) < MIN_POOL:
            continue
        cut = gap[rows] - pool[rng.integers(0, len(pool), len(rows))]
        edit.cut_before[srv[rows]] = cut * share_out[rows]
        edit.cut_after[cli[rows]] = cut * (1 - share_out[rows])
        redrawn += len(rows)
    new, untraced = _untraced_calls(x, lossy, cli)
    edit.dur = new
    own = _own_times(x, lossy, edit)
    if redrawn + untraced + own == 0:
        return None
    name = finding.get("span_name")
    nodes = ", ".join(f.instances[i] for i in lossy)
    return Lever(
        f"network_p50:{name}",
        f"Network fixed on {nodes} (its crossings as the other instances')",
        SOFTWARE,
        "the crossings with a gap far beyond their link's usual one concentrate on these instances (a "
        "node's network, whichever link): each of their calls, made or received, takes the client-minus-"
        "server time of a call of the same link between other instances, each of their calls to an "
        "untraced callee (a cache, a database) the time of the same call from another instance, and "
        "each own time of theirs far past the same span's elsewhere (a body read after the call) one "
        "from another instance (drawn from the run)",
        edit,
        pattern="network",
        span_name=name,
        params={"instances": len(lossy), "crossings_redrawn": redrawn, "untraced_calls_redrawn": untraced,
                "own_times_redrawn": own},
    )


def _named_nodes(x: Inputs, finding: dict[str, Any]) -> Lever | None:
    """The finding names the instances on a faulty link, and its span is a call with no span below it
    and no CLIENT/SERVER pair to read a wire gap from (an actor's ask over a cluster's remoting): each
    such call made on those instances takes the time of the same call from the service's other
    instances at about that moment (nearby_draw): the link's delays go, the callee's own spread stays."""
    f, name = x.frame, finding.get("span_name")
    named = (finding.get("evidence") or {}).get("stats", {}).get("instances") or []
    codes = [i for i, n in enumerate(f.instances) if n in named or n.rpartition("/")[2] in named]
    calls = x.spans_named(name)
    calls = calls[~x.lay.has_children[calls]]
    on = np.isin(f.instance[calls], codes)
    others = calls[~on & (f.service[calls] == (f.service[calls[on][0]] if on.any() else -1))]
    if not on.any() or len(others) < MIN_POOL:
        return None
    edit = Edit.none(len(f))
    edit.dur[calls[on]] = nearby_draw(x.rng(47), f.start[others], f.dur[others], f.start[calls[on]])
    return Lever(
        f"network_p50:{name}",
        f"Network fixed on {', '.join(f.instances[i] for i in codes)} ('{name}' as from the other instances)",
        SOFTWARE,
        "the finding names the instances on the faulty link and its calls show no wire gap (no span "
        "below them): each call made there takes the time of the same call from another instance at "
        "about that moment (drawn from the run)",
        edit,
        pattern="network",
        span_name=name,
        params={"calls_redrawn": int(on.sum())},
    )


def _untraced_callee(x: Inputs, name: str | None) -> Lever | None:
    """The finding's calls go to a callee that is not traced (a managed endpoint): the wire is inside
    each CLIENT span with the callee's time, so each call's time above the calls' median is removed."""
    calls = x.spans_named(name)
    calls = calls[(x.frame.kind[calls] == KIND_CLIENT) & ~x.lay.has_children[calls]]
    if len(calls) < 20:
        return None
    d = x.frame.dur[calls].astype(np.float64)
    median = float(np.median(d))
    edit = Edit.none(len(x.frame))
    edit.cut_after[calls] = np.maximum(d - median, 0.0)
    return Lever(
        f"network_p50:{name}",
        f"Network at its p50 ('{name}' at its median, {median / 1e6:.2f} ms: the callee is not traced)",
        SOFTWARE,
        "the callee is not traced, so the wire is inside each call: each call's time above the calls' "
        "median is removed",
        edit,
        pattern="network",
        span_name=name,
        params={"call_p50_ms": round(median / 1e6, 3)},
    )


CONNECT_WORDS = ("connect", "handshake", "dial")  # a span that opens a connection (a generic word)
ONCE_SHARE = 0.5  # run by at least half the requests, at most once per call: a connection per call


def connects_reused(x: Inputs, finding: dict[str, Any]) -> Lever | None:
    """A network finding at a span that opens a connection (its name says so:
    `connect`, a TLS handshake, a dial), run once by every request or once by each of its calls (a
    client that dials per pipeline, per shard): a connection per request pays the resolver, TCP, TLS
    and auth round trips each time. With persistent or pooled connections it is
    paid once per process: each such span takes the time of one that reused a connection (its fast
    mode, where the run has one; else nothing: a reused connection makes no round trip)."""
    from tailscope.analysis.whatif.levers import _draw, miss_threshold_ms

    name = finding.get("span_name")
    if not name or not any(w in name.lower() for w in CONNECT_WORDS):
        return None
    spans = x.spans_named(name)
    spans = spans[~x.lay.has_children[spans]]
    f = x.frame
    requests = f.request[spans]
    # at most one under each call (a fan-out dials per shard: a connection per call, not per request)
    if len(spans) < 20 or len(np.unique(f.parent[spans])) < len(spans) or (
            len(np.unique(requests)) < ONCE_SHARE * len(f.requests)):
        return None
    d = f.dur[spans].astype(np.float64)
    edit = Edit.none(len(f))
    threshold = miss_threshold_ms(d)
    reused = d[d < threshold * 1e6] if threshold is not None else d[:0]
    slow = d >= threshold * 1e6 if threshold is not None else np.ones(len(d), bool)
    edit.dur[spans[slow]] = _draw(x.rng(34), reused, int(slow.sum())) if len(reused) >= 20 else 0.0
    return Lever(
        f"network_connects_reused:{name}",
        f"Connections reused ('{name}' once per process, not per request)",
        SOFTWARE,
        f"each '{name}' that opened a connection takes the time of one that reused it (persistent or "
        "pooled connections: the handshakes' round trips paid once per process)",
        edit,
        pattern="network",
        span_name=name,
        params={"connects": int(slow.sum())},
    )
