"""Same answers on both engines: the same traces loaded into DuckDB and into chdb (the ClickHouse engine
in-process) give the same derived requests and the same views: counts exact, percentiles identical
(one quantile definition: exact order statistics, interpolated in Python as DuckDB's quantile_cont
does), shares within 1e-9.

Runs: hand-built traces with parallel and overlapping branches (the sweep), and simulated runs of the
reference pipeline (several scenarios and topologies). chdb holds one data folder per process, so one
package-scoped store pair (conftest.py here) serves every module in this folder."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from parity_traces import SIMULATED

from tailscope.store.clickhouse.engine import ClickHouseStore
from tailscope.store.duckdb.store import DuckDBStore as Store

pytest.importorskip(
    "chdb", reason="chdb not installed (the [clickhouse] extra): no ClickHouse engine to compare"
)
pytest.importorskip("reference_pipeline.simulate.api")

REQUEST_COLUMNS = (
    "RunLabel, TraceId, SpanId, ServiceName, Route, Instance, Duration, IsError, ClientDuration, "
    "SpanCount, DominantStage, ingress_ns, queue_ns, parsing_ns, feature_hydration_ns, preprocessing_ns, "
    "model_forward_ns, postprocessing_ns, downstream_ns, serialization_ns, unattributed_ns"
)


@pytest.mark.parametrize("run", ["hand", "frameworks", *SIMULATED])
def test_derived_requests_are_identical(stores: tuple[Store, ClickHouseStore], run: str) -> None:
    duck, clickhouse = stores
    columns = REQUEST_COLUMNS
    # (fixed column list; the run is a parameter on both engines)
    expected = duck.query(f"SELECT {columns} FROM requests WHERE RunLabel = ? ORDER BY TraceId", [run]).rows
    got = clickhouse.query(
        f"SELECT {columns} FROM tailscope_requests WHERE RunLabel = {{run:String}} ORDER BY TraceId",
        {"run": run},
    ).rows
    assert len(expected) > 0
    assert len(got) == len(expected)
    assert got == expected


def test_hand_built_traces_take_the_sweep(stores: tuple[Store, ClickHouseStore]) -> None:
    # the lookup (5-30 ms) overlaps the embedding for 10 ms: the sweep gives each half of the overlap,
    # so the lookup keeps 20 ms, not its whole 25 ms; guards that the comparison covers the sweep
    _, clickhouse = stores
    values = clickhouse.query(
        "SELECT DISTINCT feature_hydration_ns FROM tailscope_requests WHERE RunLabel = 'hand'"
    ).rows
    assert values == [(20_000_000,)]


def test_quantile_definition_is_duckdbs_bit_for_bit() -> None:
    # the Python interpolation the ClickHouse views use, against DuckDB's quantile_cont itself
    import duckdb
    import numpy as np

    from tailscope.store.clickhouse.quantiles import from_order_statistics, position

    rng = np.random.default_rng(7)
    conn = duckdb.connect()
    levels = [0.45, 0.5, 0.55, 0.9, 0.95, 0.99, 0.999]
    for _ in range(300):
        values = np.sort(rng.integers(0, 10**10, int(rng.integers(1, 400))))
        expected = conn.execute(
            "SELECT quantile_cont(v, ?) FROM (SELECT unnest(?::BIGINT[]) AS v)", [levels, values.tolist()]
        ).fetchone()[0]
        pairs = [(values[position(len(values), q)[0]], values[position(len(values), q)[1]]) for q in levels]
        assert from_order_statistics(pairs, len(values), levels) == expected


WATERFALL = "tests/parity/test_clickhouse_parity.py::test_waterfall_is_the_same"


def _waterfall_case(run: str, band: str) -> Any:
    """Every band on the hand-built run (every path of the span tree; its p99.9 band is one request)
    and p99 on each simulated run; the simulated runs' other bands in the full tier (./test.sh --full):
    the same statements with another quantile, checked on the hand-built run."""
    if run == "hand" or band == "p99":
        return (run, band)
    covers = (f"{WATERFALL}[hand-{band}]", f"{WATERFALL}[{run}-p99]")
    return pytest.param(run, band, marks=pytest.mark.full(covered_by=covers))


@pytest.mark.parametrize(
    ("run", "band"),
    [_waterfall_case(run, band) for run in ["hand", *SIMULATED] for band in ["p50", "p90", "p99", "p99.9"]],
)
def test_waterfall_is_the_same(stores: tuple[Store, ClickHouseStore], run: str, band: str) -> None:
    from tailscope.analysis import views
    from tailscope.analysis.types import Filter

    duck, clickhouse = stores
    expected = views.waterfall(duck, Filter(run=run), band)
    got = views.waterfall(clickhouse, Filter(run=run), band)
    assert (got.requests_total, got.requests_in_band, got.reason) == (
        expected.requests_total,
        expected.requests_in_band,
        expected.reason,
    )
    assert (got.band_low_ms, got.band_high_ms) == (expected.band_low_ms, expected.band_high_ms)
    assert got.band_mean_ms == pytest.approx(expected.band_mean_ms, rel=1e-12)
    assert got.median_band_mean_ms == pytest.approx(expected.median_band_mean_ms, rel=1e-12)
    for g, e in zip(got.stages, expected.stages, strict=True):
        assert g.stage == e.stage
        assert (g.p50_ms, g.p95_ms, g.p99_ms, g.p999_ms) == (e.p50_ms, e.p95_ms, e.p99_ms, e.p999_ms)
        assert g.mean_ms == pytest.approx(e.mean_ms, rel=1e-12, abs=1e-12)
        assert g.median_band_mean_ms == pytest.approx(e.median_band_mean_ms, rel=1e-12, abs=1e-12)
        if e.tail_excess_share is None:
            assert g.tail_excess_share is None
        else:
            assert g.tail_excess_share == pytest.approx(e.tail_excess_share, abs=1e-9)


def test_overview_is_the_same(stores: tuple[Store, ClickHouseStore]) -> None:
    from tailscope.analysis import views
    from tailscope.analysis.types import Filter

    duck, clickhouse = stores
    expected = views.overview(duck, Filter())
    got = views.overview(clickhouse, Filter())
    runs = sorted(["hand", "frameworks", "async", *SIMULATED])  # every run of the store pair (conftest)
    assert [r.run for r in got.runs] == [r.run for r in expected.runs] == runs
    for g, e in zip(got.runs, expected.runs, strict=True):
        assert (g.requests, g.errors, g.first_request, g.last_request) == (
            e.requests,
            e.errors,
            e.first_request,
            e.last_request,
        )
        assert (g.p50_ms, g.p95_ms, g.p99_ms, g.p999_ms) == (e.p50_ms, e.p95_ms, e.p99_ms, e.p999_ms)
        assert g.throughput_rps == e.throughput_rps
        assert (g.tail_stage, g.services) == (e.tail_stage, e.services)
        assert g.tail_stage_share == pytest.approx(e.tail_stage_share, abs=1e-9)


def test_compare_is_the_same(stores: tuple[Store, ClickHouseStore]) -> None:
    from tailscope.analysis import compare

    duck, clickhouse = stores
    expected = compare(duck, "steady", "burst", price_a_per_hour=1.0, price_b_per_hour=2.0, resamples=300)
    got = compare(clickhouse, "steady", "burst", price_a_per_hour=1.0, price_b_per_hour=2.0, resamples=300)
    assert got.reason == expected.reason is None
    assert got.stages == expected.stages  # same values, same seed: the same bootstrap draws
    assert got.a == expected.a and got.b == expected.b


def test_empty_filter_gives_the_same_reason(stores: tuple[Store, ClickHouseStore]) -> None:
    from tailscope.analysis import views
    from tailscope.analysis.types import Filter

    duck, clickhouse = stores
    for flt in (Filter(run="nope"), Filter(run="steady", service="no-such-service")):
        assert views.waterfall(clickhouse, flt).reason == views.waterfall(duck, flt).reason
    assert views.list_runs(clickhouse) == views.list_runs(duck)


DIAGNOSED = ["steady", "burst", "lock", "gateway", "alt-slow", "async"]


def _findings(result: Any) -> list[tuple[str, str | None, str | None]]:
    return [(f.pattern, f.stage, f.span_name) for f in result.findings]


@pytest.mark.parametrize("run", DIAGNOSED)
def test_diagnosis_is_identical_on_both_engines(stores: tuple[Store, ClickHouseStore], run: str) -> None:
    # the diagnosis reads a run's spans in (start, trace id, span id) order on both engines, whatever
    # order they were stored in (its samples and null draws follow the span order: read in each
    # engine's storage order, a weak finding's confidence was 0.27 on one and 0.14 on the other)
    from tailscope.analysis.diagnosis import diagnose

    duck, clickhouse = stores
    got, expected = diagnose(clickhouse, run), diagnose(duck, run)
    assert _findings(got) == _findings(expected)
    for g, e in zip(got.findings, expected.findings, strict=True):
        assert g.confidence == pytest.approx(e.confidence, abs=1e-9)
        assert g.share == pytest.approx(e.share, abs=1e-9)


def test_filtered_views_are_the_same(stores: tuple[Store, ClickHouseStore]) -> None:
    # every filter field on both engines: service, route, instance, and a time range (naive UTC)
    from dataclasses import replace

    from tailscope.analysis import views
    from tailscope.analysis.types import Filter

    duck, clickhouse = stores
    run = views.overview(duck, Filter(run="gateway")).runs[0]
    middle = run.first_request + (run.last_request - run.first_request) / 2
    options = views.filter_options(duck, "gateway")
    assert views.filter_options(clickhouse, "gateway") == options
    base = Filter(run="gateway", service=options["services"][0], route=options["routes"][0])
    for flt in (base, replace(base, start=middle), replace(base, end=middle), replace(base, instance="none")):
        expected, got = views.waterfall(duck, flt, "p90"), views.waterfall(clickhouse, flt, "p90")
        assert (got.requests_total, got.requests_in_band, got.reason) == (
            expected.requests_total,
            expected.requests_in_band,
            expected.reason,
        )
        assert [s.p99_ms for s in got.stages] == [s.p99_ms for s in expected.stages]
    assert 0 < views.waterfall(duck, replace(base, start=middle)).requests_total < run.requests


def test_framework_phases_reach_the_diagnosis_on_both_engines(stores: tuple[Store, ClickHouseStore]) -> None:
    # the diagnosis reads the phase spans too (its frame's stages): the frames agree span for span
    from tailscope.analysis.diagnosis.load import load_frame
    from tailscope.analysis.source import reading

    duck, clickhouse = stores
    frames = {}
    for name, store in (("duckdb", duck), ("clickhouse", clickhouse)):
        with reading(store) as conn:
            frame = load_frame(conn, "frameworks")
        names = [frame.names[i] for i in frame.name]
        frames[name] = sorted(zip(names, frame.stage.tolist(), frame.dur.tolist(), strict=True))
    assert len(frames["clickhouse"]) == len(frames["duckdb"]) > 0
    assert frames["clickhouse"] == frames["duckdb"]
    assert any(name == "decode" for name, _, _ in frames["clickhouse"])  # a vLLM phase span


def test_gc_events_are_read_alike(stores: tuple[Store, ClickHouseStore]) -> None:
    """Runtime GC pauses reported as span events, their durations in ns, ms or seconds (the
    OpenTelemetry runtime conventions), read the same from both engines."""
    from tailscope.analysis.diagnosis.load import load_frame
    from tailscope.analysis.source import reading

    frames = []
    for store in stores:
        with reading(store) as conn:
            frame = load_frame(conn, "hand")
        order = np.lexsort((frame.gc_dur, frame.gc_time))
        frames.append((frame.gc_time[order].tolist(), frame.gc_dur[order].tolist()))
    assert frames[0] == frames[1]
    assert sorted(set(frames[0][1])) == [700_000, 1_500_000, 3_500_000, 12_500_000, 200_000_000]


def test_span_links_are_read_alike(stores: tuple[Store, ClickHouseStore]) -> None:
    """A batch consumer's links to its messages' producer spans (diagnosis_links.sql), read the same
    from both engines, every link resolved to a span of the run."""
    from tailscope.analysis.diagnosis.load import load_frame
    from tailscope.analysis.source import reading

    links = []
    for store in stores:
        with reading(store) as conn:
            frame = load_frame(conn, "async")
        pairs = zip(frame.start[frame.link_from].tolist(), frame.start[frame.link_to].tolist(), strict=True)
        links.append(sorted(pairs))
    assert links[0] == links[1]
    assert len(links[0]) > 500


# the sampled read of the steady run in the full tier (./test.sh --full): the same windows and statements
# as the lock run's, whose findings also compare; steady's unsampled diagnosis stays in the default
SAMPLED_AS_LOCK = pytest.mark.full(
    covered_by=(
        "tests/parity/test_clickhouse_parity.py::test_sampled_diagnosis_is_identical_on_both_engines[lock]",
        "tests/parity/test_clickhouse_parity.py::test_diagnosis_is_identical_on_both_engines[steady]",
    )
)


@pytest.mark.parametrize("run", [pytest.param("steady", marks=SAMPLED_AS_LOCK), "lock"])
def test_sampled_diagnosis_is_identical_on_both_engines(
    stores: tuple[Store, ClickHouseStore], run: str
) -> None:
    # a run above max_spans is read as a sample of time windows (diagnosis/sample.py): the same
    # windows, the same spans and the same findings on both engines
    from tailscope.analysis.diagnosis import diagnose

    duck, clickhouse = stores
    got, expected = diagnose(clickhouse, run, max_spans=3000), diagnose(duck, run, max_spans=3000)
    assert expected.sampling and expected.sampling["spans_read"] < expected.sampling["spans_in_run"]
    assert got.sampling == expected.sampling
    assert _findings(got) == _findings(expected)
    for g, e in zip(got.findings, expected.findings, strict=True):
        assert g.confidence == pytest.approx(e.confidence, abs=1e-9)
