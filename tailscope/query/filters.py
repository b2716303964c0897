"""What a view asks the store for: which requests (Filter, a heatmap Rect) and which percentile band.

A Filter is what every named statement with a {where} takes (the store binds its set fields:
tailscope.store.interface.RequestFilter); the band quantiles are the statements' parameters.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Literal

Band = Literal["p50", "p90", "p99", "p99.9"]
BANDS: tuple[Band, ...] = ("p50", "p90", "p99", "p99.9")

# Percentile bands of end-to-end latency, as (lower, upper) quantiles; the upper bound is exclusive
# except for the last band, which runs to the slowest request. The median band is the 10 % of
# requests around the median; the tail bands are disjoint slices above the 90th percentile, so "p99"
# is the requests between p99 and p99.9 (not every request above p99).
BAND_QUANTILES: dict[Band, tuple[float, float]] = {
    "p50": (0.45, 0.55),
    "p90": (0.90, 0.99),
    "p99": (0.99, 0.999),
    "p99.9": (0.999, 1.0),
}


@dataclass(frozen=True)
class Filter:
    """Which requests a view looks at. Every field is optional; values only ever travel as bound
    parameters. `run` None means every run (views that need one run pick the only one or say so).
    `start`/`end` bound the request root's start time (naive datetimes are UTC), end exclusive."""

    run: str | None = None
    service: str | None = None
    route: str | None = None
    instance: str | None = None
    start: datetime | None = None
    end: datetime | None = None


@dataclass(frozen=True)
class Rect:
    """A rectangle on the latency heatmap: request start time in [start, end), e2e (or stage) latency
    in [low_ms, high_ms)."""

    start: datetime
    end: datetime
    low_ms: float
    high_ms: float
