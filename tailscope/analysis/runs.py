"""Which runs the store holds: with spans, and with derived requests."""

from __future__ import annotations

import duckdb

from tailscope import sql


def runs_with_requests(conn: duckdb.DuckDBPyConnection) -> list[str]:
    return [row[0] for row in conn.execute(sql.load("request_runs")).fetchall()]


def runs_with_spans(conn: duckdb.DuckDBPyConnection) -> list[str]:
    return [row[0] for row in conn.execute(sql.load("span_runs")).fetchall()]
