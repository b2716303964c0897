"""The analysis API the dashboard and the CLI build on: one pure function per view.

Every function takes a Source (a `Store`, which opens a short-lived reader, or an open DuckDB
connection) and a `Filter`, runs SQL from tailscope/sql over the derived tables (`requests`,
`span_exclusive`) with bound parameters only, and returns a declared shape from
tailscope.analysis.types. Empty stores, one-span stores and runs without request roots give empty
results with a `reason`, never exceptions.
"""

from __future__ import annotations

from datetime import datetime

import pandas as pd

from tailscope.analysis.source import Source
from tailscope.analysis.types import (
    DEFAULT_LATENCY_TARGET_MS,
    Band,
    Comparison,
    Filter,
    Gantt,
    Heatmap,
    Overview,
    Rect,
    TailVsBody,
    Waterfall,
)


def list_runs(source: Source) -> list[str]:
    """Run labels that have requests, sorted."""
    raise NotImplementedError


def filter_options(source: Source, run: str | None = None) -> dict[str, list[str]]:
    """Values for the sidebar: {'runs': [...], 'services': [...], 'routes': [...], 'instances': [...]}
    (services/routes/instances of request roots, of `run` when given)."""
    raise NotImplementedError


def time_range(source: Source, flt: Filter) -> tuple[datetime, datetime] | None:
    """First and last request start of the filtered requests (None when there are none)."""
    raise NotImplementedError


def overview(source: Source, flt: Filter, latency_target_ms: float = DEFAULT_LATENCY_TARGET_MS) -> Overview:
    """One RunSummary per run matching the filter (every run when flt.run is None): request count,
    throughput, e2e p50/p95/p99/p99.9, error rate, whether p99 meets the target, and the stage that
    dominates the tail (largest share of the p99 band's excess over the median band)."""
    raise NotImplementedError


def waterfall(source: Source, flt: Filter, band: Band = "p99") -> Waterfall:
    """Latency budget of one percentile band (see types.BAND_QUANTILES): mean exclusive ms per stage
    of the requests in the band (adds up to the band's mean e2e), each stage's share of the band's
    excess over the median band (shares sum to 1), and exact per-stage p50/p95/p99/p99.9 over all
    filtered requests. Needs one run: flt.run, or the store's only run."""
    raise NotImplementedError


def heatmap(
    source: Source,
    flt: Filter,
    stage: str | None = None,
    time_bins: int = 60,
    bins_per_decade: int = 10,
) -> Heatmap:
    """Counts of requests per (time bin × log-latency bin) of e2e latency (stage None) or of one
    stage's exclusive time, plus p50/p99 per time bin for the overlay lines."""
    raise NotImplementedError


def select_requests(
    source: Source, flt: Filter, rect: Rect, stage: str | None = None, limit: int = 500
) -> pd.DataFrame:
    """Requests inside a heatmap rectangle, slowest first: same columns as `slowest_traces`."""
    raise NotImplementedError


def tail_vs_body(
    source: Source,
    flt: Filter,
    rect: Rect | None = None,
    tail_quantile: float = 0.99,
    stage: str | None = None,
    limit: int = 50,
) -> TailVsBody:
    """BubbleUp: which attribute values (span attributes of any span of the request, resource
    attributes of the request root, the request's dominant stage) are over-represented in the
    selected set vs the rest, and which stages differ most. The selected set is the rectangle when
    given, else the requests at or above the tail quantile of e2e latency."""
    raise NotImplementedError


def slowest_traces(source: Source, flt: Filter, limit: int = 50) -> pd.DataFrame:
    """DataFrame[run, trace_id, root_span_id, timestamp, duration_ms, client_duration_ms, service,
    route, instance, is_error, dominant_stage, dominant_stage_ms, spans], slowest first."""
    raise NotImplementedError


def trace_gantt(source: Source, trace_id: str, run: str | None = None) -> Gantt:
    """One trace's spans for a Gantt chart (see types.Gantt), with the critical path marked and each
    span's duration ranked among spans of the same name in the run."""
    raise NotImplementedError


def compare(
    source: Source,
    run_a: str,
    run_b: str,
    flt: Filter | None = None,
    price_a_per_hour: float | None = None,
    price_b_per_hour: float | None = None,
    resamples: int = 1000,
    seed: int = 0,
) -> Comparison:
    """Run A vs run B: per-stage (and e2e) p50/p99 with 95 % bootstrap intervals (seeded), deltas
    B − A with intervals, throughput, cost per 1,000 inferences from each run's hourly price, and the
    runs' setup attributes side by side. `flt` narrows both runs (its `run` is ignored)."""
    raise NotImplementedError
