"""Which runs the store holds: with spans, and with derived requests."""

from __future__ import annotations

from tailscope import sql
from tailscope.store.ch_conn import dialect_of
from tailscope.store.connection import Connection


def runs_with_requests(conn: Connection) -> list[str]:
    return [row[0] for row in conn.execute(sql.load("request_runs", dialect_of(conn))).fetchall()]


def runs_with_spans(conn: Connection) -> list[str]:
    return [row[0] for row in conn.execute(sql.load("span_runs", dialect_of(conn))).fetchall()]
