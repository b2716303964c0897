"""Checks shared by the stage and phase rule editors."""

from __future__ import annotations

from tailscope import sql
from tailscope.store.connection import QUERY_ERRORS, Connection


def regex_problems(conn: Connection, where: str, label: str, pattern: str | None) -> list[str]:
    """[] when `pattern` is unset or a regex RE2 (DuckDB) accepts, else one sentence saying why not."""
    if pattern is None:
        return []
    if pattern == "":
        return [f"{where}: empty {label} (leave it unset instead)"]
    try:
        conn.execute(sql.load("regex_check"), [pattern]).fetchall()
    except QUERY_ERRORS as error:
        message = str(error).split("Error:", 1)[-1].strip()
        return [f"{where}: {label} {pattern!r} is not a valid RE2 regex ({message})"]
    return []
