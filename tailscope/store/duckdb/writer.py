"""Writing spans into a DuckDB store: one transaction per file (ingest) or per flush (the receiver).

Within a transaction: append the batches to `otel_traces` through Arrow → drop duplicate (TraceId,
SpanId) within the run → refresh the `runs` row and the derived tables → commit. Any failure
before the commit (a decode error in strict mode, a crash, kill -9) leaves the store as it was.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from tailscope import sql
from tailscope.stop_signals import deferred_stop_signals
from tailscope.store.duckdb import span_histogram
from tailscope.store.duckdb.connection import connect_writer, waiting
from tailscope.store.duckdb.derive import refresh_run, trace_window
from tailscope.store.duckdb.run_row import trace_count, update_run
from tailscope.store.duckdb.threads import fit_threads
from tailscope.store.duckdb.touched import TouchedTraces
from tailscope.store.interface import FileWrite, SpanBatch
from tailscope.store.setup import arrow_chunks

WriterConnection = Any  # a DuckDB connection inside the writer's transaction

# Rows per INSERT: DuckDB's row group. Every INSERT but a file's last appends whole row groups: a
# transaction's appends are written to the file as they go (optimistic writes), and an INSERT that
# ends inside a row group leaves a partial one that the commit then rewrites (measured, 1 M spans in
# inserts of 130,000 rows: commit 1.06 s and a 74 MB file, against 0.28 s and 50 MB in whole groups).
INSERT_ROWS = 122_880


@dataclass
class StoreStats:
    """What one `store_batches` call did."""

    spans_decoded: int = 0
    spans_stored: int = 0  # net new rows after duplicates were dropped
    run_spans: int = 0  # the run's totals afterwards
    run_traces: int = 0

    @property
    def duplicates(self) -> int:
        return self.spans_decoded - self.spans_stored


def store_batches(
    conn: WriterConnection,
    run_label: str,
    batches: Iterable[SpanBatch],
    source_files: list[str],
) -> StoreStats:
    """Append batches to a run inside the caller's open transaction, then dedupe and refresh the run.

    The caller owns BEGIN/COMMIT/ROLLBACK. Within the run, a (TraceId, SpanId) already stored wins
    over a later copy; the runs row (files, counts, setup attributes) and the derived tables are
    brought up to date before returning. Dedupe and refresh look only at the traces the batches
    touched.
    """
    stats = StoreStats()
    before = _query(conn, "ingest_run_span_count", [run_label])[0][0]
    counted = span_histogram.total(conn, run_label) == before  # else built whole after the write
    span_histogram.start(conn)
    setup: dict[str, set[str]] = {}
    touched = TouchedTraces()
    # batches appended together (DuckDB's per-INSERT cost is not negligible), in whole row groups
    for table in arrow_chunks(batches, setup, INSERT_ROWS, whole=True):
        touched.add(table)
        stats.spans_decoded += table.num_rows
        append_batch(conn, run_label, table.combine_chunks())
    touched_table = touched.table() if stats.spans_decoded else None
    known = 0
    if touched_table is not None:
        conn.register("ingest_touched", touched_table)
        try:
            scope = [run_label, touched.first_ns, touched.last_ns]
            if _query(conn, "ingest_has_repeats", scope)[0][0]:
                _dedupe(conn, scope)
            if before:
                window = trace_window(conn, run_label, touched.span_range())
                known = _query(conn, "ingest_known_traces", [run_label, *window])[0][0]
        finally:
            conn.unregister("ingest_touched")
    span_histogram.finish(conn, run_label, counted)
    after = _query(conn, "ingest_run_span_count", [run_label])[0][0]
    stats.spans_stored = after - before
    traces = trace_count(conn, run_label, before, after, len(touched_table or []) - known)
    update_run(conn, run_label, source_files, setup, after, traces)
    stats.run_spans, stats.run_traces = _query(conn, "ingest_run_counts", [run_label])[0]
    # (the transaction's memory cap stays for the derive: it goes part by part, see derive.PART_SPANS)
    refresh_run(conn, run_label, touched_table, stats.spans_stored, touched.span_range())
    return stats


def append_batch(conn: WriterConnection, run_label: str, table: pa.Table) -> None:
    """INSERT one Arrow batch into otel_traces under `run_label` (see ingest_insert_spans.sql for
    why the batch is a relation with the label as a column, not a registered view)."""
    label = pa.DictionaryArray.from_arrays(
        pa.array(np.zeros(table.num_rows, dtype=np.int32)), pa.array([run_label], pa.string())
    )
    batch = conn.from_arrow(table.append_column("RunLabel", label))
    batch.query("ingest_batch", sql.load("ingest_insert_spans"))
    span_histogram.ensure_delta(conn)
    span_histogram.add_batch(batch)  # the batch's spans counted (span_histogram)


def _dedupe(conn: WriterConnection, scope: list[Any]) -> None:
    """Delete the run's copies of spans among the touched traces (ingest_dedupe_copies.sql), taken
    away from the write's span counts first."""
    conn.execute(sql.load("ingest_dedupe_copies"), scope)
    try:
        span_histogram.take_copies(conn)
        conn.execute(sql.load("ingest_dedupe_run"))
    finally:
        conn.execute("DROP TABLE IF EXISTS temp._ts_copies")


def _query(conn: WriterConnection, name: str, params: list[Any]) -> list[tuple[Any, ...]]:
    """Run one statement from tailscope/sql to its end and return its rows."""
    return conn.execute(sql.load(name), params).fetchall()


class DuckDBRunWriter:
    """A RunWriter into a DuckDB file: each file in one transaction that also derives the run."""

    def __init__(self, path: Path, run: str) -> None:
        self.path = path
        self.run = run
        self.traces = 0

    def write_file(self, source: str, batches: Iterable[SpanBatch]) -> FileWrite:
        stats = _transaction(self.path, self.run, batches, source)
        self.traces = stats.run_traces
        return FileWrite(stats.spans_stored, stats.duplicates, stats.run_traces)

    def finish(self) -> int:
        return self.traces  # each file derived the run in its own transaction


@contextmanager
def run_writer(path: Path, run: str) -> Iterator[DuckDBRunWriter]:
    yield DuckDBRunWriter(path, run)


# store(conn, run_label, batches, source_files) -> stats, as store_batches
StoreFn = Callable[[Any, str, Iterable[SpanBatch], list[str]], Any]


def _transaction(
    path: Path, run: str, batches: Iterable[SpanBatch], source: str, store: StoreFn = store_batches
) -> Any:
    """One file's or one flush's transaction, under the writers' memory cap: the batches stored and
    the run's derived rows brought up to date, or (any failure) nothing; what `store` returned."""
    with connect_writer(path) as conn:
        conn.execute(sql.load("ingest_writer_memory")).fetchall()
        fit_threads(conn)
        conn.begin()
        try:
            stats = store(conn, run, batches, [source])
        except BaseException:
            conn.rollback()
            raise
        with deferred_stop_signals():  # a stop signal inside COMMIT acts right after it
            conn.commit()
    return stats


class DuckDBSink:
    """The receiver's flushes into a DuckDB file: each one short transaction (the spans, the runs
    row, the derived rows), the file released in between so the dashboard's readers get in."""

    def __init__(self, path: Path, run: str, source: str, store: StoreFn = store_batches) -> None:
        self.path = Path(path)
        self.run = run
        self.source = source
        self.store = store
        self.where = f"db={self.path}"

    def write(self, batches: Sequence[SpanBatch]) -> None:
        _transaction(self.path, self.run, batches, self.source, self.store)

    def reader_waiting(self) -> bool:
        return waiting(self.path, "reader")

    def close(self) -> None:
        """Nothing pending: every flush derived what it wrote."""
