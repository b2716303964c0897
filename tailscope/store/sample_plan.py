"""The time windows a large run is diagnosed from (tailscope.analysis.diagnosis.sample: why windows,
how they are read and how the sampling error is stated): pure arithmetic on the run's span count and
extent, below the analysis layer so that a store's derive can name the windows a diagnosis of the
run will read (the stage mapping it records for the first one: store/duckdb/kept_mapping.py)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tailscope.store.interface import SPAN_WINDOWS

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


# The diagnosis maps spans to stages by the stage mapping of this many traces of its first read window
# (a row per span name and kind suffices), or of the run when it reads the run whole.
MAPPING_TRACES = 300


def mapping_scope(spans_total: int, run_start_ns: int, run_end_ns: int,
                  max_spans: int | None = DEFAULT_MAX_SPANS) -> tuple[int, tuple[int, int] | None]:
    """(how many traces, the window (first, end) ns or None for the whole run) of the stage mapping a
    diagnosis with `max_spans` reads for a run of that size and extent."""
    sampled = plan(spans_total, run_start_ns, run_end_ns, max_spans)
    return MAPPING_TRACES, sampled.read_windows()[0] if sampled is not None else None
