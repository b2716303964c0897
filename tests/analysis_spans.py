"""Small hand-built traces for the analysis tests: spans as (name, start ms, end ms, children)."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from pathlib import Path

import duckdb

from ingest.columns import SpanColumns
from tailscope.store.duckdb.connection import connect_writer
from tailscope.store.duckdb.derive import refresh_run

BASE_NS = 1_700_000_000_000_000_000
_ids = itertools.count(1)


@dataclass
class S:
    """One span of a hand-built trace; times in ms from the trace's start."""

    name: str
    start: float
    end: float
    children: list[S] = field(default_factory=list)
    kind: str = "Internal"
    stage: str | None = None
    attrs: dict[str, str] = field(default_factory=dict)
    service: str = "svc"
    status: str = "Unset"
    resource: dict[str, str] = field(default_factory=dict)
    # (ms from the trace's start, name) or (ms, name, attributes)
    events: list[tuple] = field(default_factory=list)


def add_trace(cols: SpanColumns, root: S, trace_no: int, offset_ms: float = 0.0, parent: str = "") -> str:
    """Append a trace (root and descendants) to `cols`; returns the trace id."""
    trace_id = f"{trace_no:032x}"

    def walk(span: S, parent_id: str) -> None:
        span_id = f"{next(_ids):016x}"
        attrs = dict(span.attrs)
        if span.stage:
            attrs["tailscope.stage"] = span.stage
        cols.append(
            timestamp_ns=BASE_NS + int((offset_ms + span.start) * 1e6),
            trace_id=trace_id,
            span_id=span_id,
            parent_span_id=parent_id,
            span_name=span.name,
            duration_ns=int((span.end - span.start) * 1e6),
            service_name=span.service,
            span_kind=span.kind,
            span_attributes=attrs,
            resource_attributes=span.resource,
            status_code=span.status,
            events=[(BASE_NS + int((offset_ms + ev[0]) * 1e6), ev[1], ev[2] if len(ev) > 2 else {})
                    for ev in span.events],
        )
        for child in span.children:
            walk(child, span_id)

    walk(root, parent)
    return trace_id


def add_rootless_trace(cols: SpanColumns) -> None:
    """A trace of two spans that are each other's parent: no root, so no request."""
    for span_id, parent_id in (("1" * 16, "2" * 16), ("2" * 16, "1" * 16)):
        cols.append(
            timestamp_ns=BASE_NS,
            trace_id="a" * 32,
            span_id=span_id,
            parent_span_id=parent_id,
            span_name="x",
            duration_ns=5,
            service_name="s",
        )


def load(path: Path, run: str, cols: SpanColumns) -> None:
    """Insert the spans as one run and refresh its derived rows."""
    with connect_writer(path) as conn:
        insert(conn, run, cols)
        refresh_run(conn, run)


def insert(conn: duckdb.DuckDBPyConnection, run: str, cols: SpanColumns) -> None:
    batch = cols.to_arrow()  # noqa: F841 (read by DuckDB's replacement scan)
    conn.execute("INSERT INTO otel_traces SELECT *, ? FROM batch", [run])
