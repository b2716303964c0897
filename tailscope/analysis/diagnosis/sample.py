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

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from tailscope.analysis.diagnosis.stats import tail_split
from tailscope.store.interface import SPAN_WINDOWS

if TYPE_CHECKING:
    from tailscope.analysis.diagnosis.frame import TraceFrame

# Runs above this many spans are diagnosed from a sample of about this many (`diagnose --max-spans`).
DEFAULT_MAX_SPANS = 150_000
WINDOWS = SPAN_WINDOWS  # the most windows a sample is spread over
# windows last WINDOW_NS or more (each touches a row group or two of the store, a fixed cost: 10 M spans,
# 32 windows of 0.9 s -> 14 of 2 s: CPU 2.3 -> 1.5 s); a short run gets MIN_WINDOWS of >= MIN_WINDOW_NS
WINDOW_NS = 2_000_000_000
MIN_WINDOWS = 8
MIN_WINDOW_NS = 500_000_000
MIN_MARGIN_NS = 1_000_000_000  # a request is read whole when it lasts less than its window's margin:
MARGIN = 0.25  # this share of the window's length, at least MIN_MARGIN_NS
GRID_NS = 100_000_000  # windows start and last whole multiples of this (a CFS period keeps its phase)
BOOTSTRAP = 100


@dataclass(frozen=True)
class SamplePlan:
    """Which requests a sampled read takes: those starting in [start, start + length) of each window,
    their spans read up to `margin_ns` past the window's end."""

    starts: tuple[int, ...]  # absolute ns of each window's start
    length_ns: int
    margin_ns: int
    spans_total: int
    run_start_ns: int
    run_end_ns: int

    @property
    def fraction(self) -> float:
        """The share of the run's time the windows cover."""
        return min(1.0, len(self.starts) * self.length_ns / max(self.run_end_ns - self.run_start_ns, 1))

    def shifts(self) -> np.ndarray:
        """How far each window moves back so that the windows lie end to end from the run's start."""
        starts = np.asarray(self.starts, np.int64)
        return starts - (self.run_start_ns + np.arange(len(starts), dtype=np.int64) * self.length_ns)

    def windows(self) -> list[tuple[int, int]]:
        """(first, end) ns of each window: the requests starting there are read."""
        return [(a, a + self.length_ns) for a in self.starts]

    def read_windows(self) -> list[tuple[int, int]]:
        """The windows with their margins: where the spans of those requests are read."""
        return [(a, a + self.length_ns + self.margin_ns) for a in self.starts]

    def window_at(self, times: np.ndarray) -> np.ndarray:
        """The window each absolute time lies in, -1 where none."""
        starts = np.asarray(self.starts, np.int64)
        k = np.searchsorted(starts, times, side="right") - 1
        inside = (k >= 0) & (times < starts[np.maximum(k, 0)] + self.length_ns)
        return np.where(inside, k, -1)

    def read_windows_to(self, starts: np.ndarray) -> list[tuple[int, int]]:
        """The read windows, each cut just after the last of `starts` (absolute ns) inside it: where
        spans starting at those times lie (a window holding none is left out)."""
        ordered = np.sort(starts)
        out = []
        for first, end in self.read_windows():
            k = int(np.searchsorted(ordered, end, side="left")) - 1
            if k >= 0 and ordered[k] >= first:
                out.append((first, int(ordered[k]) + 1))
        return out

    def read_end(self, window: np.ndarray) -> np.ndarray:
        """Where the read of each window's spans ends (absolute ns)."""
        return np.asarray(self.starts, np.int64)[window] + self.length_ns + self.margin_ns


def plan(spans_total: int, run_start_ns: int, run_end_ns: int, max_spans: int | None) -> SamplePlan | None:
    """The windows for a run of `spans_total` spans between the two times, or None where the run is read
    whole (`max_spans` None or 0, or the run no larger than it, or too short to split)."""
    duration = run_end_ns - run_start_ns
    if not max_spans or spans_total <= max_spans or duration <= 0:
        return None
    covered = duration * max_spans / spans_total
    grid = GRID_NS if covered >= WINDOWS * GRID_NS else 1_000_000
    count = int(max(1, min(WINDOWS, max(covered // WINDOW_NS, min(MIN_WINDOWS, covered // MIN_WINDOW_NS)))))
    length = int(covered // count // grid * grid)
    if length < grid or count * length >= duration:
        return None
    # evenly spread: the first at the run's start, the last ending at its end (on the grid)
    last_start = (run_start_ns + (duration - length) // grid * grid) if count > 1 else run_start_ns
    stride = (last_start - run_start_ns) // max(count - 1, 1) // grid * grid
    starts = tuple(run_start_ns + i * stride for i in range(count))
    margin = max(int(length * MARGIN), MIN_MARGIN_NS)
    return SamplePlan(starts, length, margin, spans_total, run_start_ns, run_end_ns)


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
