"""The levers on a queue a span names that is not the model's batcher: a wait span of its own (a
scheduler's wait, an admission queue), and a bounded pool's (a checkout span, or the gap before the
call whose job waits for a worker), as in calm stretches (see queue_levers.py)."""

from __future__ import annotations

import numpy as np

from tailscope.analysis.whatif.levers import CAPACITY, Inputs, Lever
from tailscope.analysis.whatif.queue_levers import CALM_BINS, _calm
from tailscope.analysis.whatif.retime import Edit


def wait_span_as_calm(x: Inputs, finding: dict) -> Lever | None:
    """A queueing finding that names a wait span of its own (a scheduler's wait for memory or a slot,
    an admission queue: not the model's batcher, served.py): each wait of a stretch whose mean wait is
    over twice the quieter quarter's takes the time of a wait in a calm stretch (drawn from the run).
    A bounded pool's job waits for a worker before its span starts (Vert.x's executeBlocking, a
    thread pool's queue): the gap before the span is the wait, the span its hold of a worker; so the
    gap before each span of a stretch whose mean gap is over twice the quieter quarter's is cut to a
    calm one's, per caller (the parent's name: another route's steps before it are its own). The
    spans' draws are per caller too (a burst's route holds the pool longer than the others').
    Not where the spans are the requests' roots: a root is the whole request, its work included, no
    wait of its own (a worker pool's queue behind IO threads shows only inside it: requests_as_calm)."""
    name = finding.get("span_name")
    spans = x.spans_named(name)
    if len(spans) < 2 * CALM_BINS or (x.served is not None and np.isin(spans, x.served.queue).any()):
        return None
    reqs = x.frame.requests
    if reqs is not None and np.isin(spans, reqs.root).mean() >= 0.5:
        return None
    f, lay = x.frame, x.lay
    edit = Edit.none(len(f))
    caller = np.where(lay.parent[spans] >= 0, f.name[np.maximum(lay.parent[spans], 0)], -1)
    rng, changed = x.rng(26), [0, 0]
    for kind in (_CALM_DURATION, _CALM_GAP):
        value = (f.dur[spans] if kind == _CALM_DURATION else lay.gap[spans]).astype(np.float64)
        calm = _calm(f.start[spans], value, deep=True)
        if calm is None:
            continue
        rows = np.nonzero(~calm)[0]
        drawn = _drawn_per_caller(rng, value, calm, caller, rows)
        if kind == _CALM_DURATION:
            edit.dur[spans[rows]] = np.minimum(drawn, f.dur[spans[rows]])
        else:
            edit.cut_before[spans[rows]] = np.maximum(value[rows] - drawn, 0.0)
        changed[kind] = len(rows)
    if sum(changed) == 0:
        return None
    return Lever(
        f"queue_as_calm:{name}",
        f"'{name}' as in calm stretches (peaks absorbed)",
        CAPACITY,
        f"each '{name}' of a stretch whose mean wait is over twice the quieter quarter's takes the time of "
        "a wait in a calm stretch (drawn from the run), and so does the wait before it where that was long "
        "(a pool's job waiting for a worker before its span starts): the peaks met with capacity or "
        "admission; what the added work does to the service times (a larger batch's slower steps) is not "
        "modelled",
        edit,
        pattern="queueing",
        span_name=name,
        params={"waits_redrawn": changed[_CALM_DURATION], "gaps_cut": changed[_CALM_GAP]},
    )


_CALM_DURATION, _CALM_GAP = 0, 1


def pool_as_calm(x: Inputs, finding: dict) -> Lever | None:
    """A queueing finding at a pool's wait (a checkout span, or the call whose job waits for a worker):
    the queue of a bounded pool is its holders' doing, so it goes as a contended lock's does where the
    holders got slow (lock_levers.pool_held_as_calm: no wait for a slot, and each step run while a slot
    is held, in a stretch where that step was slow, takes a calm one's time). None where no holder got
    slow (a burst of more callers: `wait_span_as_calm`)."""
    from tailscope.analysis.whatif.lock_levers import pool_held_as_calm

    held = pool_held_as_calm(x, finding)
    if held is None:
        return None
    name = finding.get("span_name")
    held.key, held.label = f"queue_as_calm_held:{name}", f"'{name}' as a pool held as in calm stretches"
    held.pattern, held.kind = "queueing", CAPACITY
    return held


def _drawn_per_caller(rng: np.random.Generator, value: np.ndarray, calm: np.ndarray, caller: np.ndarray,
                      rows: np.ndarray) -> np.ndarray:
    """For each disturbed row, a calm row's value of the same caller (any calm row where its caller
    has none)."""
    out = value[np.nonzero(calm)[0][rng.integers(0, int(calm.sum()), len(rows))]]
    for code in np.unique(caller[rows]).tolist():
        mine = caller[rows] == code
        pool = np.nonzero(calm & (caller == code))[0]
        if len(pool):
            out[mine] = value[pool[rng.integers(0, len(pool), int(mine.sum()))]]
    return out
