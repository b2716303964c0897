"""derive_state.PhaseCandidates: each derive records whether the run holds a span the phase rules
could read (phase_candidates.sql), and the diagnosis' read skips the phase spans' statement where
the record says none and speaks for every span the run holds (store/duckdb/derive.py, reader.py)."""

from __future__ import annotations

import pyarrow as pa
import pytest
from analysis_spans import S, SpanColumns, add_trace, insert, load
from test_phases import vllm_request

from tailscope.analysis.phases import default_phase_rules
from tailscope.store.duckdb import derive
from tailscope.store.duckdb.connection import connect_writer
from tailscope.store.duckdb.derive import refresh_run, replace_phase_rules
from tailscope.store.duckdb.reader import DuckDBReader
from tailscope.store.duckdb.store import DuckDBStore as Store


def plain_request() -> S:
    return S("root", 0, 30, kind="Server", children=[S("parse", 0, 5), S("db.query", 5, 20, kind="Client")])


def candidates_of(path, run: str = "r"):
    with connect_writer(path) as conn:
        rows = conn.execute("SELECT PhaseCandidates FROM derive_state WHERE RunLabel = ?", [run]).fetchall()
    return rows[0][0] if rows else "no row"


def diagnosis_spans(path, run: str = "r", force_phases: bool = False) -> tuple[pa.Table, list[str]]:
    """The diagnosis' span read of the run, and which statements it ran (with `force_phases` the
    phase spans' statement runs whatever the record says: the read as it was before the record)."""
    ran: list[str] = []
    with Store(path).reading() as reader:
        original = DuckDBReader._phase_span_rows

        def phase_rows(self, *args):
            ran.append("phases")
            return original(self, *args)

        DuckDBReader._phase_span_rows = phase_rows
        try:
            if force_phases:
                reader._has_phase_candidates = lambda run: True  # type: ignore[method-assign]
            table = reader.span_table("diagnosis_spans", run)
        finally:
            DuckDBReader._phase_span_rows = original
    return table.sort_by([("OrderTraceId", "ascending"), ("OrderSpanId", "ascending")]), ran


def test_a_run_without_phase_candidates_is_read_without_the_phase_statement(db_path):
    cols = SpanColumns()
    for i in range(6):
        add_trace(cols, plain_request(), i + 1, offset_ms=i * 40)
    load(db_path, "r", cols)
    assert candidates_of(db_path) is False
    skipped, ran = diagnosis_spans(db_path)
    assert ran == []  # fails before: the statement ran on every read
    full, ran_forced = diagnosis_spans(db_path, force_phases=True)
    assert ran_forced == ["phases"]
    assert skipped.equals(full)  # the same rows: the statement found none


def test_a_run_with_phase_candidates_reads_its_phase_spans(db_path):
    cols = SpanColumns()
    add_trace(cols, plain_request(), 1)
    add_trace(cols, vllm_request(0.020, 0.025, 0.040), 2, offset_ms=50)
    load(db_path, "r", cols)
    assert candidates_of(db_path) is True
    table, ran = diagnosis_spans(db_path)
    assert ran == ["phases"]
    assert {"queue", "prefill", "decode"} <= set(table.column("SpanName").to_pylist())


def test_a_flush_with_a_candidate_sets_the_record_and_one_without_keeps_it(db_path):
    first = SpanColumns()
    for i in range(6):
        add_trace(first, plain_request(), i + 1, offset_ms=i * 40)
    load(db_path, "r", first)

    def flush(cols: SpanColumns, spans: int) -> None:
        with connect_writer(db_path) as conn:
            insert(conn, "r", cols)
            arrow = cols.to_arrow()
            starts = [int(t.value) for t in arrow.column("Timestamp")]
            touched = arrow.select(["TraceId"])
            refresh_run(conn, "r", touched, spans, (min(starts), max(starts), 100_000_000))

    plain = SpanColumns()
    add_trace(plain, plain_request(), 7, offset_ms=300)
    flush(plain, 3)
    assert candidates_of(db_path) is False
    llm = SpanColumns()
    add_trace(llm, vllm_request(0.020, 0.025, 0.040), 8, offset_ms=400)
    flush(llm, 1)
    assert candidates_of(db_path) is True
    with connect_writer(db_path) as conn:  # NULL (not known) stays unknown after a flush without one
        conn.execute("UPDATE derive_state SET PhaseCandidates = NULL")
    more = SpanColumns()
    add_trace(more, plain_request(), 9, offset_ms=500)
    flush(more, 3)
    assert candidates_of(db_path) is None
    _, ran = diagnosis_spans(db_path)
    assert ran == ["phases"]


def test_a_run_derived_in_parts_has_candidates_if_any_part_has(db_path, monkeypatch):
    monkeypatch.setattr(derive, "PART_SPANS", 6)
    cols = SpanColumns()
    for i in range(8):
        add_trace(cols, plain_request(), i + 1, offset_ms=i * 40)
    add_trace(cols, vllm_request(0.020, 0.025, 0.040), 9, offset_ms=1000)  # in the last part only
    load(db_path, "r", cols)
    assert candidates_of(db_path) is True
    with connect_writer(db_path) as conn:
        conn.execute("DELETE FROM otel_traces WHERE TraceId = ?", [f"{9:032x}"])
        refresh_run(conn, "r", whole=True)
    assert candidates_of(db_path) is False


def test_spans_written_since_the_derive_are_not_vouched_for(db_path):
    cols = SpanColumns()
    for i in range(4):
        add_trace(cols, plain_request(), i + 1, offset_ms=i * 40)
    load(db_path, "r", cols)
    late = SpanColumns()
    add_trace(late, vllm_request(0.020, 0.025, 0.040), 5, offset_ms=200)
    with connect_writer(db_path) as conn:
        insert(conn, "r", late)  # written without a derive: the record reflects 12 spans, the run has 13
    table, ran = diagnosis_spans(db_path)
    assert ran == ["phases"]
    assert "queue" in set(table.column("SpanName").to_pylist())


def test_a_phase_rule_edit_derives_the_record_again(db_path):
    cols = SpanColumns()
    root = S("root", 0, 30, kind="Server", attrs={"model.wait_ms": "12"}, children=[S("parse", 0, 5)])
    add_trace(cols, root, 1)
    load(db_path, "r", cols)
    assert candidates_of(db_path) is False
    from tailscope.analysis.types import PhaseRule

    rules = [*default_phase_rules()]
    rules.append(
        PhaseRule(len(rules) + 1, "custom", "wait", "queue", "attribute", "model.wait_ms", None, "ms", None)
    )
    with connect_writer(db_path) as conn:
        replace_phase_rules(conn, rules)
    assert candidates_of(db_path) is True
    table, ran = diagnosis_spans(db_path)
    assert ran == ["phases"] and "wait" in set(table.column("SpanName").to_pylist())


@pytest.mark.parametrize("rederive", [False, True])
def test_a_store_written_before_the_record_is_read_as_before(db_path, rederive):
    cols = SpanColumns()
    for i in range(4):
        add_trace(cols, plain_request(), i + 1, offset_ms=i * 40)
    load(db_path, "r", cols)
    expected, _ = diagnosis_spans(db_path, force_phases=True)
    with connect_writer(db_path) as conn:  # derive_state as main's schema (version 5) wrote it
        conn.execute("ALTER TABLE derive_state DROP COLUMN PhaseCandidates")
    table, ran = diagnosis_spans(db_path)  # a reader never adds the column: not known, as before
    assert ran == ["phases"] and table.equals(expected)
    with connect_writer(db_path) as conn:  # the writer's schema step adds it, NULL until a derive
        if rederive:
            refresh_run(conn, "r", whole=True)
    assert candidates_of(db_path) is (False if rederive else None)
    table, ran = diagnosis_spans(db_path)
    assert ran == ([] if rederive else ["phases"]) and table.equals(expected)
