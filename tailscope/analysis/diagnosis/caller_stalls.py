"""caller_stalls: a caller's own process stall read as the wire (network.py's discount).

Mechanism. A process that stops (a stop-the-world collection, a frozen container) runs nothing until it
resumes: every span it has in flight ends at (nearly) the moment it runs again, and the work that
arrived meanwhile (the requests it would have begun) starts at that moment. A CLIENT span whose reply
arrived during the stop ends late around an unchanged SERVER span, and the client-server gap grows.
So the large gaps of a stalled caller end within a millisecond of another request arriving on the
same caller instance, far more often than that instance's calls do at random. The wire delays each
reply on its own; even a burst that delivers several replies at once (a queue in a switch draining)
does not make other requests arrive at the caller at that moment: a slow link's calls end with an
arrival no more often than the instance's calls do by chance.
"""

from __future__ import annotations

import numpy as np

from tailscope.analysis.diagnosis.stats import clamp01

TOGETHER_NS = 1_000_000  # another request arriving within 1 ms of the call's end


def others_near(f, spans: np.ndarray, window: int = TOGETHER_NS) -> np.ndarray:
    """For each span, whether work of another trace arrives on its instance (a span whose parent is
    on another instance or absent starts there) within `window` ns of the span's end: the arrivals in
    (instance, time) order; those within the window are another trace's unless the stretch is all
    the span's own trace (its first and last arrival in one run of that trace)."""
    ends = f.start + f.dur
    scale = int(ends.max()) + 2 * window + 2
    inst = f.instance.astype(np.int64)
    up = np.maximum(f.parent, 0)
    arriving = (f.parent < 0) | (inst[up] != inst)  # work that came to the instance from outside
    mine = np.nonzero(arriving & np.isin(inst, np.unique(inst[spans])))[0]
    t = inst[spans] * scale + ends[spans]
    key = inst[mine] * scale + f.start[mine]
    trace = f.trace[mine]
    # only the arrivals within the window of some span's end matter: sort those alone
    ordered = np.sort(t)
    at = np.minimum(np.searchsorted(ordered, key - window, side="left"), len(ordered) - 1)
    close = np.abs(ordered[at] - key) <= window
    key, trace = key[close], trace[close]
    order = np.argsort(key)
    key, trace = key[order], trace[order]
    if not len(key):
        return np.zeros(len(spans), bool)
    run = np.concatenate([[0], np.cumsum(trace[1:] != trace[:-1])])  # one id per stretch of a trace
    lo = np.searchsorted(key, t - window, side="left")
    hi = np.searchsorted(key, t + window, side="right")
    first, last = np.minimum(lo, len(key) - 1), np.maximum(hi - 1, 0)
    only_own = (run[first] == run[last]) & (trace[first] == f.trace[spans])
    return (hi > lo) & ~only_own


def caller_stalled(f, cli: np.ndarray, big: np.ndarray, g: np.ndarray) -> float:
    """Share of the large gaps (mask over the CLIENT spans `cli`, gaps `g`) that end as another
    request arrives on the caller instance, beyond the share of that instance's calls that do
    (chance): q in p_big = q + (1 - q) p_all, both weighed by the time each gap adds over the
    median. 0 where fewer than 6 large gaps."""
    if big.sum() < 6:
        return 0.0
    near = others_near(f, cli)
    weight = np.maximum(g[big] - float(np.median(g)), 1.0)
    # chance on the same caller instance (a busier instance's calls end near an arrival more often)
    inst = f.instance[cli]
    per_inst = np.bincount(inst, weights=near, minlength=len(f.instances)) / np.maximum(
        np.bincount(inst, minlength=len(f.instances)), 1)
    p_all = float((weight * per_inst[inst[big]]).sum() / weight.sum())
    p_big = float((weight * near[big]).sum() / weight.sum())
    return clamp01((p_big - p_all) / max(1.0 - p_all, 1e-9))
