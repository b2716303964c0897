"""A writer's transaction re-derives and dedupes only the traces its batches touched.

Each store_batches call below runs in its own explicit transaction, as `ingest` (one file) and
`collect` (one flush) do: the cost of a flush must follow its batch, not the run it lands in.
"""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest
from analysis_spans import BASE_NS, S, SpanColumns, add_trace

from tailscope.store.duckdb.connection import connect_writer
from tailscope.store.duckdb.derive import refresh_run
from tailscope.store.duckdb.writer import store_batches

RUN = "r"


def transaction(db_path: Path, cols: SpanColumns) -> None:
    with connect_writer(db_path) as conn:
        conn.begin()
        store_batches(conn, RUN, [cols], ["test"])
        conn.commit()


def request_rows(db_path: Path) -> list[tuple]:
    with duckdb.connect(str(db_path), read_only=True) as conn:
        return conn.execute(
            "SELECT * EXCLUDE (DominantStage) FROM requests WHERE RunLabel = ? ORDER BY TraceId", [RUN]
        ).fetchall()


def root_span_id(db_path: Path, trace_id: str) -> str:
    with duckdb.connect(str(db_path), read_only=True) as conn:
        return conn.execute(
            "SELECT SpanId FROM otel_traces WHERE TraceId = ? AND ParentSpanId = ''", [trace_id]
        ).fetchone()[0]


def first_batch() -> SpanColumns:
    cols = SpanColumns()
    for trace_no in range(1, 11):
        add_trace(cols, S("root", 0, 50, kind="Server", children=[S("parse", 0, 5)]), trace_no)
    return cols


def late_child(trace_id: str, parent_id: str) -> SpanColumns:
    """A span of an already stored trace, arriving in a later transaction: 30 ms of model_forward."""
    cols = SpanColumns()
    cols.append(
        timestamp_ns=BASE_NS + 10_000_000,
        trace_id=trace_id,
        span_id="f" * 16,
        parent_span_id=parent_id,
        span_name="late",
        duration_ns=30_000_000,
        service_name="svc",
        span_attributes={"tailscope.stage": "model_forward"},
    )
    return cols


def test_a_later_transaction_recomputes_only_the_traces_it_touched(db_path: Path) -> None:
    transaction(db_path, first_batch())
    untouched, touched = f"{2:032x}", f"{1:032x}"
    # Mark an untouched trace's derived row: a full recompute would overwrite the mark.
    with connect_writer(db_path) as conn:
        conn.execute("UPDATE requests SET SpanCount = -7 WHERE TraceId = ?", [untouched])
    transaction(db_path, late_child(touched, root_span_id(db_path, touched)))
    rows = {row[1]: row for row in request_rows(db_path)}
    with duckdb.connect(str(db_path), read_only=True) as conn:
        span_count, forward = conn.execute(
            "SELECT SpanCount, model_forward_ns FROM requests WHERE TraceId = ?", [touched]
        ).fetchone()
    assert rows[untouched][10] == -7  # SpanCount of the untouched trace: not recomputed
    assert (span_count, forward) == (3, 30_000_000)  # the touched trace: re-derived with its new span


def test_a_trace_split_across_transactions_derives_as_if_loaded_at_once(db_path: Path) -> None:
    transaction(db_path, first_batch())
    touched = f"{1:032x}"
    transaction(db_path, late_child(touched, root_span_id(db_path, touched)))
    incremental = request_rows(db_path)
    with connect_writer(db_path) as conn:
        conn.execute("DELETE FROM derive_state")
        refresh_run(conn, RUN)
    assert request_rows(db_path) == incremental
    assert len(incremental) == 10


def test_a_repeated_batch_adds_nothing_and_keeps_derived_rows(db_path: Path) -> None:
    cols = first_batch()
    transaction(db_path, cols)
    before = request_rows(db_path)
    transaction(db_path, cols)  # a retried request: same ids, same times
    with duckdb.connect(str(db_path), read_only=True) as conn:
        counts = conn.execute("SELECT SpanCount, TraceCount FROM runs WHERE RunLabel = ?", [RUN]).fetchone()
        stored = conn.execute("SELECT count(*) FROM otel_traces").fetchone()[0]
    assert counts == (20, 10) and stored == 20
    assert request_rows(db_path) == before


def test_a_whole_run_derived_in_hash_partitions_matches_one_pass(db_path: Path, monkeypatch) -> None:
    from tailscope.store.duckdb import derive

    transaction(db_path, first_batch())
    one_pass = request_rows(db_path)
    monkeypatch.setattr(derive, "PART_SPANS", 3)  # 20 spans → 7 parts of the run's traces
    with connect_writer(db_path) as conn:
        conn.execute("DELETE FROM derive_state")
        conn.execute("DELETE FROM requests")
        refresh_run(conn, RUN)
    assert request_rows(db_path) == one_pass and len(one_pass) == 10


def test_a_whole_run_derived_in_time_windows_keeps_every_trace_once(db_path: Path, monkeypatch) -> None:
    """Parts are time windows: a trace belongs to the window of its first span, even when it outlasts
    that window or a child starts before its root (clock skew), and a part reads only its window."""
    from tailscope.store.duckdb import derive

    cols = SpanColumns()
    for trace_no in range(1, 41):  # overlapping traces, 40 ms apart, 50-900 ms long
        skewed = S("skewed", -3, 2) if trace_no % 3 == 0 else S("parse", 0, 5)
        long = 900 if trace_no % 7 == 0 else 50
        root = S("root", 0, long, kind="Server", children=[skewed, S("model.forward", 10, long - 5)])
        add_trace(cols, root, trace_no, offset_ms=40.0 * trace_no)
    transaction(db_path, cols)
    one_pass = request_rows(db_path)
    scopes: list[int] = []
    windows: list[tuple[int, int]] = []
    original = derive._derive

    def counting(conn, run_label, scope, window=derive.ALL_TIME, keep_paths=False):
        scopes.append(conn.execute("SELECT count(*) FROM _ts_scope").fetchone()[0])
        windows.append(window)
        return original(conn, run_label, scope, window, keep_paths)

    monkeypatch.setattr(derive, "PART_SPANS", 12)  # 120 spans → 10 parts
    monkeypatch.setattr(derive, "_derive", counting)
    with connect_writer(db_path) as conn:
        conn.execute("DELETE FROM derive_state")
        conn.execute("DELETE FROM requests")
        refresh_run(conn, RUN)
    assert request_rows(db_path) == one_pass and len(one_pass) == 40
    assert len(scopes) >= 5 and sum(scopes) == 40  # each trace in exactly one part
    # each part reads a bounded window of the run (its spans and a trace's reach), never all of it
    run_ns = 40 * 41 * 1e6 + 900e6
    assert all(high - low < run_ns + 2 * derive.CLOCK_SKEW_NS for low, high in windows)


def test_an_appended_batch_is_not_kept_alive_until_the_commit(db_path: Path) -> None:
    """Memory follows the batch, not the file: once appended, a batch's Arrow memory must be free
    to go although the file's transaction is still open. (A view registered per batch inside the
    transaction kept every batch until the commit: 2.1 GiB peak RSS for a 5 M-span file.)"""
    import gc

    import pyarrow as pa

    from tailscope.store.duckdb.writer import append_batch

    cols = SpanColumns()
    for n in range(2000):
        add_trace(cols, S("root", 0, 10, kind="Server", children=[S("child", 1, 9)]), n)
    with connect_writer(db_path) as conn:
        conn.begin()
        gc.collect()
        before = pa.total_allocated_bytes()
        table = cols.to_arrow()
        size = pa.total_allocated_bytes() - before
        append_batch(conn, "r", table)
        del table
        gc.collect()
        held = pa.total_allocated_bytes() - before
        assert size > 100_000 and held < size / 10, f"{held:,} of the batch's {size:,} bytes still held"
        conn.commit()
        assert conn.execute("SELECT count(*), any_value(RunLabel) FROM otel_traces").fetchall() == [
            (4000, "r")
        ]


def span(trace_id: str, span_id: str, parent: str, start_s: float, dur_s: float, name: str) -> SpanColumns:
    cols = SpanColumns()
    cols.append(
        timestamp_ns=BASE_NS + int(start_s * 1e9),
        trace_id=trace_id,
        span_id=span_id,
        parent_span_id=parent,
        span_name=name,
        duration_ns=int(dur_s * 1e9),
        service_name="svc",
        span_kind="Server" if not parent else "Internal",
    )
    return cols


@pytest.mark.parametrize("root_first", [False, True])
def test_a_long_trace_split_over_flushes_hours_apart_is_derived_whole(
    db_path: Path, root_first: bool
) -> None:
    """Flushes look for a touched trace's older spans only within the run's longest request (plus 10 s
    of clock skew) of the new spans: a 10-minute trace whose spans arrive minutes apart, with
    other traffic hours later, is derived whole, whether its root arrives first or last."""
    long_trace, root = "a" * 32, "1" * 16
    root_span = span(long_trace, root, "", 0.0, 600.0, "root")
    if root_first:
        transaction(db_path, root_span)
    transaction(db_path, span(long_trace, "2" * 16, root, 1.0, 0.5, "early child"))
    later = SpanColumns()
    for n in range(1, 200):  # three hours later: other requests
        add_trace(
            later, S("root", 0, 50, kind="Server", children=[S("parse", 0, 5)]), n, offset_ms=3 * 3600e3
        )
    transaction(db_path, later)
    transaction(db_path, span(long_trace, "3" * 16, root, 540.0, 2.0, "late child"))
    if not root_first:
        transaction(db_path, root_span)
    incremental = request_rows(db_path)
    with connect_writer(db_path) as conn:
        conn.execute("DELETE FROM derive_state")
        refresh_run(conn, RUN)
    whole = request_rows(db_path)
    assert incremental == whole
    row = next(r for r in whole if r[1] == long_trace)
    assert row[10] == 3  # SpanCount: the root and both children


def test_the_runs_trace_count_stays_exact_without_a_recount_per_write(db_path: Path, monkeypatch) -> None:
    """Each write adds the traces it brought to the recorded count (recounting the run's distinct
    TraceIds only when its span count crosses a power of 1.25): the count stays exact as new traces
    and late spans of old ones arrive, and most writes do not scan the run."""
    from tailscope.store.duckdb import run_row

    recounts = []
    original = run_row._query

    def counting(conn, name, params):
        if name == "ingest_run_trace_count":
            recounts.append(params)
        return original(conn, name, params)

    monkeypatch.setattr(run_row, "_query", counting)
    trace_no = 0
    # one writer connection for the 40 transactions, as the collector's writer holds one (opening and
    # closing the file three times per write was most of this test's time)
    request = S("root", 0, 50, kind="Server", children=[S("parse", 0, 5)])
    with connect_writer(db_path) as conn:
        for write in range(40):
            cols = SpanColumns()
            for _ in range(5):
                trace_no += 1
                add_trace(cols, request, trace_no, write * 100.0)
            if write:
                old = f"{trace_no - 7:032x}"
                (root,) = conn.execute(
                    "SELECT SpanId FROM otel_traces WHERE TraceId = ? AND ParentSpanId = ''", [old]
                ).fetchone()
                cols.extend(late_child(old, root))
            conn.begin()
            store_batches(conn, RUN, [cols], ["test"])
            conn.commit()
            recorded, exact = conn.execute(
                "SELECT (SELECT TraceCount FROM runs WHERE RunLabel = ?), count(DISTINCT TraceId) "
                "FROM otel_traces",
                [RUN],
            ).fetchone()
            assert recorded == exact == trace_no
    assert len(recounts) < 20
