"""The cold-start lever: an instance's first work at a warm instance's speed (see levers.py).

Which work was cold: where the diagnosis' finding says how many requests per instance warmed up, the
first that many requests of each request-root instance (every span of them); else (a finding given
without that count, a cold instance that is a callee: a model server's pod added mid-run, a worker
process forked again) per instance from the finding's span itself: an instance's leading spans of that
name while they run slower than the name's warm time, and every span of that instance started before
its warm-up ended; where no instance shows such a warm-up (one span of the name per instance, or
the instances not told apart), per request (`cold_requests`): an initialisation span that only a
few requests run, or a callee that started far later after its caller's call than it usually does
(an environment started for the call), and the requests' other work on that service."""

from __future__ import annotations

from typing import Any

import numpy as np

from tailscope.analysis.whatif.levers import SOFTWARE, Inputs, Lever, _draw, miss_threshold_ms
from tailscope.analysis.whatif.retime import Edit

MIN_WARM = 20  # warm spans of a name to draw an own time from
COLD_RATIO = 1.5  # a leading span slower than this many times the name's warm median is still cold
COLD_WINDOW = 5  # ... judged on the running median of this many spans (one slow span is noise)


def prewarmed(x: Inputs, finding: dict[str, Any]) -> Lever | None:
    f = x.frame
    stats = finding.get("evidence", {}).get("stats", {})
    warm = int(stats.get("warmup_requests_per_instance") or 0)
    starts = None
    if warm > 0:
        early_req = f.requests.index_on_instance < warm
        early = (f.request >= 0) & early_req[np.maximum(f.request, 0)]
        what = f"first {warm} requests per instance"
        # and the calls that waited for an instance to take them (a new pod's first connections:
        # the caller's gap before the callee span), read from the span as without the count
        starts = cold_requests(x, stats.get("warmup_span") or finding.get("span_name"))
        if starts is not None and len(starts[2]) == 0:
            starts = None
        if starts is not None:
            early = early | starts[0]
    else:
        name = _peer_span(x, finding.get("span_name"), stats.get("peer")) or finding.get("span_name")
        early = cold_spans(x, name)
        starts = cold_requests(x, name)
        if early is None and starts is None:
            early = cold_after_change(x, name)  # not at its start: an instance gone cold mid-run
        if early is None and starts is None:
            return None
        if starts is not None:  # and an instance warming up on its first requests beside
            early = starts[0] if early is None else early | starts[0]
            what = f"{len(np.unique(x.frame.request[starts[0]]))} requests that started an instance"
        else:
            what = f"{int(early.sum())} spans of instances warming up"
    leaf = ~x.lay.has_children & (f.request >= 0)
    edit = Edit.none(len(f))
    rng = x.rng(5)
    for code in np.unique(f.name[leaf & early]).tolist():
        pool = f.dur[leaf & ~early & (f.name == code)]
        spans = np.nonzero(leaf & early & (f.name == code))[0]
        if len(pool):
            edit.dur[spans] = _draw(rng, pool, len(spans))
    _warm_forwards_by_size(x, early, edit, rng)
    _warm_own_time(x, early, edit, rng)
    if starts is not None:
        _started_warm(x, starts[1], starts[2], edit, rng)
    return Lever(
        "prewarmed",
        f"Cold starts pre-warmed ({what})",
        SOFTWARE,
        "each span of an instance's first requests takes the time of the same span once warm, and its "
        "own time around its children (lazy initialisation, interpreted code) a warm one's (drawn from "
        "the run); the queue is replayed",
        edit,
        pattern="cold_start",
        requeue=True,
        params={"warmup_requests": warm} if warm > 0 else {"cold_spans": int(early.sum())},
    )


def cold_spans(x: Inputs, name: str | None) -> np.ndarray | None:
    """Per span: whether it ran while its instance warmed up, read from the finding's span `name`:
    on each instance, its leading spans of that name while their running median (COLD_WINDOW) is over
    COLD_RATIO times the name's warm median (the later half of every instance's spans), then while each
    one is, and every span of the instance that started before the first warm one. None where no
    instance starts cold."""
    f = x.frame
    spans = x.spans_named(name)
    if len(spans) < 2 * MIN_WARM:
        return None
    inst = f.instance[spans]
    order = np.lexsort((f.start[spans], inst))
    spans, inst = spans[order], inst[order]
    first = np.r_[True, inst[1:] != inst[:-1]]
    starts = np.nonzero(first)[0]
    ends = np.r_[starts[1:], len(spans)]
    later = np.concatenate([spans[a + (b - a) // 2: b] for a, b in zip(starts, ends, strict=True)])
    limit = COLD_RATIO * float(np.median(f.dur[later]))
    out = np.zeros(len(f), bool)
    for a, b in zip(starts.tolist(), ends.tolist(), strict=True):
        d = f.dur[spans[a:b]].astype(np.float64)
        warm_at = _warm_at(d, limit)
        if warm_at == 0:
            continue
        until = f.start[spans[a + warm_at]] if a + warm_at < b else np.iinfo(np.int64).max
        i = inst[a]
        out |= (f.instance == i) & (f.start < until) & (f.request >= 0)
    return out if out.any() else None


def _warm_at(d: np.ndarray, limit: float) -> int:
    """Where an instance's spans (in start order) are warm: from the first window (COLD_WINDOW spans)
    whose running median stays under `limit` for MIN_WARM windows on (a warm-up's slow spans thin
    out: a window of fast ones can come before its last slow stretch), then past the slow spans of
    that first window; an instance with too few spans to settle: the first window under it. len(d):
    never warm."""
    k = min(COLD_WINDOW, len(d))
    running = np.median(np.lib.stride_tricks.sliding_window_view(d, k), axis=1)
    ok = running <= limit
    settled = np.convolve(ok, np.ones(MIN_WARM), "valid") >= MIN_WARM if len(ok) >= MIN_WARM else ok[:0]
    first_ok = int(np.argmax(ok)) if ok.any() else len(d)
    warm_at = int(np.argmax(settled)) if settled.any() else first_ok
    slow = np.nonzero(d[: warm_at + k] > limit)[0]  # the settling window's own slow spans, or the
    return max(warm_at, int(slow[-1]) + 1) if len(slow) else warm_at  # first alone (a lazy start)


def _warm_own_time(x: Inputs, early: np.ndarray, edit: Edit, rng) -> None:
    """A warm-up span's own time (a parent's time before each child it runs on its own instance,
    and after its last child: where a cold process initialises lazily and runs interpreted code)
    takes the same span's own time in a warm request, drawn from the run. A child on another
    instance keeps its gap (the network and the wait for a thread: their own levers')."""
    f, lay = x.frame, x.lay
    inside = f.request >= 0
    parent = np.maximum(lay.parent, 0)
    local = inside & (lay.parent >= 0) & (f.instance == f.instance[parent])
    for values, rows, cut in ((lay.gap, local, edit.cut_before),
                              (lay.trailing, inside & lay.has_children, edit.cut_after)):
        for code in np.unique(f.name[rows & early]).tolist():
            pool = values[rows & ~early & (f.name == code)]
            spans = np.nonzero(rows & early & (f.name == code))[0]
            if len(pool) >= MIN_WARM:
                cut[spans] = values[spans] - _draw(rng, pool, len(spans))


def _warm_forwards_by_size(x: Inputs, early_span: np.ndarray, edit: Edit, rng) -> None:
    """A warm-up forward pass takes the time of a warm batch of the same size (a batch's cost grows
    with its size: drawn from all sizes, a warm-up batch of 8 would cost what a batch of 1 does),
    where the run has warm batches of that size."""
    s = x.served
    if s is None:
        return
    early = early_span[s.forward]
    for k in np.unique(s.size[early]).tolist():
        pool = x.frame.dur[s.forward[~early & (s.size == k)]]
        rows = np.nonzero(early & (s.size == k))[0]
        if len(pool):
            edit.dur[s.forward[rows]] = _draw(rng, pool, len(rows))


ONE_OFF_SHARE = 0.5  # a span fewer requests than this share run is an instance's one-time start
MIN_INITS = 3  # an init child seen fewer times than this is no pattern


def cold_requests(x: Inputs, name: str | None) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """The requests that waited for an instance to start, told from the finding's span `name` alone
    (no warm-up per instance in sight): where fewer than half the requests run a span of that name,
    it is an instance's start (an init phase), run by the requests that have it; else where the
    span is a callee (its caller on another instance), the calls it took far longer to start than
    usual (the gap before it in the caller's call: a second, slower mode of the log gaps, the split
    a cache's hits and misses get). Returns (every span of those requests on the span's service, the
    init spans, the callee spans that started late); None where neither is seen."""
    f, lay = x.frame, x.lay
    spans = x.spans_named(name)
    if len(spans) == 0:
        return None
    none = np.zeros(0, np.int64)
    child = _init_child(x, spans)
    if len(np.unique(f.request[spans])) < ONE_OFF_SHARE * len(f.requests):
        init, late = spans, none
    elif child is not None:  # the span every request runs, its init a child few of them run
        init, late = child, none
    else:
        parent = lay.parent[spans]
        called = spans[(parent >= 0) & (f.instance[np.maximum(parent, 0)] != f.instance[spans])]
        if len(called) < 2 * MIN_WARM:
            return None
        threshold = miss_threshold_ms(np.maximum(lay.gap[called], 1))
        if threshold is None:
            return None
        init, late = none, called[lay.gap[called] >= threshold * 1e6]
    cold = np.zeros(len(f.requests), bool)
    cold[f.request[np.r_[init, late]]] = True
    early = (f.request >= 0) & cold[np.maximum(f.request, 0)] & (f.service == f.service[spans[0]])
    return early, init, late


def _init_child(x: Inputs, spans: np.ndarray) -> np.ndarray | None:
    """The init phase inside a span most requests run (a function's `Initialization` under its
    invocation span): a child name on the span's service that fewer than ONE_OFF_SHARE of the requests
    run, nearly always its parent's first child (the start comes before the work), the longest in
    total of those; its spans, or None."""
    f, lay = x.frame, x.lay
    kids = np.nonzero(np.isin(lay.parent, spans) & (f.service == f.service[spans[0]]))[0]
    first_start = np.full(len(f), np.iinfo(np.int64).max)
    np.minimum.at(first_start, lay.parent[kids], lay.rel_start[kids].astype(np.int64))
    leads = lay.rel_start[kids] <= first_start[lay.parent[kids]]  # it runs before the handler's work
    best, most = None, 0.0
    for code in np.unique(f.name[kids]).tolist():
        mine = kids[f.name[kids] == code]
        if len(np.unique(f.request[mine])) >= ONE_OFF_SHARE * len(f.requests) or len(mine) < MIN_INITS:
            continue
        if leads[f.name[kids] == code].mean() < 0.9:
            continue
        total = float(f.dur[mine].sum())
        if total > most:
            best, most = mine, total
    return best


def _started_warm(x: Inputs, init: np.ndarray, late: np.ndarray, edit: Edit, rng) -> None:
    """An instance started before the requests came: its init spans are no longer run, and a callee
    that waited to start takes the wait of a call to a started one (drawn from the run)."""
    edit.dur[init] = 0.0
    edit.cut_before[init] = x.lay.gap[init]
    if len(late):
        f, lay = x.frame, x.lay
        called = x.spans_named(f.names[f.name[late[0]]])
        parent = lay.parent[called]
        remote = called[(parent >= 0) & (f.instance[np.maximum(parent, 0)] != f.instance[called])]
        pool = lay.gap[np.setdiff1d(remote, late)]
        if len(pool):
            edit.cut_before[late] = lay.gap[late] - _draw(rng, pool, len(late))


def _peer_span(x: Inputs, name: str | None, peer: str | None) -> str | None:
    """Where the finding names a caller's span and the cold instance it called (`peer`, a traced
    instance of the run: a replica that joined mid-run), the name of that instance's spans the calls
    reached (its SERVER spans: the warm-up is read on its own work, not on the callers')."""
    f = x.frame
    if peer is None or peer not in f.instances or name is None or name not in f.names:
        return None
    calls = f.name == f.names.index(name)
    parent = x.lay.parent
    reached = (parent >= 0) & calls[np.maximum(parent, 0)] & (f.instance == f.instances.index(peer))
    if not reached.any():
        return None
    codes, counts = np.unique(f.name[reached], return_counts=True)
    return f.names[int(codes[np.argmax(counts)])]


def cold_after_change(x: Inputs, name: str | None) -> np.ndarray | None:
    """Per span: whether it ran while its instance was cold after a change mid-run (a new index
    swapped in whose pages are not yet in the page cache, a cache flushed by a deploy): on each
    instance, from the first window of COLD_WINDOW spans of the name whose running median is over
    COLD_RATIO times the instance's first quarter's median (after at least MIN_WARM spans), until the
    spans settle again (`_warm_at` against COLD_RATIO times the later half's median), every span of
    the instance started in that stretch. None where no instance goes cold so."""
    f = x.frame
    spans = x.spans_named(name)
    if len(spans) < 2 * MIN_WARM:
        return None
    out = np.zeros(len(f), bool)
    for i in np.unique(f.instance[spans]).tolist():
        own = spans[f.instance[spans] == i]
        own = own[np.argsort(f.start[own], kind="stable")]
        if len(own) < 4 * MIN_WARM:
            continue
        d = f.dur[own].astype(np.float64)
        before = COLD_RATIO * float(np.median(d[: len(d) // 4]))
        running = np.median(np.lib.stride_tricks.sliding_window_view(d, COLD_WINDOW), axis=1)
        over = np.nonzero(running[MIN_WARM:] > before)[0]
        if len(over) == 0:
            continue
        onset = MIN_WARM + int(over[0])
        rest = d[onset:]
        limit = COLD_RATIO * float(np.median(rest[len(rest) // 2:]))
        warm_at = _warm_at(rest, limit)
        if warm_at == 0 or warm_at >= len(rest):
            continue
        began, until = f.start[own[onset]], f.start[own[onset + warm_at]]
        out |= (f.instance == i) & (f.start >= began) & (f.start < until) & (f.request >= 0)
    return out if out.any() else None
