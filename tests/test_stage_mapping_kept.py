"""stage_mapping_kept: each whole derive records the stage mapping a diagnosis of the run reads (the
traces of its first read window, or the run's), and the reader answers that scope from the record only
where it speaks for the run now: the same span count, traces, window and rules in force
(store/duckdb/kept_mapping.py). Anything else computes it live, as before."""

from __future__ import annotations

import numpy as np
import pytest
from analysis_spans import S, SpanColumns, add_trace, insert, load

from tailscope.analysis.diagnosis.load import load_frame
from tailscope.rules import StageRule
from tailscope.store.duckdb import kept_mapping
from tailscope.store.duckdb.connection import connect_writer
from tailscope.store.duckdb.derive import refresh_run
from tailscope.store.duckdb.rule_remap import replace_rules
from tailscope.store.duckdb.rules import rules_in_force, store_rules
from tailscope.store.duckdb.store import DuckDBStore as Store
from tailscope.store.sample_plan import mapping_scope

SMALL = 60  # a diagnosis' sample size that makes the test runs sampled (windows)


def request(i: int) -> S:
    slow = 9.0 if i % 7 == 0 else 0.0
    return S("POST /predict", 0, 40 + slow, kind="Server", children=[
        S("tokenize", 0, 4),
        S("model.forward", 4, 30 + slow, children=[S("cuda.sync", 10, 12)]),
        S("redis GET", 30 + slow, 35 + slow, kind="Client"),
        S("serialize", 35 + slow, 39 + slow, stage="serialization" if i % 3 == 0 else None),
    ])


def run_of(traces: int, first: int = 1, offset_ms: float = 0.0) -> SpanColumns:
    cols = SpanColumns()
    for i in range(traces):
        add_trace(cols, request(i), first + i, offset_ms=offset_ms + i * 100)
    return cols


@pytest.fixture(autouse=True)
def sampled_at_small(monkeypatch) -> None:
    """Derives record the mapping a diagnosis with max_spans=SMALL reads (the default's: 150,000)."""
    monkeypatch.setattr(kept_mapping, "DEFAULT_MAX_SPANS", SMALL)


@pytest.fixture
def live_calls(monkeypatch) -> list[tuple]:
    """Every live computation of a mapping (kept_mapping.live), which still answers."""
    calls: list[tuple] = []
    original = kept_mapping.live

    def counted(conn, run, traces, window):
        calls.append((run, traces, window))
        return original(conn, run, traces, window)

    monkeypatch.setattr(kept_mapping, "live", counted)
    return calls


def scope_of(path, run: str = "r", max_spans: int | None = SMALL):
    """(traces, window) of the mapping a diagnosis of the run with `max_spans` reads."""
    with connect_writer(path) as conn:
        spans, first, last = conn.execute(
            "SELECT count(*), min(epoch_ns(Timestamp)), max(epoch_ns(Timestamp)) FROM otel_traces "
            "WHERE RunLabel = ?", [run]).fetchone()
    return mapping_scope(spans, first, last, max_spans)


def mapping(path, run: str = "r", scope=None) -> list[tuple]:
    traces, window = scope or scope_of(path, run)
    with Store(path).reading() as reader:
        return sorted(reader.stage_mapping(run, traces, window))


def live_mapping(path, run: str = "r", scope=None) -> list[tuple]:
    traces, window = scope or scope_of(path, run)
    with Store(path).reading() as reader:
        return sorted(kept_mapping.live(reader.conn, run, traces, window))


def kept_rows(path) -> int:
    with connect_writer(path) as conn:
        return conn.execute("SELECT count(*) FROM stage_mapping_kept").fetchone()[0]


def test_a_sampled_diagnosis_maps_its_spans_from_the_derive_s_record(db_path, live_calls):
    load(db_path, "r", run_of(60))  # 360 spans over 6 s: sampled at SMALL spans
    traces, window = scope_of(db_path)
    assert window is not None and kept_rows(db_path) > 0
    live_calls.clear()
    with Store(db_path).reading() as reader:
        from_record = load_frame(reader, "r", max_spans=SMALL)
    assert live_calls == []  # fails before: every diagnosis computed its mapping
    with connect_writer(db_path) as conn:
        kept_mapping.forget(conn, "r")
    with Store(db_path).reading() as reader:
        computed = load_frame(reader, "r", max_spans=SMALL)
    assert live_calls == [("r", traces, window)]  # the very scope the derive recorded
    assert np.array_equal(from_record.stage, computed.stage)
    assert np.array_equal(from_record.name, computed.name) and from_record.names == computed.names


def test_the_record_holds_the_live_rows_count_for_count(db_path, live_calls):
    load(db_path, "r", run_of(60))
    live_calls.clear()
    kept = mapping(db_path)
    assert live_calls == [] and kept and kept == live_mapping(db_path)


def test_a_run_read_whole_keeps_none(db_path, live_calls):
    load(db_path, "r", run_of(8))  # 48 spans: a diagnosis reads it whole, and so maps it live
    assert kept_rows(db_path) == 0
    live_calls.clear()
    assert mapping(db_path) == live_mapping(db_path) and len(live_calls) == 2


def test_another_scope_is_computed_live(db_path, live_calls):
    load(db_path, "r", run_of(60))
    traces, window = scope_of(db_path)
    live_calls.clear()
    others = [(traces, None), (5, window), (traces, (window[0], window[1] + 1))]
    for other in others:
        assert mapping(db_path, scope=other) == live_mapping(db_path, scope=other)
    assert [call[1:] for call in live_calls][::2] == others


def test_spans_written_since_the_derive_are_mapped_live(db_path, live_calls):
    load(db_path, "r", run_of(60))
    recorded = scope_of(db_path)
    with connect_writer(db_path) as conn:  # written, not derived yet: inside the recorded window
        insert(conn, "r", run_of(3, first=100, offset_ms=50))
    live_calls.clear()  # the recorded scope asked again (a diagnosis' would move with the count too)
    assert mapping(db_path, scope=recorded) == live_mapping(db_path, scope=recorded)
    assert len(live_calls) == 2  # the record no longer speaks for the run
    with connect_writer(db_path) as conn:  # the next whole derive records it again
        refresh_run(conn, "r", whole=True)
    live_calls.clear()
    assert mapping(db_path) == live_mapping(db_path) and len(live_calls) == 1


def test_a_flush_forgets_the_record(db_path, live_calls):
    load(db_path, "r", run_of(60))
    with connect_writer(db_path) as conn:  # a flush: the touched traces derived, not the run
        insert(conn, "r", run_of(1, first=200, offset_ms=9_000))
        touched = conn.sql("SELECT $id AS TraceId", params={"id": f"{200:032x}"}).to_arrow_table()
        refresh_run(conn, "r", touched=touched, added=6)
        assert conn.execute("SELECT count(*) FROM stage_mapping_kept").fetchone()[0] == 0
    live_calls.clear()
    assert mapping(db_path) == live_mapping(db_path) and len(live_calls) == 2


def test_a_stage_rule_edit_maps_under_the_new_rules(db_path, live_calls):
    load(db_path, "r", run_of(60))
    before = mapping(db_path)
    for edit in (1, 2):  # the first derives the run from its spans (a record under the new rules), the
        # second re-maps it from the paths the first kept (rule_remap.py: the record is the first's)
        with connect_writer(db_path) as conn:
            stage = "postprocessing" if edit == 1 else "downstream"
            edited = [StageRule(1, stage, name_regex="^redis"), *rules_in_force(conn)[edit - 1:]]
            replace_rules(conn, edited)
        live_calls.clear()
        after = mapping(db_path)
        assert len(live_calls) == (0 if edit == 1 else 1)
        assert after == live_mapping(db_path) and after != before
        assert ("redis GET", "Client", stage) in {row[:3] for row in after}


def test_rules_stored_without_a_derive_are_mapped_live(db_path, live_calls):
    load(db_path, "r", run_of(60))
    with connect_writer(db_path) as conn:
        store_rules(conn, [StageRule(1, "downstream", name_regex="tokenize"), *rules_in_force(conn)])
    live_calls.clear()
    rows = mapping(db_path)
    assert len(live_calls) == 1 and rows == live_mapping(db_path)
    assert ("tokenize", "Internal", "downstream") in {row[:3] for row in rows}


def test_a_store_without_the_table_maps_live(db_path, live_calls):
    load(db_path, "r", run_of(60))
    with connect_writer(db_path) as conn:
        conn.execute("DROP TABLE stage_mapping_kept")
    live_calls.clear()
    scope = scope_of(db_path)
    with Store(db_path).reading() as reader:  # a reader never adds it
        rows = sorted(reader.stage_mapping("r", *scope))
    assert rows == live_mapping(db_path) and len(live_calls) == 2


def test_a_run_without_spans_forgets_its_record(db_path):
    load(db_path, "r", run_of(60))
    with connect_writer(db_path) as conn:
        assert conn.execute("SELECT count(*) FROM stage_mapping_kept").fetchone()[0] > 0
        conn.execute("DELETE FROM otel_traces WHERE RunLabel = 'r'")
        refresh_run(conn, "r")
        assert conn.execute("SELECT count(*) FROM stage_mapping_kept").fetchone()[0] == 0
