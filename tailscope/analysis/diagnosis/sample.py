"""Diagnose a large run from a sample of it: every request that starts inside a few time windows spread
evenly over the run, read whole (all its spans), the windows then laid end to end.

Why windows and not a per-trace sample (all tail requests plus some body requests): the detectors
judge what happened *around* a request — the spans in flight beside it on its instance (gc_pause's
aligned stalls, lock_contention's crowd, accept queues), the arrival rate over time (queueing), the
order of requests on an instance (cold_start). A per-trace sample keeps a slow request and drops its
neighbours, so a stall would show as one slow span with nothing beside it and the crowd of a lock
would shrink by the sampling rate. Inside a window nothing is dropped; the windows are a uniform
sample of the run's time, so each request stands for the same number of requests (`weight`,
total / read: the tail's quantile, shares and ratios are those of the run), and the read costs what
the sample holds, not the run (the store skips the row groups between windows by their Timestamp
range).

The windows are laid end to end (each shifted by a whole number of `GRID_NS`, so a 100 ms CPU-quota
period keeps its phase): time-binned statistics (arrival rate, miss rate over time) see a continuous
run, not gaps. The first window starts at the run's first span (an instance's first requests, a cold
start, are read), the last ends at its last. Each window is read a margin further than it lasts, so a
request that starts in it is read whole when it is shorter than the margin; requests still running
at the margin's end are counted (`cut_requests`).

The sampling error is stated from the windows themselves: the run's p99 and tail excess are
recomputed over `BOOTSTRAP` resamples of the windows (with replacement) and their 95 % interval is
reported beside the figures (`Diagnosis.sampling`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from tailscope.analysis.diagnosis.stats import tail_split
from tailscope.store.sample_plan import (  # the windows' arithmetic, shared with the store's derive
    DEFAULT_MAX_SPANS,
    GRID_NS,
    MARGIN,
    MIN_MARGIN_NS,
    MIN_WINDOW_NS,
    MIN_WINDOWS,
    WINDOW_NS,
    WINDOWS,
    SamplePlan,
    plan,
)

if TYPE_CHECKING:
    from tailscope.analysis.diagnosis.frame import TraceFrame

__all__ = [  # the windows' arithmetic lives in tailscope.store.sample_plan; its names are still found here
    "BOOTSTRAP", "DEFAULT_MAX_SPANS", "GRID_NS", "MARGIN", "MIN_MARGIN_NS", "MIN_WINDOWS", "MIN_WINDOW_NS",
    "WINDOWS", "WINDOW_NS", "SamplePlan", "describe", "plan", "sampling_error", "window_of",
]

BOOTSTRAP = 100


def window_of(plan: SamplePlan, remapped_start: np.ndarray) -> np.ndarray:
    """The window a (remapped) request start lies in."""
    return np.clip((remapped_start - plan.run_start_ns) // plan.length_ns, 0, len(plan.starts) - 1)


def sampling_error(latency: np.ndarray, window: np.ndarray, windows: int, seed: int = 0) -> dict[str, float]:
    """95 % intervals of the p99 and the tail excess (ms), from resampling whole windows (the tail and
    body as stats.tail_split draws them: at or above p99, p25-p75). A resample is the requests of the
    windows drawn, each as often as its window was: the latencies are sorted once and each resample
    weighs them by its window counts (np.quantile's linear rule on the expanded sample, exactly)."""
    rng = np.random.default_rng(seed)
    order = np.argsort(latency, kind="stable")
    lat = latency[order].astype(np.float64)
    member = window[order]
    p99s, excesses = [], []
    for _ in range(BOOTSTRAP):
        counts = np.bincount(rng.integers(0, windows, windows), minlength=windows)
        weight = counts[member] if len(member) else np.zeros(0, np.int64)
        upto = np.cumsum(weight)
        n = int(upto[-1]) if len(upto) else 0
        if n < 2:
            continue
        lo, hi, p99 = _expanded_quantiles(lat, upto, n, (0.25, 0.75, 0.99))
        body = (lat >= lo) & (lat <= hi) & (weight > 0)
        tail = (lat >= p99) & (weight > 0)
        p99s.append(p99)
        both = body.any() and tail.any()
        excesses.append(_mean(lat, weight, tail) - _mean(lat, weight, body) if both else 0.0)
    if not p99s:
        return {}
    split = tail_split(latency)
    lo, hi = np.percentile(excesses, [2.5, 97.5])
    p_lo, p_hi = np.percentile(p99s, [2.5, 97.5])
    return {
        "p99_ms_95ci": [round(float(p_lo) / 1e6, 3), round(float(p_hi) / 1e6, 3)],
        "excess_ms_95ci": [round(float(lo) / 1e6, 3), round(float(hi) / 1e6, 3)],
        "excess_relative_error": round(float(np.std(excesses)) / max(split.excess_ns, 1.0), 4),
        "tail_requests": int(split.tail.sum()),
    }


def _expanded_quantiles(
    lat: np.ndarray, upto: np.ndarray, n: int, quantiles: tuple[float, ...]
) -> list[float]:
    """np.quantile (linear) of the sorted `lat` with element i repeated upto[i] - upto[i - 1] times."""
    out = []
    for q in quantiles:
        virtual = (n - 1) * q
        below = int(np.floor(virtual))
        gamma = virtual - below
        a, b = lat[np.searchsorted(upto, [below, min(below + 1, n - 1)], side="right")]
        diff = b - a
        out.append(float(b - diff * (1 - gamma)) if gamma >= 0.5 else float(a + diff * gamma))
    return out


def _mean(lat: np.ndarray, weight: np.ndarray, mask: np.ndarray) -> float:
    return float((lat[mask] * weight[mask]).sum() / weight[mask].sum())


def describe(plan: SamplePlan, frame: TraceFrame, seed: int = 0) -> dict[str, Any]:
    """What a sampled diagnosis read and how far its tail figures can be off (Diagnosis.sampling)."""
    requests = frame.requests
    latency = requests.latency if requests is not None else np.zeros(0, np.int64)
    window = window_of(plan, requests.start + frame.t0) if requests is not None else np.zeros(0, np.int64)
    return {
        "windows": len(plan.starts),
        "window_s": round(plan.length_ns / 1e9, 3),
        "time_fraction": round(plan.fraction, 4),
        "spans_read": len(frame),
        "spans_in_run": plan.spans_total,
        # each request read stands for this many of the run's (a request's own weight multiplies it)
        "weight": round(plan.spans_total / max(len(frame), 1), 3),
        "cut_requests": int(frame.cut_requests),
        **sampling_error(latency, window, len(plan.starts), seed),
    }
