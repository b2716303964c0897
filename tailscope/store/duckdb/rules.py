"""The stage and phase rule tables of a DuckDB store: read (the defaults when empty), seeded, written
(rule_remap.replace_rules, derive.replace_phase_rules: in one transaction with every run's derived rows)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import astuple
from typing import Any

import duckdb

from tailscope import sql
from tailscope.rules import PhaseRule, StageRule
from tailscope.rules.phases import default_phase_rules, phase_rules_from_rows
from tailscope.rules.stages import default_rules, rules_from_rows
from tailscope.store.errors import why_refused

Connection = Any  # a DuckDB connection (read-only or writer)


def _in_force(conn: Connection, statement: str, from_rows: Callable[[list], list], defaults: list) -> list:
    """The stored rules, or the defaults when the store has none (or no table yet: a store from
    before the table existed, opened read-only)."""
    try:
        rows = conn.execute(sql.load(statement)).fetchall()
    except duckdb.CatalogException:
        return defaults
    return from_rows(rows) if rows else defaults


def rules_in_force(conn: Connection) -> list[StageRule]:
    return _in_force(conn, "stage_rules_list", rules_from_rows, default_rules())


def phase_rules_in_force(conn: Connection) -> list[PhaseRule]:
    return _in_force(conn, "phase_rules_list", phase_rules_from_rows, default_phase_rules())


def regex_error(conn: Connection, pattern: str) -> str | None:
    """None when RE2 (DuckDB's regexp_matches) compiles `pattern`, else RE2's reason."""
    try:
        conn.execute(sql.load("regex_check"), [pattern]).fetchall()
    except duckdb.Error as error:
        return why_refused(str(error))
    return None


def _store(conn: Connection, table: str, rules: list[StageRule] | list[PhaseRule]) -> None:
    conn.execute(sql.load(f"{table}_delete"))
    rows = [[i, *astuple(r)[1:]] for i, r in enumerate(rules, start=1)]
    conn.executemany(sql.load(f"{table}_insert"), rows)


def store_rules(conn: Connection, rules: list[StageRule]) -> None:
    _store(conn, "stage_rules", rules)


def store_phase_rules(conn: Connection, rules: list[PhaseRule]) -> None:
    _store(conn, "phase_rules", rules)


def seed_rules(conn: Connection) -> None:
    """Store the default rules when the table is empty (a new store)."""
    if conn.execute(sql.load("stage_rules_count")).fetchone()[0] == 0:
        store_rules(conn, default_rules())


def seed_phase_rules(conn: Connection) -> bool:
    """Store the default phase rules when the table is empty. True when it seeded them, i.e. the
    store's derived rows were computed without phase rules."""
    if conn.execute(sql.load("phase_rules_count")).fetchone()[0] != 0:
        return False
    store_phase_rules(conn, default_phase_rules())
    return True
