"""Calls cut by their per-try deadline and made again, answered in time once a fix makes the callee
fast: a client that gives up on an attempt at its deadline leaves the callee running (its span
outlasts the call: laid out in an ancestor, `frame.excl_parent`) and calls again. Where a lever
re-times that callee to end before the deadline, the attempt answers: it takes the callee's new time
plus the call's usual overhead, and the attempts after it (with their back-off) are not made."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tailscope.analysis.diagnosis.frame import TraceFrame
from tailscope.analysis.whatif.retime import Edit, Layout, Retimed

SHORTER_NS = 1_000_000  # the lever shortened the callee by at least this much
OUTLASTED_NS = 1_000_000  # a callee that outlasts its call by this much (and this share of it) ...
OUTLASTED_SHARE = 0.05  # ... ran on after the caller gave up (less: the clocks' skew)
DEADLINE_SPREAD = 0.05  # the given-up calls of a name within this share of their median: a deadline


@dataclass(frozen=True)
class Attempts:
    call: np.ndarray  # an attempt whose callee outlasted it and that was made again
    callee: np.ndarray  # its callee's span (laid out in an ancestor)
    overhead: np.ndarray  # the call's usual time around its callee (ns): the answered calls' median
    later: list[np.ndarray]  # per attempt: the same call made again after it (same caller and name)


def abandoned_attempts(frame: TraceFrame, lay: Layout) -> Attempts | None:
    """The attempts cut at a deadline and made again (None where the run has none): a call whose
    callee ran on past it (by more than the clocks' skew), the calls of its name given up so alike
    long (a deadline), and made again by the same caller after it ended."""
    f = frame
    kid = np.nonzero((f.parent >= 0) & (lay.parent != f.parent))[0]
    call = f.parent[kid]
    over = (f.start[kid] + f.dur[kid] - f.start[call] - f.dur[call]).astype(np.float64)
    outlasted = over > np.maximum(OUTLASTED_NS, OUTLASTED_SHARE * f.dur[call])  # not a clock's skew
    kid, call = kid[outlasted], call[outlasted]
    if len(kid) == 0:
        return None
    # a deadline is one value: the given-up calls of a name last about as long as each other
    keep = np.zeros(len(call), bool)
    for code in np.unique(f.name[call]).tolist():
        mine = f.name[call] == code
        d = f.dur[call[mine]].astype(np.float64)
        keep[mine] = np.abs(d - np.median(d)) <= DEADLINE_SPREAD * np.median(d)
    kid, call = kid[keep], call[keep]
    _, first = np.unique(call, return_index=True)
    kid, call = kid[first], call[first]
    caller = f.parent[call]
    keep = caller >= 0
    kid, call, caller = kid[keep], call[keep], caller[keep]
    if len(call) == 0:  # no calls of a name given up alike (no deadline), or none with a traced caller
        return None
    siblings = np.nonzero(np.isin(f.parent, np.unique(caller)))[0]
    groups: dict[tuple[int, int], np.ndarray] = {}
    order = siblings[np.lexsort((f.start[siblings], f.name[siblings], f.parent[siblings]))]
    key = f.parent[order] * (len(f.names) + 1) + f.name[order]
    cuts = np.r_[0, np.nonzero(np.diff(key))[0] + 1, len(order)]
    for a, b in zip(cuts[:-1].tolist(), cuts[1:].tolist(), strict=True):
        groups[(int(f.parent[order[a]]), int(f.name[order[a]]))] = order[a:b]
    out_call, out_kid, later = [], [], []
    end = f.start + f.dur
    for c, k, p in zip(call.tolist(), kid.tolist(), caller.tolist(), strict=True):
        same = groups[(p, int(f.name[c]))]
        after = same[f.start[same] >= end[c]]
        if len(after):
            out_call.append(c)
            out_kid.append(k)
            later.append(after)
    if not out_call:
        return None
    c_arr, k_arr = np.array(out_call, np.int64), np.array(out_kid, np.int64)
    return Attempts(c_arr, k_arr, _overheads(f, lay, c_arr), later)


def _overheads(f: TraceFrame, lay: Layout, calls: np.ndarray) -> np.ndarray:
    """Per attempt: the median, over the calls of its name answered with one awaited callee, of the
    call's time less its callee's (the network and the client's own work around the answer)."""
    kid = np.nonzero((f.parent >= 0) & (lay.parent == f.parent))[0]
    call = f.parent[kid]
    once = np.bincount(call, minlength=len(f))[call] == 1
    kid, call = kid[once], call[once]
    out = np.zeros(len(calls))
    for code in np.unique(f.name[calls]).tolist():
        mine = f.name[call] == code
        if mine.any():
            extra = (f.dur[call[mine]] - f.dur[kid[mine]]).astype(np.float64)
            out[f.name[calls] == code] = max(float(np.median(extra)), 0.0)
    return out


def answered_in_time(frame: TraceFrame, lay: Layout, attempts: Attempts | None, edit: Edit,
                     timed: Retimed) -> Edit | None:
    """The edit with the attempts whose callee the lever made end before the deadline answered
    (`timed`: the run re-timed with `edit`); None where there are none."""
    if attempts is None:
        return None
    a = attempts
    start = timed.absolute_start(frame, lay)
    took = (start[a.callee] + timed.dur[a.callee] - start[a.call]).astype(np.float64) + a.overhead
    before = (frame.start[a.callee] + frame.dur[a.callee] - frame.start[a.call]).astype(np.float64)
    deadline = frame.dur[a.call].astype(np.float64)
    ok = np.isnan(edit.dur[a.call]) & (took <= deadline) & (took < before + a.overhead - SHORTER_NS)
    if not ok.any():
        return None
    out = Edit(edit.dur.copy(), edit.cut_before.copy(), edit.cut_after.copy())
    answered = a.call[ok]
    out.dur[answered] = took[ok]
    gone = np.concatenate([a.later[i] for i in np.nonzero(ok)[0].tolist()])
    out.dur[gone] = 0.0  # not made: no time, and no back-off before it
    out.cut_before[gone] = lay.gap[gone]
    # the callee work of the attempts not made is not there either
    below = np.nonzero((frame.parent >= 0) & np.isin(frame.parent, gone) & (lay.parent != frame.parent))[0]
    out.dur[below] = 0.0
    return out
