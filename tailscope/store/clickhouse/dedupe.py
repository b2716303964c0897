"""A file's spans into a ClickHouse run once, as the DuckDB loader stores them: spans the run already
has (the same file loaded again, or files that overlap) and repeats inside the file are not written
again, so counts, the derived requests and the diagnosis (which counts concurrent spans) are those
of the spans, not of how often they were loaded. Used where the loader writes otel_traces from its
converted table after the whole file decoded (load.py) and for each flush of the
receiver (collect.py); a new run from one file, written while it is derived
(overlap), has no stored spans to compare with."""

from __future__ import annotations

import pyarrow as pa

from tailscope import sql
from tailscope.store.clickhouse import span_durations, write
from tailscope.store.clickhouse.store import WRITE_TIME_LIMIT_S, ClickHouseClient


def _run(store: ClickHouseClient, name: str, params: dict[str, object] | None = None) -> object:
    return store.query(sql.load(name, dialect="clickhouse"), params, WRITE_TIME_LIMIT_S)


def move_ready_once(
    store: ClickHouseClient, run: str, first_ns: int, last_ns: int, durations: bool = False
) -> int:
    """The loader's converted spans (write.READY) into otel_traces, those new to `run` only, each
    once; how many were written. `durations`: also into the run's span durations (the receiver's,
    whose windows are derived without them: span_durations). The session's tables are dropped or
    emptied whatever happens."""
    try:
        _run(store, "ingest_fresh_ddl")
        _run(store, "ingest_fresh_fill", {"run": run, "first": first_ns, "last": last_ns})
        fresh = int(store.query(sql.load("ingest_fresh_count", dialect="clickhouse")).single_value())
        _run(store, "ingest_fresh_move")
        if durations:
            span_durations.add_fresh(store, run)
        return fresh
    finally:
        _run(store, "ingest_fresh_drop")
        write.clear_staged(store)


def append_spans_once(store: ClickHouseClient, chunk: pa.Table, run: str) -> tuple[int, int]:
    """A receiver flush's decoded spans into otel_traces, those new to `run` only (an exporter that
    retries a request it thinks lost sends its spans again); (first, last) span start of the flush."""
    first, last = write.stage_spans(store, chunk, run)
    move_ready_once(store, run, first, last, durations=True)
    return first, last
