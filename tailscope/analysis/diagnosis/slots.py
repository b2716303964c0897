"""How many requests a section lets run at once before the next one waits (lock_contention reads it).

Mechanism. A mutex lets one holder in: a request that finds another in the section already waits,
so the section's duration rises from the first request ahead on (by up to a hold per request ahead).
Work that shares S slots (a pool of S threads, S cores shared by CPU-bound jobs) takes its own time
while fewer than S others run beside it and stretches only beyond: its duration against the requests
ahead is flat up to S - 1, then rises (a hinge at S). So the hinge's place is the slot count: 1 is a
lock; 3 or more is a queue for S slots (queueing) or compute sharing S cores (compute_bound), not one
lock.

Statistic. The median duration per count of requests ahead (same name and instance, fixed at the
span's start; counts with >= MIN_SPANS spans, up to MAX_AHEAD), relative to the first count's (no one
or one ahead). S is the first count whose median leaves FLAT of it; the counts below S are the flat
part. A hinge needs >= 2 counts in the flat part and >= 3 beyond, durations beyond S rising with the
count (Spearman >= 0.8), and the flat part's slope under a quarter of the slope beyond (a lock's
waits grow by the same hold per request ahead from the first on). Else 1.
"""

from __future__ import annotations

import numpy as np

from tailscope.analysis.diagnosis.stats import spearman

MIN_SPANS = 5
MAX_AHEAD = 16
FLAT = 0.2  # the flat part: each count's median within 20 % of the first count's
FLATTER = 0.25  # the flat part's slope under a quarter of the slope beyond the hinge


def _slope(x: np.ndarray, y: np.ndarray, w: np.ndarray) -> float:
    """Weighted least-squares slope."""
    mx = float((w * x).sum() / w.sum())
    my = float((w * y).sum() / w.sum())
    var = float((w * (x - mx) ** 2).sum())
    return float((w * (x - mx) * (y - my)).sum()) / var if var > 0 else 0.0


def slot_count(ahead: np.ndarray, dur: np.ndarray) -> int:
    """The number of requests the spans' section lets run at once before a request waits (1: a
    lock's one holder); see the module docstring."""
    k = ahead.astype(np.int64)
    counts = np.bincount(np.minimum(k, MAX_AHEAD + 1), minlength=MAX_AHEAD + 2)[: MAX_AHEAD + 1]
    ks = np.nonzero(counts >= MIN_SPANS)[0]
    if len(ks) < 5 or ks[0] > 1:
        return 1
    m = np.array([np.median(dur[k == j]) for j in ks])
    if m[0] <= 0:
        return 1
    m = m / m[0]
    w = np.sqrt(counts[ks].astype(np.float64))
    x = ks.astype(np.float64)
    out = np.nonzero(np.abs(m - 1.0) > FLAT)[0]
    if len(out) == 0:
        return 1
    first = int(out[0])
    below, above = slice(0, first), slice(first, None)
    if first < 2 or len(ks) - first < 3 or spearman(x[above], m[above]) < 0.8:
        return 1
    after = _slope(x[above], m[above], w[above])
    if after <= 0 or _slope(x[below], m[below], w[below]) >= FLATTER * after:
        return 1
    return int(ks[first] + 1 - ks[0]) if ks[0] == 1 else int(ks[first])
