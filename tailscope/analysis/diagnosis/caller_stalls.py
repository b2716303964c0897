"""caller_stalls: a caller's own process stall read as the wire (network.py's discount).

Mechanism. A process that stops (a stop-the-world collection, a frozen container) runs nothing until it
resumes: every span it has in flight ends at (nearly) the moment it runs again, whatever the request,
and the spans it would have begun meanwhile start at that moment too. A CLIENT span whose reply arrived
during the stall ends late around an unchanged SERVER span, and the client-server gap grows. So the
large gaps of a stalled caller end within a millisecond of other requests' spans starting or ending on
the same caller instance, far more often than calls do at random. The wire delays each reply on its
own: a slow link's calls end as spread as their replies arrive, and nothing else on the caller
instance happens at those moments more than at any other.
"""

from __future__ import annotations

import numpy as np

from tailscope.analysis.diagnosis.stats import clamp01

TOGETHER_NS = 1_000_000  # another request's span starting or ending within 1 ms of the call's end


def others_near(f, spans: np.ndarray, window: int = TOGETHER_NS) -> np.ndarray:
    """For each span, whether a span of another trace starts or ends on the same instance within
    `window` ns of the span's end. The starts and ends of the spans on those instances, in (instance,
    time) order: the ones within the window of a span's end include its own end, so another trace's
    is there unless the whole stretch is one trace's (its first and last event in the same run)."""
    ends = f.start + f.dur
    scale = int(ends.max()) + 2 * window + 2
    inst = f.instance.astype(np.int64)
    mine = np.nonzero(np.isin(inst, np.unique(inst[spans])))[0]  # the spans on the callers' instances
    key = np.concatenate([inst[mine] * scale + f.start[mine], inst[mine] * scale + ends[mine]])
    trace = np.concatenate([f.trace[mine], f.trace[mine]])
    t = inst[spans] * scale + ends[spans]
    # only the events within the window of some span's end matter: sort those alone
    ordered = np.sort(t)
    at = np.minimum(np.searchsorted(ordered, key - window, side="left"), len(ordered) - 1)
    close = np.abs(ordered[at] - key) <= window
    key, trace = key[close], trace[close]
    order = np.argsort(key)
    key, trace = key[order], trace[order]
    run = np.concatenate([[0], np.cumsum(trace[1:] != trace[:-1])])  # one id per stretch of a trace
    lo = np.searchsorted(key, t - window, side="left")
    hi = np.searchsorted(key, t + window, side="right")  # > lo: the span's own end is there
    return run[lo] != run[np.maximum(hi - 1, lo)]


def caller_stalled(f, cli: np.ndarray, big: np.ndarray, g: np.ndarray) -> float:
    """Share of the large gaps (mask over the CLIENT spans `cli`, gaps `g`) that end together with
    another request's span on the caller instance, beyond the share of all calls that do (chance):
    q in p_big = q + (1 - q) p_all, p_big weighed by the time each gap adds over the median. 0 where
    fewer than 6 large gaps."""
    if big.sum() < 6:
        return 0.0
    near = others_near(f, cli)
    weight = np.maximum(g[big] - float(np.median(g)), 1.0)
    p_all = float(near.mean())
    p_big = float((weight * near[big]).sum() / weight.sum())
    return clamp01((p_big - p_all) / max(1.0 - p_all, 1e-9))
