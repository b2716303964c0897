"""The analysis API the dashboard and the CLI build on: one pure function per view.

Every function takes a Source (a `Store`, which gives a reader for one unit of work, or an open
Reader) and a `Filter`, asks the store for named statements over the derived requests (and the spans
where it needs them), with the filter and its parameters bound, and returns a declared shape from
tailscope.analysis.types. Empty stores, one-span stores and runs without request roots give empty
results with a `reason`, never exceptions. The Gantt, tail vs body and the run comparison live in
analysis.trace, analysis.tail and analysis.compare.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import pandas as pd

from tailscope.analysis.heatmap_histogram import heatmap_rows
from tailscope.analysis.histogram import PERCENTILES, RunHistogram, run_histogram, whole_run
from tailscope.analysis.runs import runs_with_requests, runs_with_spans
from tailscope.analysis.source import Source, reading
from tailscope.analysis.types import (
    BAND_QUANTILES,
    BANDS,
    DEFAULT_LATENCY_TARGET_MS,
    Band,
    Filter,
    Heatmap,
    Overview,
    Rect,
    RunSummary,
    StageBar,
    Waterfall,
)
from tailscope.store.interface import Reader
from tailscope.vocabulary import ALL_STAGES

NO_REQUESTS = "no requests match the filter"


def _ms(ns: float | None) -> float | None:
    return None if ns is None else float(ns) / 1e6


def _no_requests_reason(conn: Reader, flt: Filter) -> str:
    """Why a filter found nothing, in words the UI can show."""
    spans, run_spans, requests, run_requests = conn.run("store_counts", [flt.run, flt.run]).fetchone()
    if spans == 0:
        return "the store is empty: load traces first"
    if flt.run is not None:
        if run_spans == 0:
            runs = ", ".join(runs_with_spans(conn)) or "none"
            return f"no run {flt.run!r} in the store (runs: {runs})"
        if run_requests == 0:
            return f"run {flt.run!r} has {run_spans} spans but no request root spans"
    elif requests == 0:
        return f"the store has {spans} spans but no request root spans"
    return NO_REQUESTS


def one_run(conn: Reader, flt: Filter) -> tuple[Filter, str | None]:
    """The filter with its run set: the given one, or the store's only run with requests."""
    if flt.run is not None:
        return flt, None
    runs = runs_with_requests(conn)
    if len(runs) == 1:
        return replace(flt, run=runs[0]), None
    if not runs:
        return flt, _no_requests_reason(conn, flt)
    return flt, f"choose a run (the store has {len(runs)}: {', '.join(runs)})"


def list_runs(source: Source) -> list[str]:
    """Run labels that have requests, sorted."""
    with reading(source) as conn:
        return runs_with_requests(conn)


def filter_options(source: Source, run: str | None = None) -> dict[str, list[str]]:
    """Values for the sidebar: {'runs': [...], 'services': [...], 'routes': [...], 'instances': [...]}
    (services/routes/instances of request roots, of `run` when given)."""
    with reading(source) as conn:
        runs = runs_with_requests(conn)
        services, routes, instances = conn.run("filter_values", [run]).fetchone()
    return {"runs": runs, "services": services or [], "routes": routes or [], "instances": instances or []}


def time_range(source: Source, flt: Filter) -> tuple[datetime, datetime] | None:
    """First and last request start of the filtered requests (None when there are none)."""
    with reading(source) as conn:
        rows = summary_rows(conn, flt)
    if not rows:
        return None
    return min(r[3] for r in rows), max(r[4] for r in rows)


def summary_rows(
    conn: Reader, flt: Filter, histograms: dict[str, RunHistogram] | None = None
) -> list[tuple[Any, ...]]:
    """overview.sql's rows, per run: a whole run's (every run's when the filter sets nothing) from
    its histogram where it has one (analysis.histogram: counts exact, e2e percentiles within 0.5 %)
    and the run's extent (run_extent.sql); the rest from overview.sql. `histograms`: filled with
    the histograms read, per run."""
    if not whole_run(flt) and flt != Filter():
        return conn.run("overview", where=flt).fetchall()
    rows, exact = [], []
    for run in [flt.run] if flt.run is not None else runs_with_requests(conn):
        histogram = run_histogram(conn, Filter(run=run))
        if histogram is None:
            exact.append(run)
            continue
        _, first, last, t0, t1, services = conn.run("run_extent", [run]).fetchone()
        e2e = histogram.e2e.quantiles(PERCENTILES)
        rows.append((run, histogram.requests, histogram.error_count, first, last, t0, t1, e2e, services))
        if histograms is not None:
            histograms[run] = histogram
    if not rows:  # no histogram read: every run in one statement, as before
        return conn.run("overview", where=flt).fetchall()
    for run in exact:
        rows.extend(conn.run("overview", where=replace(flt, run=run)).fetchall())
    return sorted(rows, key=lambda row: row[0])


def overview(source: Source, flt: Filter, latency_target_ms: float = DEFAULT_LATENCY_TARGET_MS) -> Overview:
    """One RunSummary per run matching the filter (every run when flt.run is None): request count,
    throughput, e2e p50/p95/p99/p99.9, error rate, whether p99 meets the target, and the stage that
    dominates the tail (largest share of the p99 band's excess over the median band)."""
    with reading(source) as conn:
        histograms: dict[str, RunHistogram] = {}
        rows = summary_rows(conn, flt, histograms)
        if not rows:
            return Overview(runs=[], reason=_no_requests_reason(conn, flt))
        summaries = []
        for run, n, errors, first, last, t0, t1, e2e, services in rows:
            span_s = (t1 - t0) / 1e9 if t1 is not None and t0 is not None else 0.0
            p50, p95, p99, p999 = (float(v) / 1e6 for v in e2e)
            tail = _waterfall(conn, replace(flt, run=run), "p99", False, histograms.get(run))
            top = max(
                (b for b in tail.stages if b.tail_excess_share is not None),
                key=lambda b: b.tail_excess_share,
                default=None,
            )
            summaries.append(
                RunSummary(
                    run=run,
                    requests=n,
                    errors=errors,
                    error_rate=errors / n if n else 0.0,
                    first_request=first,
                    last_request=last,
                    throughput_rps=n / span_s if span_s > 0 else None,
                    p50_ms=p50,
                    p95_ms=p95,
                    p99_ms=p99,
                    p999_ms=p999,
                    latency_target_ms=latency_target_ms,
                    meets_target=p99 <= latency_target_ms,
                    tail_stage=top.stage if top else None,
                    tail_stage_share=top.tail_excess_share if top else None,
                    services=list(services),
                )
            )
    return Overview(runs=summaries)


def _waterfall(
    conn: Reader, flt: Filter, band: Band, percentiles: bool = True, histogram: RunHistogram | None = None
) -> Waterfall:
    if band not in BAND_QUANTILES:
        raise ValueError(f"unknown band {band!r} (one of {', '.join(BANDS)})")
    flt, reason = one_run(conn, flt)
    empty = Waterfall(
        band=band,
        band_low_ms=None,
        band_high_ms=None,
        requests_total=0,
        requests_in_band=0,
        band_mean_ms=None,
        median_band_mean_ms=None,
        stages=[],
    )
    if reason:
        empty.reason = reason
        return empty
    lo, hi = BAND_QUANTILES[band]
    if histogram is None:  # a whole large run: its pre-aggregates (else None: the exact path)
        histogram = run_histogram(conn, flt)
    if histogram is not None:
        row = histogram.waterfall_row(lo, hi)
    else:
        row = conn.run("waterfall", [lo, hi, hi >= 1.0], where=flt).fetchone()
    n, band_n, _median_n, q_lo, q_hi, band_mean, median_mean = row[:7]
    if not n:
        empty.reason = _no_requests_reason(conn, flt)
        return empty
    k = len(ALL_STAGES)
    band_avgs, median_avgs = row[7 : 7 + k], row[7 + k : 7 + 2 * k]
    pcts: Any = [[float("nan")] * 4] * k
    if percentiles:
        if histogram is not None:
            pcts = histogram.stage_percentiles()
        else:
            pcts = conn.run("stage_percentiles", where=flt).fetchone()
    excess = (band_mean - median_mean) if band_n and band != "p50" else None
    stages = []
    for stage, b, m, p in zip(ALL_STAGES, band_avgs, median_avgs, pcts, strict=True):
        share = None
        if excess is not None and excess > 0 and b is not None:
            share = (b - (m or 0.0)) / excess
        stages.append(
            StageBar(
                stage=stage,
                mean_ms=_ms(b) or 0.0,
                tail_excess_share=share,
                median_band_mean_ms=_ms(m) or 0.0,
                p50_ms=p[0] / 1e6,
                p95_ms=p[1] / 1e6,
                p99_ms=p[2] / 1e6,
                p999_ms=p[3] / 1e6,
            )
        )
    result = Waterfall(
        band=band,
        band_low_ms=_ms(q_lo),
        band_high_ms=_ms(q_hi),
        requests_total=n,
        requests_in_band=band_n,
        band_mean_ms=_ms(band_mean),
        median_band_mean_ms=_ms(median_mean),
        stages=stages,
    )
    if not band_n:
        result.reason = f"no requests in the {band} band (only {n} requests match)"
    elif band != "p50" and (excess is None or excess <= 0):
        result.reason = f"the {band} band is not slower than the median band: no tail excess to share"
    return result


def waterfall(source: Source, flt: Filter, band: Band = "p99") -> Waterfall:
    """Latency budget of one percentile band (see types.BAND_QUANTILES): mean exclusive ms per stage
    of the requests in the band (adds up to the band's mean e2e), each stage's share of the band's
    excess over the median band (shares sum to 1), and per-stage p50/p95/p99/p99.9 over all
    filtered requests: exact, but for a whole run of at least histogram.MIN_REQUESTS requests read
    from its pre-aggregates (percentiles and band bounds within 0.5 %, the band edges' requests
    apportioned: analysis.histogram). Needs one run: flt.run, or the store's only run."""
    with reading(source) as conn:
        return _waterfall(conn, flt, band)


def _check_stage(stage: str | None) -> str:
    if stage is not None and stage not in ALL_STAGES:
        raise ValueError(f"unknown stage {stage!r} (one of {', '.join(ALL_STAGES)})")
    return stage or ""


def heatmap(
    source: Source,
    flt: Filter,
    stage: str | None = None,
    time_bins: int = 60,
    bins_per_decade: int = 10,
) -> Heatmap:
    """Counts of requests per (time bin × log-latency bin) of e2e latency (stage None) or of one
    stage's exclusive time, plus p50/p99 per time bin for the overlay lines. A whole run of at least
    histogram.MIN_REQUESTS requests is read from its pre-aggregate, on time bins of whole seconds
    (analysis.heatmap_histogram: cells exact on that grid, lines within 0.5 %)."""
    stage_param = _check_stage(stage)
    cell_cols = ["time", "latency_low_ms", "latency_high_ms", "count"]
    line_cols = ["time", "p50_ms", "p99_ms", "requests"]
    with reading(source) as conn:
        bins = (max(1, int(time_bins)), max(1, int(bins_per_decade)))
        rows = heatmap_rows(conn, flt, stage_param, *bins)  # a whole large run: its pre-aggregate
        if rows is None:
            rows = conn.run("heatmap", [stage_param, *bins], where=flt).fetchall()
        reason = None if rows else _no_requests_reason(conn, flt)
    if not rows:
        return Heatmap(
            stage=stage,
            time_bin_seconds=0.0,
            bins_per_decade=bins_per_decade,
            cells=pd.DataFrame(columns=cell_cols),
            lines=pd.DataFrame(columns=line_cols),
            reason=reason,
        )
    t0, width = rows[0][6], rows[0][7]

    def when(tb: int) -> datetime:
        return datetime.fromtimestamp((t0 + tb * width) / 1e9, tz=UTC).replace(tzinfo=None)

    cells = [
        (when(tb), 10 ** (lb / bins_per_decade), 10 ** ((lb + 1) / bins_per_decade), n)
        for kind, tb, lb, n, *_ in rows
        if kind == "cell"
    ]
    lines = [(when(tb), p50 / 1e6, p99 / 1e6, n) for kind, tb, _, n, p50, p99, *_ in rows if kind == "line"]
    return Heatmap(
        stage=stage,
        time_bin_seconds=width / 1e9,
        bins_per_decade=bins_per_decade,
        cells=pd.DataFrame(cells, columns=cell_cols).sort_values(
            ["time", "latency_low_ms"], ignore_index=True
        ),
        lines=pd.DataFrame(lines, columns=line_cols).sort_values("time", ignore_index=True),
    )


# request_list.sql's Duration floor when there is none (every request passes).
NO_FLOOR_NS = -(2**63)


def _request_list(
    source: Source, flt: Filter, stage: str, bounds: list[Any], limit: int, floor_ns: int = NO_FLOOR_NS
) -> pd.DataFrame:
    with reading(source) as conn:
        return conn.run("request_list", [stage, *bounds, int(floor_ns), int(limit)], where=flt).df()


def slowest_floor_ns(conn: Reader, flt: Filter, limit: int) -> int:
    """A Duration (ns) the `limit` slowest requests of the filter all reach, from the runs'
    histograms (analysis.histogram: a whole run, or every run when the filter sets nothing), so
    the read skips the requests below it (the store's min/max per block of rows: most blocks of a
    large run hold none of its slowest) and its answer is exact. The limit-th slowest of all runs
    is at least the limit-th slowest of each, so every run's floor holds and the highest is taken.
    NO_FLOOR_NS for any other filter and where no histogram is read (a small run: the exact read
    is fast there)."""
    if whole_run(flt):
        runs = [flt.run]
    elif flt == Filter():
        runs = runs_with_requests(conn)
    else:
        return NO_FLOOR_NS
    floors = []
    for run in runs:
        histogram = run_histogram(conn, Filter(run=run))
        floor = histogram.e2e.floor_of_top(int(limit)) if histogram is not None else None
        if floor is not None:
            floors.append(floor)
    return max(floors, default=NO_FLOOR_NS)


def select_requests(
    source: Source, flt: Filter, rect: Rect, stage: str | None = None, limit: int = 500
) -> pd.DataFrame:
    """Requests inside a heatmap rectangle, slowest first: same columns as `slowest_traces`."""
    bounds = [rect.start, rect.end, int(rect.low_ms * 1e6), int(rect.high_ms * 1e6)]
    return _request_list(source, flt, _check_stage(stage), bounds, limit)


def slowest_traces(source: Source, flt: Filter, limit: int = 50) -> pd.DataFrame:
    """DataFrame[run, trace_id, root_span_id, timestamp, duration_ms, client_duration_ms, service,
    route, instance, is_error, dominant_stage, dominant_stage_ms, spans], slowest first. A large
    run (or all runs) reads only its requests at or above slowest_floor_ns: the same list."""
    with reading(source) as conn:
        floor_ns = slowest_floor_ns(conn, flt, limit)
        return _request_list(conn, flt, "", [None, None, None, None], limit, floor_ns)
