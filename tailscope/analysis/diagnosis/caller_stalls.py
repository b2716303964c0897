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
    `window` ns of the span's end (vectorised: events counted on the instance, minus the trace's own)."""
    ends = f.start + f.dur
    scale = int(ends.max()) + 2 * window + 2
    inst = f.instance.astype(np.int64)
    on_inst = np.sort(np.concatenate([inst * scale + f.start, inst * scale + ends]))
    _, group = np.unique(np.c_[f.trace.astype(np.int64), inst], axis=0, return_inverse=True)
    group = group.reshape(-1).astype(np.int64)
    own = np.sort(np.concatenate([group * scale + f.start, group * scale + ends]))

    def around(ordered: np.ndarray, key: np.ndarray) -> np.ndarray:
        return np.searchsorted(ordered, key + window, side="right") - np.searchsorted(
            ordered, key - window, side="left")

    t = ends[spans]
    return around(on_inst, inst[spans] * scale + t) - around(own, group[spans] * scale + t) > 0


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
