"""A blocking call on an async worker: the co-scheduled tasks' wait goes with it.

An event loop's worker (a tokio worker thread, a Node or asyncio loop) runs one task's poll at a time;
a call made inline that blocks (a synchronous write that stalls, a lock) holds the worker for its whole
length and every task queued on that worker waits: their spans start late (gaps before them, a SERVER
span late behind its caller's CLIENT span). Where a lever shortens such a call, the time it no longer
holds the worker is taken from the waits of the other spans of that instance: those that fell inside
it, and those queued behind them until the backlog drained, go.

Which calls block so is read from the run: on an instance, spans start after a wait (a gap before
them over WAIT_NS) wait inside the stretches the lever removes from the calls: the share of their
waited time inside is BLOCK_RATIO times the share of the instance's time those stretches cover. A
dependency awaited asynchronously leaves the other tasks running, and nothing is cut."""

from __future__ import annotations

import numpy as np

from tailscope.analysis.whatif.levers import Inputs, Lever
from tailscope.analysis.whatif.retime import Edit
from tailscope.analysis.whatif.timer_levers import backlog_behind

WAIT_NS = 1_000_000  # a gap before a span over this is a wait
BLOCK_RATIO = 2.0  # waited time inside the removed stretches over this many times their share of time
MIN_WAITS = 10  # waits overlapping the removed stretches an instance needs


def _merged(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The union of intervals [a, b]: its pieces' starts, ends and the covered length before each."""
    order = np.argsort(a, kind="stable")
    a, b = a[order].astype(np.float64), b[order].astype(np.float64)
    reach = np.maximum.accumulate(b)
    new = np.r_[True, a[1:] > reach[:-1]]
    starts = a[new]
    ends = np.maximum.reduceat(b, np.nonzero(new)[0])
    before = np.r_[0.0, np.cumsum(ends - starts)[:-1]]
    return starts, ends, before


def _covered(t: np.ndarray, starts: np.ndarray, ends: np.ndarray, before: np.ndarray) -> np.ndarray:
    """The union's length up to each time t."""
    i = np.searchsorted(starts, t, side="right") - 1
    j = np.maximum(i, 0)
    return np.where(i >= 0, before[j] + np.clip(t - starts[j], 0.0, ends[j] - starts[j]), 0.0)


def unblocked(x: Inputs, edit: Edit, calls: np.ndarray) -> int:
    """Cut the co-scheduled waits inside the time the edit no longer spends in `calls` (whose new
    durations it sets), instance by instance where the waits show the worker blocked. Returns how
    many waits shrank."""
    f, lay = x.frame, x.lay
    new = np.where(np.isnan(edit.dur[calls]), f.dur[calls], edit.dur[calls])
    shorter = calls[new < f.dur[calls]]
    if not len(shorter):
        return 0
    cut_from = f.start[shorter] + new[new < f.dur[calls]]
    cut_to = (f.start + f.dur)[shorter]
    own_traces = np.unique(f.trace[shorter])
    waits = np.nonzero((lay.gap > WAIT_NS) & ~np.isin(f.trace, own_traces))[0]
    shrank = 0
    for inst in np.unique(f.instance[shorter]).tolist():
        mine = f.instance[shorter] == inst
        starts, ends, before = _merged(cut_from[mine], cut_to[mine])
        on = waits[f.instance[waits] == inst]
        if not len(on):
            continue
        a, b = (f.start[on] - lay.gap[on]).astype(np.float64), f.start[on].astype(np.float64)
        overlap = _covered(b, starts, ends, before) - _covered(a, starts, ends, before)
        spans = np.nonzero(f.instance == inst)[0]
        total = float((f.start[spans] + f.dur[spans]).max() - f.start[spans].min())
        share = float((ends - starts).sum()) / max(total, 1.0)  # of the instance's time removed
        if (overlap > 0).sum() < MIN_WAITS or overlap.sum() < BLOCK_RATIO * share * (b - a).sum():
            continue
        # the waits inside, and those queued behind them until the backlog drained, go
        behind = backlog_behind(a, b, np.ones(len(on), bool), starts, ends)
        edit.cut_before[on] += np.where(behind, lay.gap[on], 0)
        shrank += int(behind.sum())
    return shrank


def unblocked_lever(x: Inputs, lever: Lever | None) -> Lever | None:
    """`lever` (a dependency at its p50) with the waits its calls no longer cause on their workers cut."""
    if lever is None:
        return None
    calls = np.nonzero(~np.isnan(lever.edit.dur))[0]
    if unblocked(x, lever.edit, calls):
        lever.model += "; the other tasks' waits inside the time the calls no longer block their worker go"
    return lever
