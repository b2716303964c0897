"""Checks shared by the stage and phase rule editors."""

from __future__ import annotations

import re

from tailscope import sql
from tailscope.store.ch_conn import dialect_of
from tailscope.store.connection import QUERY_ERRORS, Connection


def regex_problems(conn: Connection, where: str, label: str, pattern: str | None) -> list[str]:
    """[] when `pattern` is unset or a regex RE2 (DuckDB) accepts, else one sentence saying why not."""
    if pattern is None:
        return []
    if pattern == "":
        return [f"{where}: empty {label} (leave it unset instead)"]
    dialect = dialect_of(conn)
    params = {"pattern": pattern} if dialect == "clickhouse" else [pattern]
    try:
        conn.execute(sql.load("regex_check", dialect), params).fetchall()
    except QUERY_ERRORS as error:
        return [f"{where}: {label} {pattern!r} is not a valid RE2 regex ({_why(str(error))})"]
    return []


def _why(message: str) -> str:
    """RE2's reason, as DuckDB words it ('... Error: missing ): (a') from either engine's message
    (ClickHouse: '... cannot compile re2: (?i)(a, error: missing ): (?i)(a. Look at ...', the
    pattern with the case-insensitive prefix the rules add)."""
    found = re.search(r", error: (.*?)\. Look at", message)
    if found:
        return found.group(1).replace("(?i)", "")
    return message.split("Error:", 1)[-1].strip()
