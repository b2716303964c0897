"""The latency heatmap of a whole large run from its pre-aggregate (issue 29, heatmap_histogram):
every derive keeps it equal to a rebuild from the run's requests (a whole-run derive, a refresh of
touched traces, a rule edit); on a run whose requests start on whole seconds (where heatmap.sql's
time grid is the pre-aggregate's) the picture read from it has the raw read's cells exactly and its
p50 / p99 lines within histogram.RELATIVE_ERROR, e2e and per stage, weighted runs too; other filters
read the requests; a store without the table (an older tailscope's) is read from the requests and
gets it from `tailscope migrate` or its next derive.

histogram.MIN_REQUESTS is set to 0 so the small test runs take the pre-aggregate's path."""

from __future__ import annotations

from pathlib import Path

import duckdb
import numpy as np
import pandas as pd
import pytest

from tailscope.analysis import heatmap, histogram
from tailscope.analysis.heatmap_histogram import heatmap_rows
from tailscope.analysis.types import Filter, Heatmap
from tailscope.cli.main import main
from tailscope.store.duckdb import histogram as store_histogram
from tailscope.store.duckdb.connection import connect_writer
from tailscope.store.duckdb.rule_remap import replace_rules
from tailscope.store.duckdb.rules import rules_in_force
from tailscope.store.duckdb.store import DuckDBStore
from tests.app_data import split_in_two_parts, weighted_copy
from tests.run_cache import ingested_copy, simulated_copy

BOUND = histogram.RELATIVE_ERROR * (1 + 1e-9)
SECONDS = 120  # the run stretched over two minutes from a whole second
START_S = 1_767_225_600


def _stored(conn: duckdb.DuckDBPyConnection, run: str) -> list[tuple]:
    return conn.execute(
        "SELECT * EXCLUDE (RunLabel) FROM heatmap_histogram WHERE RunLabel = ? "
        "ORDER BY Stage, Second, Bucket, Cell",
        [run],
    ).fetchall()


def _rebuilt(conn: duckdb.DuckDBPyConnection, run: str) -> list[tuple]:
    conn.execute("BEGIN TRANSACTION")
    try:
        store_histogram.rebuild(conn, run)
        return _stored(conn, run)
    finally:
        conn.execute("ROLLBACK")


def _same(got: list[tuple], expected: list[tuple]) -> None:
    assert len(got) == len(expected) > 0
    for g, e in zip(got, expected, strict=True):
        assert g[:5] == e[:5]
        assert g[5] == pytest.approx(e[5], rel=1e-12, abs=1e-9)


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("heatmap_histogram")
    out = {"a": folder / "a.json"}
    simulated_copy(tmp_path_factory, out["a"], "lock-contention", 1500, 3)
    out["a1"], out["a2"] = split_in_two_parts(out["a"])  # written in two parts, the last 10 %
    return out


def _stretch(conn: duckdb.DuckDBPyConnection, run: str) -> None:
    """The run's requests moved to start over SECONDS seconds from START_S exactly, the last one
    1 ns before its end (heatmap.sql's bins are then whole seconds too), and its pre-aggregates rebuilt."""
    conn.execute(
        "UPDATE requests SET Timestamp = make_timestamp_ns($start + CAST(floor("
        "(epoch_ns(Timestamp) - (SELECT min(epoch_ns(Timestamp)) FROM requests WHERE RunLabel = $run)) "
        "* ($seconds * 1e9 - 1) / (SELECT max(epoch_ns(Timestamp)) - min(epoch_ns(Timestamp)) "
        "FROM requests WHERE RunLabel = $run)) AS BIGINT)) WHERE RunLabel = $run",
        {"start": START_S * 1_000_000_000, "seconds": SECONDS, "run": run},
    )
    store_histogram.rebuild(conn, run)


@pytest.fixture(scope="module")
def store(files: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> DuckDBStore:
    path = ingested_copy(tmp_path_factory, tmp_path_factory.mktemp("duck") / "store.duckdb", files["a"], "a")
    with connect_writer(path) as conn:
        _stretch(conn, "a")
    return DuckDBStore(path)


@pytest.fixture
def from_histogram(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(histogram, "MIN_REQUESTS", 0)


def _both(store: DuckDBStore, monkeypatch: pytest.MonkeyPatch, **kwargs: object) -> tuple[Heatmap, Heatmap]:
    monkeypatch.setattr(histogram, "MIN_REQUESTS", 10**12)
    raw = heatmap(store, Filter(run="a"), **kwargs)  # type: ignore[arg-type]
    monkeypatch.setattr(histogram, "MIN_REQUESTS", 0)
    with store.reading() as conn:
        stage = kwargs.get("stage") or ""
        assert (
            heatmap_rows(conn, Filter(run="a"), str(stage), int(kwargs.get("time_bins", 60)), 10) is not None
        )
    return raw, heatmap(store, Filter(run="a"), **kwargs)  # type: ignore[arg-type]


def _same_picture(raw: Heatmap, got: Heatmap) -> None:
    assert got.time_bin_seconds == raw.time_bin_seconds
    assert len(raw.cells) >= 20
    pd.testing.assert_frame_equal(got.cells, raw.cells)
    pd.testing.assert_frame_equal(got.lines[["time", "requests"]], raw.lines[["time", "requests"]])
    for column in ("p50_ms", "p99_ms"):
        assert got.lines[column].tolist() == pytest.approx(raw.lines[column].tolist(), rel=BOUND, abs=1e-9)


def test_every_derive_keeps_the_heatmap_histogram_equal_to_a_rebuild(
    files: dict[str, Path], tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    path = ingested_copy(tmp_path_factory, tmp_path / "store.duckdb", files["a1"], "a")
    with connect_writer(path) as conn:
        before = _stored(conn, "a")
        _same(before, _rebuilt(conn, "a"))
        assert {row[0] for row in before} == {"", *histogram.ALL_STAGES}
    # the rest of the run: a refresh of the traces the write touched (some had spans already)
    assert main(["ingest", str(files["a2"]), "--db", str(path), "--run", "a"]) == 0
    with connect_writer(path) as conn:
        after = _stored(conn, "a")
        assert sum(row[4] for row in after) > sum(row[4] for row in before)
        _same(after, _rebuilt(conn, "a"))
        edited = [r for r in rules_in_force(conn) if r.stage != "model_forward"]  # moves spans
        replace_rules(conn, edited)
        _same(_stored(conn, "a"), _rebuilt(conn, "a"))


@pytest.mark.parametrize(
    ("stage", "time_bins", "bins_per_decade"),
    [(None, 60, 10), (None, 40, 5), ("queue", 120, 10), ("model_forward", 20, 2), ("unattributed", 60, 1)],
)
def test_the_picture_is_the_raw_reads(
    store: DuckDBStore,
    monkeypatch: pytest.MonkeyPatch,
    stage: str | None,
    time_bins: int,
    bins_per_decade: int,
) -> None:
    raw, got = _both(store, monkeypatch, stage=stage, time_bins=time_bins, bins_per_decade=bins_per_decade)
    assert raw.time_bin_seconds == SECONDS / time_bins
    _same_picture(raw, got)


def test_a_weighted_run_is_the_raw_reads(
    store: DuckDBStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = weighted_copy(store.path, tmp_path / "weighted.duckdb", "a")  # the faster half weighs 4
    raw, got = _both(DuckDBStore(path), monkeypatch, stage=None, time_bins=60)
    assert got.lines["requests"].sum() > 1500 * 2  # counted by weight
    _same_picture(raw, got)


def test_other_filters_and_grids_read_the_requests(store: DuckDBStore, from_histogram: None) -> None:
    with store.reading() as conn:
        assert heatmap_rows(conn, Filter(run="a"), "", 60, 10) is not None
        assert heatmap_rows(conn, Filter(run="a", route="/predict"), "", 60, 10) is None
        assert heatmap_rows(conn, Filter(), "", 60, 10) is None
        assert heatmap_rows(conn, Filter(run="a"), "", 60, 3) is None  # 3 cells a decade: not a union
        assert heatmap_rows(conn, Filter(run="a"), "", SECONDS + 1, 10) is None  # bins under a second
    # a whole-second grid from the pre-aggregate, on any run: cells counted as the requests say
    got = heatmap(store, Filter(run="a"), time_bins=7)
    with store.reader() as conn:
        frame = conn.execute("SELECT epoch_ns(Timestamp) AS t, Duration FROM requests").df()
    assert got.time_bin_seconds == np.ceil(SECONDS / 7)
    second = frame["t"] // 1_000_000_000
    expected = ((second - second.min()) // int(got.time_bin_seconds)).value_counts().sort_index()
    assert got.lines["requests"].tolist() == expected.tolist()
    assert int(got.cells["count"].sum()) == len(frame)


def test_a_pre_aggregate_out_of_step_with_the_requests_is_not_read(
    store: DuckDBStore, tmp_path: Path, from_histogram: None
) -> None:
    path = tmp_path / "copy.duckdb"
    path.write_bytes(store.path.read_bytes())
    with connect_writer(path) as conn:
        conn.execute(
            "DELETE FROM heatmap_histogram WHERE Second = (SELECT max(Second) FROM heatmap_histogram)"
        )
    with DuckDBStore(path).reading() as conn:
        assert heatmap_rows(conn, Filter(run="a"), "", 60, 10) is None


def test_an_older_store_is_read_from_the_requests_and_gets_the_table(
    files: dict[str, Path],
    tmp_path: Path,
    tmp_path_factory: pytest.TempPathFactory,
    from_histogram: None,
    capsys: pytest.CaptureFixture[str],
) -> None:
    path = ingested_copy(tmp_path_factory, tmp_path / "store.duckdb", files["a1"], "a")
    with connect_writer(path) as conn:  # as the tailscope before heatmap_histogram left it
        expected = _stored(conn, "a")
        conn.execute("DROP TABLE heatmap_histogram")
    store = DuckDBStore(path)
    with store.reading() as conn:  # a reader neither creates nor needs it
        assert conn.heatmap_histogram("a", "", 1) is None
    assert heatmap(store, Filter(run="a"), time_bins=2).cells["count"].sum() > 0
    capsys.readouterr()
    assert main(["migrate", "--db", str(path)]) == 0
    assert "pre-aggregates built for 1 runs" in capsys.readouterr().out
    with connect_writer(path) as conn:
        _same(_stored(conn, "a"), expected)
        conn.execute("DELETE FROM heatmap_histogram")  # opened by a writer: the table, empty
    # a refresh of a run without the table's rows builds them whole, not a delta on nothing
    assert main(["ingest", str(files["a2"]), "--db", str(path), "--run", "a"]) == 0
    with connect_writer(path) as conn:
        _same(_stored(conn, "a"), _rebuilt(conn, "a"))
