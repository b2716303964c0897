"""Whether a stage's waits come with bursts of arrivals (a side effect of the burst, not a cause).

Mechanism. A lock or a pool sized for the service's ordinary rate makes requests wait only when
more of them arrive than it lets through: under a burst the waits are real, but they are the
burst's queue moved into the pool (queueing names the cause; the pool's size is a lever). A lock
that is too slow for the ordinary rate makes requests wait at any time. So: with the run's request
arrivals in BINS time bins, over-dispersed (variance over mean > DISPERSED: traffic in bursts, not a
steady rate), the share of the modelled wait spent in the bins where arrivals ran at >= ELEVATED x
the median bin, against the share of the spans in those bins: waits that come with the burst are
far longer per span inside it than outside (burst_ratio)."""

from __future__ import annotations

import numpy as np

from tailscope.analysis.diagnosis.model import Context

BINS = 50
DISPERSED = 4.0
ELEVATED = 1.3


def burst_waits(ctx: Context, spans: np.ndarray, wait: np.ndarray) -> tuple[float, float] | None:
    """(share of the wait in burst bins, share of the spans there) where the arrivals come in bursts;
    None where they are steady (or too few)."""
    start = ctx.frame.start[ctx.frame.requests.root].astype(np.float64)
    if len(start) < 10 * BINS or wait.sum() <= 0:
        return None
    t0, width = float(start.min()), max(float(start.max() - start.min()), 1.0) / BINS
    arrivals = np.bincount(np.minimum(((start - t0) // width).astype(np.int64), BINS - 1), minlength=BINS)
    mean = float(arrivals.mean())
    if float(arrivals.var()) / max(mean, 1e-9) <= DISPERSED:
        return None
    burst = arrivals >= ELEVATED * float(np.median(arrivals))
    at = np.clip(((ctx.frame.start[spans] - t0) // width).astype(np.int64), 0, BINS - 1)
    return float(wait[burst[at]].sum() / wait.sum()), float(burst[at].mean())


def burst_ratio(wait_share: float, span_share: float) -> float:
    """The mean wait per span inside the bursts over the mean wait per span outside them."""
    inside = wait_share / max(span_share, 1e-9)
    outside = (1.0 - wait_share) / max(1.0 - span_share, 1e-9)
    return inside / max(outside, 1e-9)
