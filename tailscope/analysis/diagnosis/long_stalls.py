"""gc_pause's strongest evidence: stall episodes longer than a request in which the process
finished no work. A pause freezes a process for as long as it lasts; co-slowness from ordinary
queueing cannot outlast ordinary work, and while a queue drains the work in flight keeps ending."""

from __future__ import annotations

import numpy as np

from tailscope.analysis.diagnosis.model import Context
from tailscope.analysis.diagnosis.stats import excess_share


def _stall_time(t: np.ndarray, s0: np.ndarray, s1: np.ndarray, cum: np.ndarray) -> np.ndarray:
    """Stall time in [0, t) given sorted episodes [s0, s1) and cum = stall time before each one."""
    k = np.searchsorted(s0, t, side="right") - 1
    kk = np.maximum(k, 0)
    inside = np.clip(t - s0[kk], 0, s1[kk] - s0[kk])
    return np.where(k >= 0, cum[kk] + inside, 0)


def stall_overlap(inst, t0, t1, ep_inst, ep_t0, ep_t1) -> np.ndarray:
    """Per interval [t0, t1) on instance `inst`: total time inside stall episodes of that instance."""
    out = np.zeros(len(inst), np.float64)
    for i in np.unique(ep_inst):
        sel = ep_inst == i
        s0, s1 = ep_t0[sel], ep_t1[sel]
        cum = np.r_[0, np.cumsum(s1 - s0)]
        m = inst == i
        out[m] = _stall_time(t1[m], s0, s1, cum) - _stall_time(t0[m], s0, s1, cum)
    return out


def _frozen(ctx: Context, ep_inst, ep_t0, ep_t1, margin: int) -> np.ndarray:
    """Per episode: whether its process finished no work inside it. A paused process finishes
    nothing; a long co-slow stretch in which work spans keep ending (a queue draining after a burst
    while the model keeps stepping) is load, not a pause. Work = leaf spans not in the queue stage;
    an episode's first and last `margin` ns are left out (bins are coarse)."""
    f = ctx.frame
    work = np.nonzero(f.leaf & (f.request >= 0) & ~ctx.span_stage_mask("queue"))[0]
    if not len(work):
        return np.ones(len(ep_t0), bool)
    scale = int(f.end.max()) + 1
    keys = np.sort(f.instance[work].astype(np.int64) * scale + f.end[work])
    lo = np.searchsorted(keys, ep_inst.astype(np.int64) * scale + ep_t0 + margin, side="right")
    hi = np.searchsorted(keys, ep_inst.astype(np.int64) * scale + np.maximum(ep_t1 - margin, ep_t0 + margin))
    return (hi - lo) < 2


def long_stalls(ctx: Context, ep_inst, ep_t0, ep_t1, margin: int) -> tuple[float, float]:
    """Share of the tail excess spent in stall episodes longer than the median request in which the
    process finished no work (see _frozen), and the share of tail requests overlapping one."""
    reqs, split = ctx.frame.requests, ctx.split
    long = ((ep_t1 - ep_t0) > np.median(reqs.latency)) & _frozen(ctx, ep_inst, ep_t0, ep_t1, margin)
    if not long.any():
        return 0.0, 0.0
    args = (ep_inst[long], ep_t0[long], ep_t1[long])
    overlap = stall_overlap(reqs.instance, reqs.start, reqs.start + reqs.latency, *args)
    hit = float((overlap[split.tail] > 0).mean()) if split.tail.any() else 0.0
    return excess_share(overlap, split), hit
