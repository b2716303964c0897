"""Checks shared by the stage and phase rule editors."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

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


def save_on_either(
    store: Any,
    rules: list[Any],
    validate: Callable[[Any, list[Any]], list[str]],
    clickhouse_replace: Callable[[Any, list[Any]], object],
    duckdb_replace: Callable[[Any, list[Any]], None],
    what: str,
) -> None:
    """Store an edited rule list and recompute every run, on either engine: a ClickHouse store
    validates, then `clickhouse_replace(store, rules)` (store.ch_write: every run derived again
    inside ClickHouse); a DuckDB Store runs `duckdb_replace(conn, rules)` in its writer's transaction
    (which validates). Raises ValueError naming the problems; nothing changes then."""
    from tailscope.store.clickhouse import ClickHouseStore

    if isinstance(store, ClickHouseStore):
        problems = validate(store, rules)
        if problems:
            raise ValueError(f"invalid {what}: " + "; ".join(problems))
        clickhouse_replace(store, rules)
        return
    with store.writer() as conn:
        duckdb_replace(conn, rules)
