"""The Gantt's ranks in a large run from per-run span counts by duration bucket (issue 29): every
write keeps span_histogram equal to a rebuild from the run's spans (appends, a refresh's traces split
over writes, dedupe's copies); a bucketed rank lies within span_ranks.error_bound of the exact one;
a run the rows do not count (an older store, a writer that did not keep them) is ranked exactly
until a write or `tailscope migrate` builds them; runs under span_ranks.MIN_SPANS stay exact."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest

from tailscope import sql
from tailscope.analysis import slowest_traces, trace_gantt
from tailscope.analysis.types import Filter
from tailscope.cli.main import main
from tailscope.store import span_ranks
from tailscope.store.duckdb import span_histogram
from tailscope.store.duckdb.connection import connect_writer
from tailscope.store.duckdb.store import DuckDBStore
from tests.app_data import split_in_two_parts
from tests.run_cache import ingested_copy, simulated_copy


def _stored(conn: duckdb.DuckDBPyConnection, run: str) -> list[tuple]:
    return conn.execute(
        "SELECT SpanName, Bucket, Spans FROM span_histogram WHERE RunLabel = ? ORDER BY ALL", [run]
    ).fetchall()


def _from_spans(conn: duckdb.DuckDBPyConnection, run: str) -> list[tuple]:
    return conn.execute(
        "SELECT SpanName, CASE WHEN Duration > 0 THEN floor(ln(Duration) * 1000) ELSE -1 END, count(*) "
        "FROM otel_traces WHERE RunLabel = ? GROUP BY ALL ORDER BY ALL",
        [run],
    ).fetchall()


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("span_ranks")
    out = {"a": folder / "a.json", "b": folder / "b.json"}
    simulated_copy(tmp_path_factory, out["a"], "lock-contention", 1500, 3)
    simulated_copy(tmp_path_factory, out["b"], "slow-downstream", 800, 5)
    out["a1"], out["a2"] = split_in_two_parts(out["a"])  # a: written in two parts, the last 10 %
    return out


@pytest.fixture(scope="module")
def store(files: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> DuckDBStore:
    path = ingested_copy(tmp_path_factory, tmp_path_factory.mktemp("duck") / "store.duckdb", files["a"], "a")
    assert main(["ingest", str(files["b"]), "--db", str(path), "--run", "b"]) == 0
    return DuckDBStore(path)


def test_every_write_keeps_the_span_counts_equal_to_a_rebuild(
    files: dict[str, Path], tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    path = ingested_copy(tmp_path_factory, tmp_path / "store.duckdb", files["a1"], "a")
    with connect_writer(path) as conn:
        first = _stored(conn, "a")
        assert first == _from_spans(conn, "a") and first
    assert main(["ingest", str(files["a2"]), "--db", str(path), "--run", "a"]) == 0  # the rest
    assert main(["ingest", str(files["b"]), "--db", str(path), "--run", "b"]) == 0
    with connect_writer(path) as conn:
        whole = _stored(conn, "a")
        assert sum(r[2] for r in whole) > sum(r[2] for r in first)
        assert whole == _from_spans(conn, "a") and _stored(conn, "b") == _from_spans(conn, "b")
    # every span again: dedupe deletes each copy, and takes it away from the counts
    assert main(["ingest", str(files["a"]), "--db", str(path), "--run", "a"]) == 0
    with connect_writer(path) as conn:
        assert _stored(conn, "a") == whole == _from_spans(conn, "a")
        spans = conn.execute("SELECT SpanCount FROM runs WHERE RunLabel = 'a'").fetchall()[0][0]
        assert span_histogram.total(conn, "a") == spans


def _exact(conn: duckdb.DuckDBPyConnection, run: str, names: list[str], durations: list[int]) -> dict:
    rows = conn.execute(sql.load("gantt_rank"), [names, durations, durations, run]).fetchall()
    return {int(i): float(r) for i, r in rows}


def test_a_bucketed_rank_is_within_its_stated_bound(store: DuckDBStore) -> None:
    with store.reader() as conn:
        spans = conn.execute(
            "SELECT SpanName, Duration FROM otel_traces WHERE RunLabel = 'a' "
            "USING SAMPLE 400 ROWS (reservoir, 7)"
        ).fetchall()
        names, durations = [s[0] for s in spans], [int(s[1]) for s in spans]
        got = span_histogram.ranks(conn, "a", names, durations, min_spans=0)
        exact = _exact(conn, "a", names, durations)
        assert got is not None and got.keys() == exact.keys() and len(got) == len(spans)
        worst = 0.0
        for i, (name, duration) in enumerate(spans, start=1):
            in_bucket, of_name = conn.execute(
                "SELECT sum(Spans) FILTER (WHERE Bucket = ?), sum(Spans) FROM span_histogram "
                "WHERE RunLabel = 'a' AND SpanName = ?",
                [span_ranks.bucket(int(duration)), name],
            ).fetchall()[0]
            bound = span_ranks.error_bound(in_bucket, of_name)
            assert abs(got[i] - exact[i]) <= bound + 1e-9, (name, duration, got[i], exact[i], bound)
            worst = max(worst, abs(got[i] - exact[i]))
        assert 0 < worst < 1.0  # a few spans per 0.1 % bucket here: well under a point


def test_the_python_bucket_is_the_sql_one() -> None:
    conn = duckdb.connect()
    for d in (0, 1, 2, 999, 1000, 12_345_678, 10**11 + 7, -5):
        expr = sql.load_expanded("span_bucket").strip().splitlines()[-1]
        assert conn.execute(f"SELECT {expr} FROM (SELECT ?::BIGINT AS Duration)", [d]).fetchall()[0][0] == (
            span_ranks.bucket(d)
        )


def test_the_gantt_of_a_large_run_ranks_by_buckets_and_a_small_one_exactly(
    store: DuckDBStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    trace = slowest_traces(store, Filter(run="a"), 1)["trace_id"][0]
    exact = trace_gantt(store, trace, "a").spans["duration_pct_rank"].to_numpy()
    calls: list[str] = []
    original = span_histogram.ranks
    monkeypatch.setattr(span_histogram, "ranks", lambda *a, **k: calls.append("ranks") or original(*a, **k))
    assert trace_gantt(store, trace, "a").spans["duration_pct_rank"].to_numpy().tolist() == exact.tolist()
    assert calls == ["ranks"]  # asked, and said None: the run is under MIN_SPANS
    monkeypatch.setattr(span_ranks, "MIN_SPANS", 0)
    bucketed = trace_gantt(store, trace, "a").spans["duration_pct_rank"].to_numpy()
    assert bucketed.tolist() != exact.tolist()
    assert abs(bucketed - exact).max() < 1.0


def test_a_run_the_counts_do_not_count_is_ranked_exactly_until_a_write_or_migrate_builds_them(
    files: dict[str, Path],
    tmp_path: Path,
    tmp_path_factory: pytest.TempPathFactory,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setattr(span_ranks, "MIN_SPANS", 0)
    path = ingested_copy(tmp_path_factory, tmp_path / "store.duckdb", files["a1"], "a")
    assert main(["ingest", str(files["b"]), "--db", str(path), "--run", "b"]) == 0
    with connect_writer(path) as conn:  # as an older tailscope left it
        conn.execute("DELETE FROM span_histogram")
    store = DuckDBStore(path)
    with store.reader() as conn:
        assert span_histogram.ranks(conn, "a", ["x"], [1]) is None
    assert main(["ingest", str(files["a2"]), "--db", str(path), "--run", "a"]) == 0  # built whole
    with connect_writer(path) as conn:
        assert _stored(conn, "a") == _from_spans(conn, "a") and not _stored(conn, "b")
    with store.reader() as conn:
        assert span_histogram.ranks(conn, "a", ["x"], [1]) == {}
        assert span_histogram.ranks(conn, "b", ["x"], [1]) is None
    capsys.readouterr()
    assert main(["migrate", "--db", str(path)]) == 0
    assert "pre-aggregates built for 1 runs" in capsys.readouterr().out
    with connect_writer(path) as conn:
        assert _stored(conn, "b") == _from_spans(conn, "b")


def test_a_store_without_the_table_is_ranked_exactly_by_a_reader(
    store: DuckDBStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "old.duckdb"
    path.write_bytes(store.path.read_bytes())
    with duckdb.connect(str(path)) as conn:  # as an older tailscope's writer left it
        conn.execute("DROP TABLE span_histogram")
    old = DuckDBStore(path)
    trace = slowest_traces(old, Filter(run="a"), 1)["trace_id"][0]
    exact = trace_gantt(store, trace, "a").spans["duration_pct_rank"].tolist()
    monkeypatch.setattr(span_ranks, "MIN_SPANS", 0)
    with old.reading() as reader:  # the failed read of the missing table leaves the reader usable
        assert trace_gantt(reader, trace, "a").spans["duration_pct_rank"].tolist() == exact
        assert slowest_traces(reader, Filter(run="a"), 1)["trace_id"][0] == trace
