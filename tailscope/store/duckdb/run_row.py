"""A run's row in the `runs` table: its source files, setup attributes and counts, kept up to date by
every write without a scan of the whole run per write."""

from __future__ import annotations

import math
from typing import Any

from tailscope import sql

WriterConnection = Any  # a DuckDB connection inside the writer's transaction


def _query(conn: WriterConnection, name: str, params: list[Any]) -> list[tuple[Any, ...]]:
    return conn.execute(sql.load(name), params).fetchall()


def trace_count(conn: WriterConnection, run_label: str, before: int, after: int, new: int) -> int:
    """The run's trace count after a write that brought `new` traces it did not have: the recorded
    count plus those, recounted exactly (a scan of the run's TraceId column) on its first write and
    whenever its span count crosses a power of 1.25, so the scans add up to a constant per span
    however long the run grows, and the kept count is never older than the last quarter of growth.
    (`new` can overcount a trace whose only earlier spans lie outside the write's window.)"""
    recorded = _query(conn, "ingest_run_counts", [run_label])
    if not before or not recorded or _growth_step(before) != _growth_step(after):
        return _query(conn, "ingest_run_trace_count", [run_label])[0][0]
    return int(recorded[0][1]) + max(new, 0)


def _growth_step(spans: int) -> int:
    return int(math.log(max(spans, 1), 1.25))


def update_run(
    conn: WriterConnection,
    run_label: str,
    source_files: list[str],
    setup: dict[str, set[str]],
    spans: int,
    traces: int,
) -> None:
    rows = _query(conn, "ingest_run_setup", [run_label])
    row = rows[0] if rows else None
    files = list(row[0]) if row else []
    for source in source_files:
        if source not in files:
            files.append(source)
    merged = {key: set(value.split(",")) for key, value in (row[1] if row else {}).items()}
    for key, values in setup.items():
        merged.setdefault(key, set()).update(values)
    keys = sorted(merged)
    values = [",".join(sorted(merged[key])) for key in keys]
    _query(conn, "ingest_upsert_run", [run_label, files, keys, values, spans, traces])
