"""Per-run pre-aggregates (issue 29): every derive keeps request_histogram and stage_histogram equal
to what a rebuild from the run's requests gives (a whole-run derive, a refresh of touched traces, a
rule edit); the views of a whole run read from them give the exact path's counts and means, its
percentiles within histogram.RELATIVE_ERROR, and tail vs body's exact split; weighted runs too; a
store without the tables (an older tailscope's) keeps being read, and gets them at its next derive.

histogram.MIN_REQUESTS is set to 0 here so the small test runs take the histogram path."""

from __future__ import annotations

import math
from pathlib import Path

import duckdb
import numpy as np
import pytest

from tailscope.analysis import compare, histogram, overview, tail_vs_body, waterfall
from tailscope.analysis.types import Filter
from tailscope.cli.main import main
from tailscope.store.duckdb import histogram as store_histogram
from tailscope.store.duckdb.connection import connect_writer
from tailscope.store.duckdb.rule_remap import replace_rules
from tailscope.store.duckdb.rules import rules_in_force
from tailscope.store.duckdb.store import DuckDBStore
from tests.app_data import split_in_two_parts, weighted_copy
from tests.run_cache import ingested_copy, simulated_copy

BOUND = histogram.RELATIVE_ERROR * (1 + 1e-9)


def _stored(conn: duckdb.DuckDBPyConnection, run: str) -> tuple[list, list]:
    e2e = conn.execute(
        "SELECT * EXCLUDE (RunLabel) FROM request_histogram WHERE RunLabel = ? ORDER BY Bucket", [run]
    ).fetchall()
    stages = conn.execute(
        "SELECT * EXCLUDE (RunLabel) FROM stage_histogram WHERE RunLabel = ? ORDER BY Stage, Bucket", [run]
    ).fetchall()
    return e2e, stages


def _rebuilt(conn: duckdb.DuckDBPyConnection, run: str) -> tuple[list, list]:
    conn.execute("BEGIN TRANSACTION")
    try:
        store_histogram.rebuild(conn, run)
        return _stored(conn, run)
    finally:
        conn.execute("ROLLBACK")


def _same(got: tuple[list, list], expected: tuple[list, list]) -> None:
    assert len(got[0]) == len(expected[0]) > 0 and len(got[1]) == len(expected[1]) > 0
    for g_rows, e_rows in zip(got, expected, strict=True):
        for g, e in zip(g_rows, e_rows, strict=True):
            assert [v for v in g if isinstance(v, str)] == [v for v in e if isinstance(v, str)]
            assert [v for v in g if not isinstance(v, str)] == pytest.approx(
                [v for v in e if not isinstance(v, str)], rel=1e-12, abs=1e-6
            )


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("histogram")
    out = {}
    for name, scenario, seed in (("a", "lock-contention", 3), ("b", "slow-downstream", 5)):
        out[name] = simulated_copy(tmp_path_factory, folder / f"{name}.json", scenario, 1500, seed)
    out["a1"], out["a2"] = split_in_two_parts(out["a"])  # a: written in two parts, the last 10 %
    return out


@pytest.fixture(scope="module")
def store(files: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> DuckDBStore:
    path = ingested_copy(tmp_path_factory, tmp_path_factory.mktemp("duck") / "store.duckdb", files["a1"], "a")
    assert main(["ingest", str(files["b"]), "--db", str(path), "--run", "b"]) == 0
    return DuckDBStore(path)


def test_every_derive_keeps_the_histograms_equal_to_a_rebuild(
    files: dict[str, Path], tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    path = ingested_copy(tmp_path_factory, tmp_path / "store.duckdb", files["a1"], "a")
    with connect_writer(path) as conn:
        before = _stored(conn, "a")
        _same(before, _rebuilt(conn, "a"))
    # the rest of the run: a refresh of the traces the write touched (some had spans already)
    assert main(["ingest", str(files["a2"]), "--db", str(path), "--run", "a"]) == 0
    with connect_writer(path) as conn:
        after = _stored(conn, "a")
        assert sum(row[1] for row in after[0]) > sum(row[1] for row in before[0])
        _same(after, _rebuilt(conn, "a"))
        rules = rules_in_force(conn)  # a rule edit that moves spans between stages
        edited = [r for r in rules if r.stage != "model_forward"]
        replace_rules(conn, edited)
        _same(_stored(conn, "a"), _rebuilt(conn, "a"))


def _close(a: float | None, b: float | None) -> None:
    assert a is not None and b is not None
    assert a == pytest.approx(b, rel=BOUND, abs=1e-9)


@pytest.fixture
def from_histogram(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(histogram, "MIN_REQUESTS", 0)


def _exact(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(histogram, "MIN_REQUESTS", 10**12)


def test_the_histogram_is_read_only_for_a_whole_run(store: DuckDBStore, from_histogram: None) -> None:
    with store.reading() as conn:
        assert histogram.run_histogram(conn, Filter(run="a")) is not None
        assert histogram.run_histogram(conn, Filter()) is None
        assert histogram.run_histogram(conn, Filter(run="a", route="/predict")) is None


def test_overview_and_waterfall_from_the_histogram_are_within_the_bound(
    store: DuckDBStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    _exact(monkeypatch)
    exact_overview, exact_waterfall = overview(store, Filter()), waterfall(store, Filter(run="a"), "p90")
    monkeypatch.setattr(histogram, "MIN_REQUESTS", 0)
    got_overview, got_waterfall = overview(store, Filter()), waterfall(store, Filter(run="a"), "p90")
    assert [r.run for r in got_overview.runs] == [r.run for r in exact_overview.runs] == ["a", "b"]
    for got, exact in zip(got_overview.runs, exact_overview.runs, strict=True):
        assert (got.requests, got.errors, got.first_request, got.last_request, got.services) == (
            exact.requests,
            exact.errors,
            exact.first_request,
            exact.last_request,
            exact.services,
        )
        assert got.throughput_rps == pytest.approx(exact.throughput_rps, rel=1e-12)
        for name in ("p50_ms", "p95_ms", "p99_ms", "p999_ms"):
            _close(getattr(got, name), getattr(exact, name))
        assert got.tail_stage == exact.tail_stage
    assert got_waterfall.requests_total == exact_waterfall.requests_total
    assert got_waterfall.requests_in_band == pytest.approx(exact_waterfall.requests_in_band, abs=1)
    _close(got_waterfall.band_low_ms, exact_waterfall.band_low_ms)
    for got, exact in zip(got_waterfall.stages, exact_waterfall.stages, strict=True):
        for name in ("p50_ms", "p95_ms", "p99_ms", "p999_ms"):
            _close(getattr(got, name), getattr(exact, name))
        # band means: the band's edge buckets apportioned (135 requests in the band here), close
        # to the exact band's
        assert got.mean_ms == pytest.approx(exact.mean_ms, abs=0.03 * exact_waterfall.band_mean_ms)


def test_tail_vs_body_from_the_histogram_splits_as_the_exact_path(
    store: DuckDBStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    _exact(monkeypatch)
    exact = tail_vs_body(store, Filter(run="a"), tail_quantile=0.95)
    monkeypatch.setattr(histogram, "MIN_REQUESTS", 0)
    got = tail_vs_body(store, Filter(run="a"), tail_quantile=0.95)
    assert (got.selected_requests, got.rest_requests) == (exact.selected_requests, exact.rest_requests)
    assert list(got.stages["stage"]) == list(exact.stages["stage"])
    for column in exact.stages.columns[1:]:
        assert got.stages[column].tolist() == pytest.approx(exact.stages[column].tolist(), rel=1e-9, abs=1e-9)


def test_compare_from_the_histogram_is_within_a_bucket(
    store: DuckDBStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    _exact(monkeypatch)
    exact = compare(store, "a", "b")
    monkeypatch.setattr(histogram, "MIN_REQUESTS", 0)
    got = compare(store, "a", "b")
    assert (got.a.requests, got.b.requests) == (exact.a.requests, exact.b.requests)
    width = 2 * histogram.RELATIVE_ERROR * 1.001  # a rank's value is read within its bucket
    for g, e in zip(got.stages, exact.stages, strict=True):
        assert (g.stage, g.quantile) == (e.stage, e.quantile)
        assert g.a_ms == pytest.approx(e.a_ms, rel=width, abs=1e-9)
        assert g.b_ms == pytest.approx(e.b_ms, rel=width, abs=1e-9)


def test_a_store_without_the_tables_is_read_exactly_and_gets_them_at_its_next_derive(
    files: dict[str, Path], tmp_path: Path, tmp_path_factory: pytest.TempPathFactory, from_histogram: None
) -> None:
    path = ingested_copy(tmp_path_factory, tmp_path / "store.duckdb", files["a1"], "a")
    with connect_writer(path) as conn:  # as an older tailscope left it
        conn.execute("DROP TABLE request_histogram")
        conn.execute("DROP TABLE stage_histogram")
    store = DuckDBStore(path)
    with store.reader() as conn:  # a reader does not create them
        assert (
            conn.execute(
                "SELECT count(*) FROM duckdb_tables() WHERE table_name = 'request_histogram'"
            ).fetchone()[0]
            == 0
        )
    with store.reading() as conn:
        assert histogram.run_histogram(conn, Filter(run="a")) is None
    assert overview(store, Filter(run="a")).runs[0].requests > 0
    assert main(["ingest", str(files["a2"]), "--db", str(path), "--run", "a"]) == 0  # a refresh
    with connect_writer(path) as conn:
        _same(_stored(conn, "a"), _rebuilt(conn, "a"))
    with store.reading() as conn:
        assert histogram.run_histogram(conn, Filter(run="a")) is not None


def test_a_histogram_out_of_step_with_the_requests_is_not_read(
    store: DuckDBStore, tmp_path: Path, from_histogram: None
) -> None:
    path = tmp_path / "copy.duckdb"
    path.write_bytes(store.path.read_bytes())
    with connect_writer(path) as conn:
        conn.execute(
            "DELETE FROM request_histogram WHERE RunLabel = 'a' "
            "AND Bucket = (SELECT max(Bucket) FROM request_histogram WHERE RunLabel = 'a')"
        )
    with DuckDBStore(path).reading() as conn:
        assert histogram.run_histogram(conn, Filter(run="a")) is None
        assert histogram.run_histogram(conn, Filter(run="b")) is not None


def test_weighted_quantiles_are_the_smallest_bucket_reaching_q() -> None:
    buckets = histogram.Buckets(
        np.array([100, 200, 300]), np.array([1.0, 1.0, 1.0]), np.array([1.0, 8.0, 1.0])
    )
    assert buckets.weighted
    values = histogram.bucket_values(np.array([100, 200, 300]))
    assert buckets.quantiles([0.05, 0.5, 0.9, 0.95]) == pytest.approx(
        [values[0], values[1], values[1], values[2]]
    )
    plain = histogram.Buckets(np.array([100, 200]), np.array([1.0, 3.0]), np.array([1.0, 3.0]))
    assert not plain.weighted
    assert plain.quantiles([0.0, 0.5]) == pytest.approx([values[0], values[1]])
    assert (histogram.bucket_of(0), histogram.bucket_of(1), histogram.bucket_of(math.e * 1.000001)) == (
        -1,
        0,
        100,
    )


def test_a_weighted_run_from_the_histogram_is_within_the_bound(
    store: DuckDBStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = weighted_copy(store.path, tmp_path / "weighted.duckdb", "b")  # the faster half weighs 4
    weighted = DuckDBStore(path)
    _exact(monkeypatch)
    exact, exact_tail = overview(weighted, Filter(run="b")).runs[0], tail_vs_body(weighted, Filter(run="b"))
    monkeypatch.setattr(histogram, "MIN_REQUESTS", 0)
    with weighted.reading() as conn:
        found = histogram.run_histogram(conn, Filter(run="b"))
        assert found is not None and found.e2e.weighted
    got, got_tail = overview(weighted, Filter(run="b")).runs[0], tail_vs_body(weighted, Filter(run="b"))
    assert (got.requests, got.errors) == (exact.requests, exact.errors)
    for name in ("p50_ms", "p95_ms", "p99_ms", "p999_ms"):
        _close(getattr(got, name), getattr(exact, name))
    assert (got_tail.selected_requests, got_tail.rest_requests) == (
        exact_tail.selected_requests,
        exact_tail.rest_requests,
    )
    for column in exact_tail.stages.columns[1:]:
        assert got_tail.stages[column].tolist() == pytest.approx(
            exact_tail.stages[column].tolist(), rel=1e-9, abs=1e-9
        )


def test_tailscope_migrate_builds_the_pre_aggregates_of_an_older_store(
    files: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "store.duckdb"
    assert main(["ingest", str(files["b"]), "--db", str(path), "--run", "b"]) == 0
    with connect_writer(path) as conn:  # as an older tailscope left it
        expected = _stored(conn, "b")
        conn.execute("DROP TABLE request_histogram")
        conn.execute("DROP TABLE stage_histogram")
    capsys.readouterr()
    assert main(["migrate", "--db", str(path)]) == 0
    assert "pre-aggregates built for 1 runs" in capsys.readouterr().out
    with connect_writer(path) as conn:
        _same(_stored(conn, "b"), expected)
    assert main(["migrate", "--db", str(path)]) == 0
    assert "nothing to do" in capsys.readouterr().out
