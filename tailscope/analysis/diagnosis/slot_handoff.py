"""Whether a span's waits end by a hand-off: a slot freed by one holder taken at once by one waiter.

Mechanism. A mutex or a pool of N connections (a semaphore) makes a request wait inside its span
until a holder releases a slot; the waiter then starts its work under the slot (a child span: the
query run on the connection) at once, and one waiter takes one freed slot. The release is the end of
whatever the holder did while holding it (its own query, or the rest of its request where a
connection is held across other calls), so: for the spans of a name whose first child starts well
after the span (a long wait), the child starts within a moment (HANDOFF_NS) after some span ends on
the same instance, far more often than a moment picked at random would (ends per ns on that instance
x HANDOFF_NS), and not in the same instant as other waiters' children (a batch releases its members
together, a pool one by one). The share is (observed - chance) / (1 - chance).

lock_contention's close-completions test scales a finding down where the holders' completions come
in clumps (batched or side-by-side work, not a mutex); N holders of a pool complete at N times a
mutex's rate, so their completions are closer than a mutex's although one at a time. A clear
hand-off is the pool's own signature and stands in for that test.
"""

from __future__ import annotations

import numpy as np

from tailscope.analysis.diagnosis.model import Context

HANDOFF_NS = 300_000  # the waiter's work starts within 0.3 ms of a slot being freed
TOGETHER_NS = 100_000  # waiters starting within 0.1 ms of each other were released together
MIN_WAITS = 20


def handoff_share(ctx: Context, spans: np.ndarray) -> float:
    """Share of the long waits of `spans` (first child starting > 5 x the median wait and >= 1 ms
    after the span) that end by a one-at-a-time hand-off; NaN where there are too few."""
    f = ctx.frame
    mine = np.zeros(len(f), bool)
    mine[spans] = True
    kids = np.nonzero((f.parent >= 0) & mine[np.maximum(f.parent, 0)])[0]
    if len(kids) < MIN_WAITS:
        return float("nan")
    order = np.lexsort((f.start[kids], f.parent[kids]))
    kids = kids[order]
    first = kids[np.r_[True, f.parent[kids][1:] != f.parent[kids][:-1]]]
    code = int(np.bincount(f.name[first]).argmax())
    first = first[f.name[first] == code]
    wait = (f.start[first] - f.start[f.parent[first]]).astype(np.float64)
    long = wait > max(5 * float(np.median(wait)), 1e6)
    if long.sum() < MIN_WAITS:
        return float("nan")
    waiters = first[long]
    inside = np.nonzero(f.request >= 0)[0]
    scale = int(f.end.max()) + 2 * HANDOFF_NS
    ends = np.sort(f.instance[inside].astype(np.int64) * scale + f.end[inside])
    at = f.instance[waiters].astype(np.int64) * scale + f.start[waiters]
    freed = np.searchsorted(ends, at, side="right") - np.searchsorted(ends, at - HANDOFF_NS, side="left")
    starts = np.sort(at)
    crowd = np.searchsorted(starts, at + TOGETHER_NS, side="right") - np.searchsorted(
        starts, at - TOGETHER_NS, side="left")
    observed = float(((freed >= 1) & (crowd == 1)).mean())
    # chance: a moment on that instance lands within HANDOFF_NS after some end
    per_inst = np.bincount(f.instance[inside], minlength=len(f.instances)).astype(np.float64)
    span = np.zeros(len(f.instances))
    np.maximum.at(span, f.instance[inside], f.end[inside].astype(np.float64))
    low = np.full(len(f.instances), np.inf)
    np.minimum.at(low, f.instance[inside], f.start[inside].astype(np.float64))
    rate = per_inst / np.maximum(span - np.where(np.isfinite(low), low, 0.0), 1.0)
    chance = float(np.mean(1.0 - np.exp(-rate[f.instance[waiters]] * HANDOFF_NS)))
    return max(0.0, (observed - chance) / max(1.0 - chance, 1e-9))
