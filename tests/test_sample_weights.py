"""Head sampling with weights (issue 28): a run sampled at 0.25 with its slow requests always kept
(reference_pipeline.sample_file: the SamplingProcessor's rule on a simulated run) gives the whole
run's p50, p99 and stage shares within sampling error once its weights are honoured, and figures
biased towards the slow requests when they are not; a run without weights reads the unweighted
statements as before; both engines agree on the weighted figures; a store made before the Weight
column is migrated with its sampled run's weights.

chdb holds one data folder per process: one module-scoped ClickHouse store, closed at the end."""

from __future__ import annotations

import math
import shutil
from collections.abc import Iterator
from pathlib import Path

import duckdb
import numpy as np
import orjson
import pytest

from reference_pipeline.sample_file import sample_file
from reference_pipeline.simulate import simulate_to_file
from tailscope import sql
from tailscope.analysis import tail_vs_body, views
from tailscope.analysis.breakdown import stage_breakdown as band_breakdown
from tailscope.analysis.types import Filter
from tailscope.cli.main import main
from tailscope.store.duckdb.connection import connect_reader, connect_writer
from tailscope.store.duckdb.reader import DuckDBReader
from tailscope.store.duckdb.statements import filtered
from tailscope.store.duckdb.store import DuckDBStore
from tailscope.store.engine import open_store
from tailscope.store.errors import StoreVersionError

RATE = 0.25
REQUESTS = 8000


@pytest.fixture(scope="module")
def traces(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("weights")
    full = folder / "full.json"
    simulate_to_file(full, "slow-downstream", REQUESTS, seed=11)
    roots = []  # the slow rule at the whole run's p95 of request latency (root spans)
    for line in full.read_bytes().splitlines():
        for resource in orjson.loads(line)["resourceSpans"]:
            for scope in resource["scopeSpans"]:
                roots += [
                    int(s["endTimeUnixNano"]) - int(s["startTimeUnixNano"])
                    for s in scope["spans"]
                    if not s.get("parentSpanId")
                ]
    slow_ms = float(np.percentile(roots, 95)) / 1e6
    sampled = folder / "sampled.json"
    counts = sample_file(full, sampled, RATE, keep_slower_than_ms=slow_ms)
    assert counts["by_rule"] > 0 and counts["by_head"] > 0
    return {"full": full, "sampled": sampled}


@pytest.fixture(scope="module")
def duck(traces: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> DuckDBStore:
    path = tmp_path_factory.mktemp("duck") / "store.duckdb"
    for run, file in traces.items():
        assert main(["ingest", str(file), "--db", str(path), "--run", run]) == 0
    return DuckDBStore(path)


@pytest.fixture(scope="module")
def chdb_url(traces: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A chdb store holding the sampled run (the whole run joins it only for the full tier's test)."""
    pytest.importorskip("chdb", reason="chdb not installed (the [clickhouse] extra)")
    url = f"chdb://{tmp_path_factory.mktemp('ch') / 'chdb'}"
    assert main(["ingest", str(traces["sampled"]), "--store", url, "--run", "sampled"]) == 0
    yield url


@pytest.fixture(scope="module")
def chdb_with_the_whole_run(traces: dict[str, Path], chdb_url: str) -> str:
    assert main(["ingest", str(traces["full"]), "--store", chdb_url, "--run", "full"]) == 0
    return chdb_url


def _close(store: object) -> None:
    close = getattr(store, "close", None)
    if close is not None:
        close()


def test_the_sampled_run_carries_weights_and_stands_for_the_whole_run(duck: DuckDBStore) -> None:
    with connect_reader(duck.path) as conn:
        rows = dict(
            conn.execute(
                "SELECT RunLabel, list(DISTINCT Weight ORDER BY Weight) FROM requests GROUP BY 1"
            ).fetchall()
        )
    assert rows["full"] == [1.0]
    assert rows["sampled"] == [1.0, 1 / RATE]  # kept by the slow rule: itself; head-sampled: 4
    full, sampled = (views.overview(duck, Filter(run=r)).runs[0] for r in ("full", "sampled"))
    assert abs(sampled.requests - full.requests) / full.requests < 0.05  # the sum of weights


def _figures(store: object, run: str) -> dict[str, float]:
    summary = views.overview(store, Filter(run=run)).runs[0]
    waterfall = views.waterfall(store, Filter(run=run), "p99")
    shares = {b.stage: b.tail_excess_share or 0.0 for b in waterfall.stages}
    means = {b.stage: b.mean_ms for b in waterfall.stages}
    return {
        "p50": summary.p50_ms,
        "p99": summary.p99_ms,
        **{f"share:{k}": v for k, v in shares.items()},
        **{f"mean:{k}": v for k, v in means.items()},
    }


def test_weighted_p50_p99_and_stage_shares_match_the_whole_run(duck: DuckDBStore) -> None:
    full, sampled = _figures(duck, "full"), _figures(duck, "sampled")
    # p50 from ~2,000 head-sampled requests of 8,000: its standard error is ~1-2 % here
    assert sampled["p50"] == pytest.approx(full["p50"], rel=0.05)
    # p99: every request above the p95 is in the sample (the rule), so it is exact up to ties
    assert sampled["p99"] == pytest.approx(full["p99"], rel=0.02)
    top = max((k for k in full if k.startswith("share:")), key=lambda k: full[k])
    assert max((k for k in sampled if k.startswith("share:")), key=lambda k: sampled[k]) == top
    for key in (k for k in full if k.startswith("share:")):
        assert abs(sampled[key] - full[key]) < 0.05, key


def test_without_the_weights_the_sample_is_biased_towards_the_slow_requests(duck: DuckDBStore) -> None:
    """What the statements before weights gave on the sampled run (the unweighted files forced):
    the slow requests the rule keeps count four times too much."""
    full = views.overview(duck, Filter(run="full")).runs[0]
    with connect_reader(duck.path) as conn:
        text, params = filtered("overview", Filter(run="sampled"))
        _run, n, *_rest, e2e, _services = conn.execute(text, params).fetchone()
    assert n < 0.5 * full.requests
    assert e2e[0] / 1e6 > 1.1 * full.p50_ms or e2e[2] / 1e6 > 1.1 * full.p99_ms


def test_a_run_without_weights_reads_the_unweighted_statements(duck: DuckDBStore) -> None:
    """All weights 1: quantile_cont's figures (numpy's linear percentiles), not the weighted ones."""
    with connect_reader(duck.path) as conn:
        reader = DuckDBReader(conn)
        assert not reader.weighted(Filter(run="full")) and reader.weighted(Filter(run="sampled"))
        durations = [
            r[0] for r in conn.execute("SELECT Duration FROM requests WHERE RunLabel = 'full'").fetchall()
        ]
        stage = [
            r[0]
            for r in conn.execute("SELECT downstream_ns FROM requests WHERE RunLabel = 'full'").fetchall()
        ]
    summary = views.overview(duck, Filter(run="full")).runs[0]
    assert summary.requests == len(durations)
    for got, q in zip(
        (summary.p50_ms, summary.p95_ms, summary.p99_ms, summary.p999_ms), (50, 95, 99, 99.9), strict=True
    ):
        assert got == pytest.approx(np.percentile(durations, q) / 1e6, rel=1e-12)
    waterfall = views.waterfall(duck, Filter(run="full"), "p99")
    bar = next(b for b in waterfall.stages if b.stage == "downstream")
    assert bar.p99_ms == pytest.approx(np.percentile(stage, 99) / 1e6, rel=1e-12)


def test_weighted_quantile_is_the_smallest_value_reaching_q_of_the_weight(tmp_path: Path) -> None:
    """A hand-made table: values 1..10, value 10 weighing 10 (half the total of 19 + 1)."""
    with duckdb.connect() as conn:
        for statement in sql.load("schema").split(";"):
            if statement.strip():
                conn.execute(statement)
        conn.execute(
            "INSERT INTO requests SELECT 'r', 't' || i, 's' || i, TIMESTAMP_NS '2026-01-01', 'svc', '/', '',"
            " i * 1000000, false, NULL, 1, 'queue', 0, i * 1000000, 0, 0, 0, 0, 0, 0, 0, 0,"
            " CASE WHEN i = 10 THEN 11 ELSE 1 END, NULL FROM range(1, 11) AS t(i)"
        )
        reader = DuckDBReader(conn)
        assert reader.weighted(Filter(run="r"))
        _run, n, errors, *_times, e2e, _ = reader.run("overview", where=Filter(run="r")).fetchone()
        assert n == 20 and errors == 0
        # cumulative weights 1..9 then 20: q = 0.45 of 20 is 9 -> value 9 ms; q = 0.5 -> 10 ms
        assert e2e == [10e6, 10e6, 10e6, 10e6]
        row = reader.run("waterfall", [0.45, 0.55, False], where=Filter(run="r")).fetchone()
        assert row[3] == 9e6 and row[4] == 10e6  # the band [q.45, q.55)
        assert row[1] == 1  # the band holds value 9 alone
        q = reader.run("stage_percentiles", where=Filter(run="r")).fetchone()
        assert q[1] == [10e6, 10e6, 10e6, 10e6] and q[0] == [0.0] * 4


def test_the_heatmap_counts_and_lines_are_the_populations(duck: DuckDBStore) -> None:
    full = views.heatmap(duck, Filter(run="full"), time_bins=4)
    sampled = views.heatmap(duck, Filter(run="sampled"), time_bins=4)
    assert sampled.lines["requests"].sum() == pytest.approx(full.lines["requests"].sum(), rel=0.05)
    for q in ("p50_ms", "p99_ms"):  # per time bin: ~500 kept requests of ~2,000
        ratio = sampled.lines[q].to_numpy() / full.lines[q].to_numpy()
        assert np.all(np.abs(ratio - 1) < (0.08 if q == "p50_ms" else 0.1)), (q, ratio)


def test_tail_vs_body_and_breakdown_count_what_the_sample_stands_for(duck: DuckDBStore) -> None:
    full = tail_vs_body(duck, Filter(run="full"), tail_quantile=0.99)
    sampled = tail_vs_body(duck, Filter(run="sampled"), tail_quantile=0.99)
    assert sampled.selected_requests == pytest.approx(full.selected_requests, rel=0.1)
    assert sampled.rest_requests == pytest.approx(full.rest_requests, rel=0.05)
    table = band_breakdown(duck, Filter(run="sampled"), "p99", sample=10_000)
    assert not table.empty


def _views(store: object, run: str) -> tuple:
    flt = Filter(run=run)
    summary = views.overview(store, flt).runs[0]
    waterfall = views.waterfall(store, flt, "p99")
    tail = tail_vs_body(store, flt, tail_quantile=0.99)
    breakdown = band_breakdown(store, flt, "p99", sample=10_000)
    heat = views.heatmap(store, flt, time_bins=12)
    return summary, waterfall, tail, breakdown, heat


def _close_numbers(a: object, b: object, path: str = "") -> None:
    if isinstance(a, float) and isinstance(b, float):
        assert (math.isnan(a) and math.isnan(b)) or a == pytest.approx(b, rel=1e-9, abs=1e-9), path
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            _close_numbers(x, y, f"{path}[{i}]")
    else:
        assert a == b, path


# The unweighted run on both engines repeats what the parity folder checks view by view (on runs of
# every shape): in the full tier (./test.sh --full).
UNWEIGHTED_PARITY = pytest.mark.full(
    covered_by=(
        "tests/parity/test_clickhouse_parity.py::test_overview_is_the_same",
        "tests/parity/test_clickhouse_parity.py::test_waterfall_is_the_same[steady-p99]",
        "tests/parity/test_clickhouse_views.py::test_tail_vs_body_of_a_large_selection_samples_the_same_blocks[lock]",
        "tests/parity/test_clickhouse_views.py::test_stage_breakdown_is_the_same[lock-p99]",
        "tests/parity/test_clickhouse_views.py::test_heatmap_is_the_same[steady-None]",
    )
)


@pytest.mark.parametrize("run", ["sampled", pytest.param("full", marks=UNWEIGHTED_PARITY)])
def test_both_engines_give_the_same_weighted_figures(
    duck: DuckDBStore, chdb_url: str, run: str, request: pytest.FixtureRequest
) -> None:
    if run == "full":
        request.getfixturevalue("chdb_with_the_whole_run")
    clickhouse = open_store(chdb_url)
    try:
        d_summary, d_fall, d_tail, d_breakdown, d_heat = _views(duck, run)
        c_summary, c_fall, c_tail, c_breakdown, c_heat = _views(clickhouse, run)
    finally:
        _close(clickhouse)
    for field in ("requests", "errors", "p50_ms", "p95_ms", "p99_ms", "p999_ms", "throughput_rps"):
        _close_numbers(getattr(c_summary, field), getattr(d_summary, field), field)
    for field in ("requests_total", "requests_in_band", "band_low_ms", "band_high_ms", "band_mean_ms"):
        _close_numbers(getattr(c_fall, field), getattr(d_fall, field), field)
    for c_bar, d_bar in zip(c_fall.stages, d_fall.stages, strict=True):
        _close_numbers(list(vars(c_bar).values()), list(vars(d_bar).values()), c_bar.stage)
    assert (c_tail.selected_requests, c_tail.rest_requests) == (
        d_tail.selected_requests,
        d_tail.rest_requests,
    )
    _close_numbers(c_tail.stages.values.tolist(), d_tail.stages.values.tolist(), "tail stages")
    for part in ("cells", "lines"):
        c_frame, d_frame = getattr(c_heat, part), getattr(d_heat, part)
        assert len(c_frame) == len(d_frame) > 0
        numbers = [col for col in d_frame.columns if col != "time"]
        _close_numbers(c_frame[numbers].values.tolist(), d_frame[numbers].values.tolist(), part)
    key = ["stage", "span_name"]
    _close_numbers(
        c_breakdown.sort_values(key).values.tolist(),
        d_breakdown.sort_values(key).values.tolist(),
        "breakdown",
    )


def test_a_version_2_store_is_migrated_with_its_sampled_runs_weights(
    duck: DuckDBStore, tmp_path: Path
) -> None:
    """A version-2 store (the same store without the Weight column) is refused by readers, and
    `tailscope migrate` restores every weight and every figure."""
    path = tmp_path / "old.duckdb"
    shutil.copyfile(duck.path, path)
    with duckdb.connect(str(path)) as old:
        expected = old.execute("SELECT RunLabel, TraceId, Weight FROM requests ORDER BY ALL").fetchall()
        old.execute("ALTER TABLE requests DROP COLUMN Weight")
        old.execute("ALTER TABLE requests DROP COLUMN SpanTimes")  # version 4's
        old.execute("UPDATE schema_version SET version = 2")
    with pytest.raises(StoreVersionError, match="migrate"), connect_reader(path):
        pass
    assert main(["migrate", "--db", str(path)]) == 0
    with duckdb.connect(str(path), read_only=True) as conn:
        assert (
            conn.execute("SELECT RunLabel, TraceId, Weight FROM requests ORDER BY ALL").fetchall() == expected
        )
    assert _figures(DuckDBStore(path), "sampled") == _figures(duck, "sampled")
    with connect_writer(path):  # a migrated store opens as a current one
        pass


def test_a_clickhouse_store_made_before_the_weight_column_gets_it_on_open(chdb_url: str) -> None:
    store = open_store(chdb_url)
    try:
        before = _figures(store, "sampled")
        weights = "SELECT TraceId, Weight FROM tailscope_requests ORDER BY ALL"
        expected = store.query(weights).rows
        store.query("ALTER TABLE tailscope_requests DROP COLUMN Weight")
        store.prepare()
        assert store.query(weights).rows == expected
        assert _figures(store, "sampled") == before
        store.prepare()  # once migrated, nothing more to do
        assert (
            store.query("SELECT count() FROM system.tables WHERE name LIKE '%requests_new%'").single_value()
            == 0
        )
    finally:
        _close(store)


def test_the_diagnosis_draws_tail_and_body_from_the_population(duck: DuckDBStore) -> None:
    """The frame reads the weights (load.request_weights): the split's tail threshold is the views'
    weighted p99, the tail excess the whole run's within sampling error, the same top cause; a run
    without weights reads none (its split is the unweighted one, as before)."""
    from tailscope.analysis.diagnosis import diagnose
    from tailscope.analysis.diagnosis.load import load_frame
    from tailscope.analysis.diagnosis.model import Context

    with duck.reading() as conn:
        frames = {run: load_frame(conn, run) for run in ("full", "sampled")}
    assert frames["full"].requests.weight is None
    weight = frames["sampled"].requests.weight
    assert weight is not None and set(np.unique(weight).tolist()) == {1.0, 1 / RATE}
    splits = {run: Context(frame).split for run, frame in frames.items()}
    p99 = views.overview(duck, Filter(run="sampled")).runs[0].p99_ms
    assert splits["sampled"].threshold_ns / 1e6 == pytest.approx(p99, rel=1e-12)
    assert splits["sampled"].quantile == splits["full"].quantile == 0.99  # the population's size
    assert splits["sampled"].excess_ns == pytest.approx(splits["full"].excess_ns, rel=0.05)
    full, sampled = diagnose(duck, "full"), diagnose(duck, "sampled")
    assert sampled.findings[0].pattern == full.findings[0].pattern
    assert sampled.tail["p99_ms"] == pytest.approx(full.tail["p99_ms"], rel=0.02)


def test_tail_split_with_weights_one_is_the_unweighted_split() -> None:
    from tailscope.analysis.diagnosis.stats import tail_split, weighted_quantile

    latency = np.random.default_rng(3).lognormal(3.0, 0.6, 5000)
    plain, ones = tail_split(latency), tail_split(latency, np.ones(len(latency)))
    assert (
        ones.weight is None and ones.threshold_ns == plain.threshold_ns and ones.excess_ns == plain.excess_ns
    )
    # weights of 4 on the fast half: the threshold moves to the population's p99
    weight = np.where(latency < np.median(latency), 4.0, 1.0)
    split = tail_split(latency, weight)
    assert split.threshold_ns == weighted_quantile(latency, weight, 0.99) < plain.threshold_ns
    assert weighted_quantile(np.array([3.0, 1.0, 2.0]), np.array([1.0, 1.0, 2.0]), 0.5) == 2.0


def test_the_what_if_measures_the_population(duck: DuckDBStore) -> None:
    """The what-if's percentiles are weighted on a sampled run: its 'as measured' p50/p99 are the
    whole run's within sampling error (unweighted, the slow requests the rule keeps pull them up)."""
    from tailscope.analysis.whatif import whatif
    from tailscope.analysis.whatif.engine import evaluate

    full, sampled = whatif(duck, "full", only={"none"}), whatif(duck, "sampled", only={"none"})
    assert sampled.measured.p50_ms == pytest.approx(full.measured.p50_ms, rel=0.05)
    assert sampled.measured.p99_ms == pytest.approx(full.measured.p99_ms, rel=0.05)
    with duck.reading() as conn:
        from tailscope.analysis.diagnosis.load import load_frame

        frame = load_frame(conn, "sampled")
    frame.requests.weight = None  # what the what-if gave before weights
    unweighted = evaluate(frame, [], only={"none"})
    assert unweighted.measured.p99_ms > 1.5 * full.measured.p99_ms
