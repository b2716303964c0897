"""The Gantt's duration ranks on ClickHouse read each run's span durations (tailscope_span_durations,
store.clickhouse.span_durations) instead of every span of the run. They must stay the ranks against the
run's spans in otel_traces: one row per span however the run was written (a new run, a file loaded
again or added, a window derived again), a store made before the table existed migrated on open, a
run without durations ranked from otel_traces."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_clickhouse_ingest import _steady_file

from ingest.loader import load_paths
from tailscope.store.clickhouse import span_durations as ch_durations
from tailscope.store.clickhouse import trace as trace_ch
from tailscope.store.clickhouse import write as ch_write
from tailscope.store.clickhouse.engine import ClickHouseStore
from tailscope.store.clickhouse.span_durations import rank_statement
from tailscope.store.clickhouse.statements import scoped
from tailscope.store.engine import open_store

pytest.importorskip("chdb", reason="chdb not installed ([clickhouse] extra)")

DURATIONS = (
    "SELECT SpanName, Duration, StartNs FROM tailscope_span_durations WHERE RunLabel = {run:String} "
    "ORDER BY ALL"
)
SPANS = (
    "SELECT toString(SpanName), toInt64(Duration), toUnixTimestamp64Nano(Timestamp) FROM otel_traces "
    "WHERE ResourceAttributes['tailscope.run'] = {run:String} ORDER BY ALL"
)


def _same_as_spans(store: ClickHouseStore, run: str) -> int:
    kept = store.query(DURATIONS, {"run": run}).rows
    assert kept == store.query(SPANS, {"run": run}).rows
    return len(kept)


def _scan_ranks(store: ClickHouseStore, run: str, names: list[str], durations: list[int]) -> dict[int, float]:
    """The ranks against the run's spans in otel_traces (clickhouse/gantt_rank.sql)."""
    selection = ch_write.run_selection(store, run)
    assert selection is not None
    text, params = scoped("gantt_rank", selection, names=names, durations=durations)
    return {int(i): float(rank) for i, rank in store.query(text, params).rows}


def _asked(store: ClickHouseStore, run: str) -> tuple[list[str], list[int]]:
    """Durations to rank: some spans' own (ties), values between and beyond, a name the run lacks."""
    rows = store.query(SPANS, {"run": run}).rows[::7]
    names = [r[0] for r in rows] + [rows[0][0], rows[0][0], "no such span"]
    durations = [int(r[1]) for r in rows] + [-1, 10**15, 5]
    return names, durations


def test_kept_durations_follow_the_runs_spans(chdb_store: ClickHouseStore, tmp_path: Path) -> None:
    path = _steady_file(tmp_path, 60)
    load_paths([path], chdb_store, "r")  # a new run: written while derived
    spans = _same_as_spans(chdb_store, "r")
    assert spans > 60
    load_paths([path], chdb_store, "r")  # loaded again: nothing new, derived again
    assert _same_as_spans(chdb_store, "r") == spans
    (tmp_path / "b").mkdir()
    load_paths([_steady_file(tmp_path / "b", 30)], chdb_store, "r")  # another file
    assert _same_as_spans(chdb_store, "r") > spans
    ch_write.refresh_run(chdb_store, "r", part_spans=200)  # derived again, window by window
    assert _same_as_spans(chdb_store, "r") > spans
    names, durations = _asked(chdb_store, "r")
    kept = ch_durations.ranks(chdb_store, "r", names, durations)
    assert kept == _scan_ranks(chdb_store, "r", names, durations)
    assert kept is not None and len(kept) == len(names) - 1  # the missing name has no rank


def test_a_store_made_before_the_table_is_migrated_on_open(tmp_path: Path) -> None:
    url = f"chdb://{tmp_path / 'ch'}"
    store = open_store(url)
    assert isinstance(store, ClickHouseStore)
    store.prepare(writing=True)
    load_paths([_steady_file(tmp_path, 40)], store, "old")
    names, durations = _asked(store, "old")
    expected = _scan_ranks(store, "old", names, durations)
    store.query("DROP TABLE tailscope_span_durations")  # as a store made before it existed
    assert trace_ch.ranks(store, "old", names, durations) == expected  # a reader: from otel_traces
    store.query("CREATE TABLE _tailscope_span_durations_new (x Int8) ENGINE = Memory")  # interrupted
    store.prepare()
    assert _same_as_spans(store, "old") > 40
    assert ch_durations.ranks(store, "old", names, durations) == expected
    store.close()


def test_a_run_without_durations_is_ranked_from_its_spans(
    chdb_store: ClickHouseStore, tmp_path: Path
) -> None:
    load_paths([_steady_file(tmp_path, 30)], chdb_store, "r")
    names, durations = _asked(chdb_store, "r")
    expected = _scan_ranks(chdb_store, "r", names, durations)
    ch_durations.forget_run(chdb_store, "r")
    assert ch_durations.ranks(chdb_store, "r", names, durations) is None
    assert trace_ch.ranks(chdb_store, "r", names, durations) == expected


def test_rank_statement_splits_a_name_asked_about_often() -> None:
    many = list(range(70))
    (text, params), parts = rank_statement("r", ["a"] * 70 + ["b"], [*many, 3])
    assert text.count("UNION ALL") == 3  # a: 32 + 32 + 6 durations, b: one part
    assert parts[1] == ("a", many[:32]) and parts[3] == ("a", many[64:]) and parts[4] == ("b", [3])
    assert params["n4"] == "b" and params["d4_1"] == 3 and "'a'" not in text  # values bound
