"""Declared shapes of the analysis API: the filter every view takes and the results it returns.

Every result carries `reason: str | None`. It is None when the result holds data, and otherwise a
sentence the UI can show as is ("no requests match the filter", "run 'x' has no root spans", ...).
Empty stores, one-span stores and runs without request roots give such empty results, never
exceptions. Latencies in results are milliseconds (floats); the store keeps nanoseconds.

Chart data comes as pandas DataFrames with the columns listed in each docstring.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

import pandas as pd

from tailscope.query.filters import BAND_QUANTILES, BANDS, Band, Filter, Rect
from tailscope.rules import PhaseRule, StageRule

# what a view asks for (tailscope.query) and the rules (tailscope.rules), as the analysis API's types
__all__ = ["BANDS", "BAND_QUANTILES", "Band", "Filter", "PhaseRule", "Rect", "StageRule"]

DEFAULT_LATENCY_TARGET_MS = 200.0


@dataclass
class RunSummary:
    run: str
    requests: int
    errors: int
    error_rate: float
    first_request: datetime | None
    last_request: datetime | None
    throughput_rps: float | None  # requests / span of request start..end times
    p50_ms: float | None
    p95_ms: float | None
    p99_ms: float | None
    p999_ms: float | None
    latency_target_ms: float
    meets_target: bool | None  # p99 <= target
    tail_stage: str | None  # the stage with the largest share of the p99 band's excess over the median
    tail_stage_share: float | None  # 0..1
    services: list[str] = field(default_factory=list)


@dataclass
class Overview:
    runs: list[RunSummary]
    reason: str | None = None


@dataclass
class StageBar:
    """One stage of a waterfall. mean_ms: mean exclusive time in the band (the bars add up to the
    band's mean e2e latency). tail_excess_share: this stage's part of (band mean − median band mean),
    as a fraction; shares of all stages sum to 1 (a stage can be negative). None for the p50 band or
    when the band is not slower than the median band. p50_ms..p999_ms: exact percentiles of the
    stage's per-request exclusive time over all filtered requests; these do NOT add up."""

    stage: str
    mean_ms: float
    tail_excess_share: float | None
    median_band_mean_ms: float
    p50_ms: float
    p95_ms: float
    p99_ms: float
    p999_ms: float


@dataclass
class Waterfall:
    band: Band
    band_low_ms: float | None  # latency bounds of the band
    band_high_ms: float | None
    requests_total: int
    requests_in_band: int
    band_mean_ms: float | None  # == sum(stage.mean_ms)
    median_band_mean_ms: float | None
    stages: list[StageBar]
    note: str = "Stage percentiles are per stage and do not add up; band means do."
    reason: str | None = None


@dataclass
class Heatmap:
    """cells: DataFrame[time (datetime, bin start), latency_low_ms, latency_high_ms, count].
    lines: DataFrame[time, p50_ms, p99_ms, requests] per time bin.
    Latency bins are logarithmic (`bins_per_decade` per factor of 10)."""

    stage: str | None  # None: end-to-end latency
    time_bin_seconds: float
    bins_per_decade: int
    cells: pd.DataFrame
    lines: pd.DataFrame
    reason: str | None = None


@dataclass
class TailVsBody:
    """attributes: DataFrame[source ('span'|'resource'|'stage'), span_name, key, value,
    selected_pct, rest_pct, difference_pct (selected − rest), lift (selected/rest)] ranked by
    difference_pct, over-represented first. Percentages are of requests (0..100).
    stages: DataFrame[stage, selected_mean_ms, rest_mean_ms, delta_ms, selected_share, rest_share]
    ranked by delta_ms."""

    selection: str  # how the selected set was chosen, in words
    selected_requests: int
    rest_requests: int
    attributes: pd.DataFrame
    stages: pd.DataFrame
    reason: str | None = None


@dataclass
class Gantt:
    """spans: DataFrame[span_id, parent_span_id, name, service, kind, stage, depth, start_offset_ms,
    duration_ms, exclusive_ms, critical (bool), duration_pct_rank (0..100 among spans of the same
    name in the run), status, in_request (False for the client root kept for network analysis)],
    ordered depth-first by start time."""

    run: str | None
    trace_id: str
    root_span_id: str | None
    duration_ms: float | None
    client_duration_ms: float | None
    spans: pd.DataFrame
    reason: str | None = None


@dataclass
class StageComparison:
    stage: str  # a stage name, or "e2e" for end-to-end latency
    quantile: float  # 0.5 or 0.99
    a_ms: float | None
    a_low_ms: float | None  # 95 % bootstrap interval
    a_high_ms: float | None
    b_ms: float | None
    b_low_ms: float | None
    b_high_ms: float | None
    delta_ms: float | None  # b − a
    delta_low_ms: float | None
    delta_high_ms: float | None


@dataclass
class RunCost:
    run: str
    requests: int
    throughput_rps: float | None
    price_per_hour: float | None
    cost_per_1k: float | None  # price_per_hour / 3600 / throughput * 1000


@dataclass
class Comparison:
    run_a: str
    run_b: str
    stages: list[StageComparison]
    a: RunCost
    b: RunCost
    setup: pd.DataFrame  # DataFrame[key, a, b, differs]
    resamples: int
    seed: int
    reason: str | None = None
