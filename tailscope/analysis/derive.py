"""Derived per-request data, rebuilt for a run inside the writer's transaction.

The ingest loader and the OTLP receiver call `refresh_run(conn, run_label)` after writing a run's
spans, inside the same transaction, so a reader never sees spans without their derived rows.

What it maintains (DDL in sql/schema.sql): `requests`, one row per trace with a request root and that
request's exclusive time per stage, and `derive_state`, how far each run has been read. A refresh
recomputes only the traces that received spans since the last refresh (found by rowid above the
stored high-water mark, checked against the row count); anything unexpected (rows deleted, rowids
moved, more than half the run new) falls back to recomputing the whole run. Rule edits recompute every
run (`refresh_all`). All of it is SQL in DuckDB: span_tree.sql (span level, aggregated per request
by span_tree_requests.sql) then derive_requests.sql (root attributes, dominant stage).
"""

from __future__ import annotations

import duckdb

from tailscope import sql
from tailscope.analysis.runs import runs_with_spans
from tailscope.analysis.stages import rules_in_force, seed_rules
from tailscope.query.builders import span_tree_query


def _drop_temp(conn: duckdb.DuckDBPyConnection) -> None:
    conn.execute(sql.load("derive_drop_rows"))
    conn.execute(sql.load("derive_drop_scope"))


def refresh_run(conn: duckdb.DuckDBPyConnection, run_label: str) -> None:
    """Bring the derived rows of one run up to date with its spans (incrementally when it can)."""
    seed_rules(conn)
    count, max_rowid = conn.execute(sql.load("derive_run_rows"), [run_label]).fetchone()
    state = conn.execute(sql.load("derive_state_read"), [run_label]).fetchone()
    if count == 0:
        conn.execute(sql.load("derive_delete_run"), [run_label])
        conn.execute(sql.load("derive_state_forget"), [run_label])
        return
    scope = "run"
    if state is not None:
        old_rows, old_max = state
        if count == old_rows and max_rowid == old_max:
            return  # nothing new
        new_rows = conn.execute(sql.load("derive_new_rows"), [run_label, old_max]).fetchone()[0]
        if count == old_rows + new_rows and new_rows * 2 < count:
            scope = "traces"
    _drop_temp(conn)
    if scope == "traces":
        conn.execute(sql.load("derive_scope"), [run_label, state[1]])
        conn.execute(sql.load("derive_delete_scope"), [run_label])
    else:
        conn.execute(sql.load("derive_delete_run"), [run_label])
    text, params = span_tree_query(rules_in_force(conn), scope, run_label, output="requests")
    conn.execute(f"CREATE TEMP TABLE _ts_request_rows AS {text}", params)
    conn.execute(sql.load("derive_requests"), [run_label])
    _drop_temp(conn)
    conn.execute(sql.load("derive_state_write"), [run_label, count, max_rowid])


def refresh_all(conn: duckdb.DuckDBPyConnection) -> None:
    """Recompute every run from scratch (after a stage-rule edit)."""
    conn.execute(sql.load("derive_state_forget"), [None])
    conn.execute(sql.load("derive_delete_run"), [None])
    for run_label in runs_with_spans(conn):
        refresh_run(conn, run_label)
