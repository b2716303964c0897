"""A long synchronous step on a single-threaded event loop: the other requests' callbacks wait for it.

A loop (a Node isolate, an asyncio or a V8 worker) runs one callback at a time. A request whose step
holds the loop for tens of ms (a JSON.parse of a multi-MB body) delays every other request on that
instance whose callback became ready meanwhile: an INTERNAL step starts late (the gap before it), a
CLIENT call's answer is read late (the call's span ends late). A lever that shortens the blocking step
(a payload at the median size) must also shorten those waits.

The model. *Identified* from the run, per instance: the gaps of other requests (in a parent on the
same instance) that start inside a blocker's busy stretch end at or after its end (LOOP_SHARE of
them, at least MIN_WAITS): nothing ran beside it, one loop. *The blockers replayed*: served first come
first served from when each became ready (its start less the gap before it), each for its new work:
their own waits behind one another follow. *The victims*: a wait (the gap before a callback; a call's
span, whose answer is read by a callback) longer than its kind's typical length beside no blocker, in
a backlog (waits overlapping one another) that met a blocker's busy stretch: held by it, or queued
behind the callbacks it held. The wait a blocked loop builds (the held time and the backlog behind
it) is taken to scale with the blockers' busy time: each keeps the replayed busy time's share of the
old of its excess over the typical length. *Assumptions*: one loop per instance; the victims' own
callbacks are short beside the blockers' (the backlog drains as fast as before); a call's time over
its typical length while the loop was blocked is the late read (not a slow answer); arrivals as in
the run."""

from __future__ import annotations

import numpy as np

from tailscope.analysis.diagnosis.frame import KIND_CLIENT
from tailscope.analysis.whatif.levers import Inputs
from tailscope.analysis.whatif.replay import fifo_starts
from tailscope.analysis.whatif.retime import Edit
from tailscope.analysis.whatif.timer_levers import backlog_behind

ABUT_NS = 100_000  # a wait that ends this little before the blocker's end ended with it
LOOP_SHARE = 0.8  # of the gaps starting inside a blocker that end at or after its end
MIN_WAITS = 10


def _replayed(ready: np.ndarray, start: np.ndarray, end: np.ndarray, new: np.ndarray
              ) -> tuple[np.ndarray, np.ndarray]:
    """Each blocker's busy stretch (start, end) with the loop replayed: blockers in ready order, each
    served for its new work from when it was ready and the loop free (replay.fifo_starts through one
    server). `start`/`end`: the old busy stretch, whose part before the previous blocker's end was a
    wait, not work; `new`: its new length."""
    prev_end = np.r_[-np.inf, np.maximum.accumulate(end)[:-1]]
    work = end - np.maximum(start, prev_end)
    cut = (end - start) - new  # the lever's cut from the stretch
    service = np.maximum(work - cut, 0.0)
    starts = fifo_starts(ready, service, 1)
    return starts, starts + service


def loop_waits(x: Inputs, edit: Edit, blockers: np.ndarray, busy_start: np.ndarray,
               new_len: np.ndarray) -> int:
    """Cut, in `edit`, the waits of the other requests' callbacks behind `blockers` (spans whose busy
    stretch [busy_start, their end] the edit shortens to `new_len`), instance by instance where the run
    shows one loop. Returns how many waits shrank."""
    f, lay = x.frame, x.lay
    end_all = (f.start + f.dur).astype(np.float64)
    other = ~np.isin(f.trace, np.unique(f.trace[blockers]))
    shrank = 0
    for inst in np.unique(f.instance[blockers]).tolist():
        sel = np.nonzero(f.instance[blockers] == inst)[0]
        sel = sel[np.argsort(busy_start[sel], kind="stable")]  # the busy stretches in time order
        mine, b_start, b_new = blockers[sel], busy_start[sel].astype(np.float64), new_len[sel]
        b_end = end_all[mine]
        on = other & (f.instance == inst)
        # a gap in a parent on the same instance is the loop's (a remote parent's: the network)
        gaps = np.nonzero(on & (lay.gap > 0) & (lay.parent >= 0))[0]
        gaps = gaps[f.instance[lay.parent[gaps]] == inst]
        g0 = (f.start[gaps] - lay.gap[gaps]).astype(np.float64)
        g1 = f.start[gaps].astype(np.float64)
        # identification: gaps starting inside a busy stretch end at or after it
        k = np.searchsorted(b_start, g0, side="right") - 1
        inside = (k >= 0) & (g0 < b_end[np.maximum(k, 0)])
        if inside.sum() < MIN_WAITS or (g1[inside] >= b_end[k[inside]] - ABUT_NS).mean() < LOOP_SHARE:
            continue
        ready = (f.start[mine] - lay.gap[mine]).astype(np.float64)
        order = np.argsort(ready, kind="stable")  # the loop replayed in the order they were ready
        new_start, new_end = np.empty(len(mine)), np.empty(len(mine))
        new_start[order], new_end[order] = _replayed(ready[order], b_start[order], b_end[order], b_new[order])
        worked = b_end - np.maximum(b_start, np.r_[-np.inf, np.maximum.accumulate(b_end)[:-1]])
        kept = min(float((new_end - new_start).sum()) / max(float(worked.sum()), 1.0), 1.0)
        calls = np.nonzero(on & (f.kind == KIND_CLIENT))[0]
        c1 = end_all[calls]
        c0 = c1 - lay.trailing[calls].astype(np.float64)  # the answer's callback: after the last child
        key = np.r_[2 * f.name[gaps], 2 * f.name[calls] + 1]  # a gap before a span, a call's read
        cut = _cut(key, np.r_[g0, c0], np.r_[g1, c1], b_start, b_end, kept)
        edit.cut_before[gaps] += cut[: len(gaps)]
        edit.cut_after[calls] += cut[len(gaps):]
        shrank += int((cut > 0).sum())
        # the blockers' own waits for the loop (one queued behind another) follow the replay
        prev = np.full(len(mine), -np.inf)
        prev[order[1:]] = new_end[order[:-1]]
        waited = (f.start[mine] - ready).astype(np.float64)
        after = np.clip(prev - ready, 0.0, waited)
        edit.cut_before[mine] += waited - after
    return shrank


def _cut(key: np.ndarray, s0: np.ndarray, s1: np.ndarray, b_start: np.ndarray,
         b_end: np.ndarray, kept: float) -> np.ndarray:
    """What to cut from each of these waits [s0, s1] (the gaps before callbacks, the calls' reads of
    their answers) the blockers made: those longer than their kind's typical length beside no
    blocker in a backlog (waits overlapping one another) that met a blocker's busy stretch (held by
    it, or queued behind the callbacks it held). The wait a blocked loop builds (the held time and the
    backlog behind it) is taken to scale with the blockers' busy time: each keeps `kept` (the
    replayed busy time over the old) of its excess over the typical length."""
    length = s1 - s0
    behind = backlog_behind(s0, s1, length > ABUT_NS, b_start, b_end)
    typical = np.zeros(len(key))
    for code in np.unique(key[behind]).tolist():
        same = key == code
        calm = length[same & ~behind]
        typical[same] = float(np.median(calm)) if len(calm) else float(np.quantile(length[same], 0.1))
    return np.where(behind, np.clip(length - typical, 0.0, None) * (1.0 - kept), 0.0)
