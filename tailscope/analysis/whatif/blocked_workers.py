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

from tailscope.analysis.whatif.levers import SOFTWARE, Inputs, Lever
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


def unblocked(x: Inputs, edit: Edit, calls: np.ndarray, own: bool = True) -> int:
    """Cut the co-scheduled waits inside the time the edit no longer spends in `calls` (whose new
    durations it sets), instance by instance where the waits show the worker blocked. Returns how
    many waits shrank. `own` False: the waits of the calls' own traces are counted too (a call every
    request makes, of which a few block: its traces are every request's)."""
    f, lay = x.frame, x.lay
    new = np.where(np.isnan(edit.dur[calls]), f.dur[calls], edit.dur[calls])
    shorter = calls[new < f.dur[calls]]
    if not len(shorter):
        return 0
    cut_from = f.start[shorter] + new[new < f.dur[calls]]
    cut_to = (f.start + f.dur)[shorter]
    own_traces = np.unique(f.trace[shorter]) if own else np.zeros(0, np.int64)
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


LONG_OVER_MEDIAN = 2.0


def loop_unblocked(x: Inputs, finding: dict) -> Lever | None:
    """A queueing finding whose waits are a blocked worker's (a synchronous call inside an async
    handler: the loop runs nothing else while it lasts): the calls of the finding's service that block
    their worker (`unblocked`'s test, per call name: the instance's waits fall inside them BLOCK_RATIO
    times more than their share of its time) made non-blocking: each keeps its own time for its own
    request, and the other tasks' waits inside it, and those queued behind them, go. None where no
    call blocks so. Only a name's long calls (over LONG_OVER_MEDIAN x its median) are tried: a query
    every request awaits and a few block share a name, and the short ones would dilute the test."""
    from tailscope.analysis.diagnosis.frame import KIND_CLIENT

    f, lay = x.frame, x.lay
    spans = x.spans_named(finding.get("span_name"))
    if len(spans) == 0:
        return None
    service = np.unique(f.service[spans])
    leaf = (~lay.has_children) & (f.request >= 0) & (f.kind == KIND_CLIENT) & np.isin(f.service, service)
    edit = Edit.none(len(f))
    names, shrank = [], 0
    for code in np.unique(f.name[leaf]).tolist():
        calls = np.nonzero(leaf & (f.name == code))[0]
        calls = calls[f.dur[calls] > LONG_OVER_MEDIAN * np.median(f.dur[calls])]  # the long ones only
        if len(calls) == 0:
            continue
        trial = Edit.none(len(f))
        trial.dur[calls] = 0.0  # the whole call no longer holds the worker
        n = unblocked(x, trial, calls, own=False)
        if n:
            edit.cut_before = np.maximum(edit.cut_before, trial.cut_before)
            names.append(f.names[code])
            shrank += n
    if not shrank:
        return None
    name = finding.get("span_name")
    return Lever(
        f"queue_unblocked:{name}",
        f"The worker no longer blocked by {', '.join(repr(n) for n in names)}",
        SOFTWARE,
        "the calls that hold their worker (waits of other requests fall inside them far more than their "
        "share of time) made non-blocking (awaited, or off the loop): each keeps its own time, and the "
        "waits of the other requests inside it and queued behind it go",
        edit,
        pattern="queueing",
        span_name=name,
        params={"waits_cut": shrank},
    )
