"""SQL builders: each returns (statement text, bound parameters) and touches no database.

Statement texts come from tailscope/sql/*.sql; the only text a builder adds is fixed SQL chosen from
constants in this module (a scope, a filter clause per set field). Every user value (run labels,
services, routes, regexes, times) travels as a bound parameter. tests/test_queries_sql.py checks the
builders' output against tests/golden/.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from tailscope import sql
from tailscope.sql import Dialect

if TYPE_CHECKING:  # the analysis package imports this module
    from tailscope.analysis.types import Filter, PhaseRule, StageRule

# Which otel_traces rows span_tree.sql reads, as a relation (fixed SQL; values are parameters).
SCOPES: dict[str, str] = {
    "run": "(SELECT * FROM otel_traces WHERE RunLabel = ?)",
    # a join, not IN (subquery): DuckDB pushes the join's keys into the scan (measured 88 ms vs 295 ms
    # for 100 traces of a 5 M-span run)
    # within a time window: where the traces' spans can start (derive.trace_window: a writer's window
    # lets DuckDB skip the row groups of older spans by their Timestamp min/max)
    "traces": (
        "(SELECT o.* FROM otel_traces AS o JOIN _ts_scope AS x ON x.TraceId = o.TraceId WHERE o.RunLabel = ? "
        "AND o.Timestamp BETWEEN make_timestamp_ns(?::BIGINT) AND make_timestamp_ns(?::BIGINT))"
    ),
    "trace": "(SELECT * FROM otel_traces WHERE RunLabel = ? AND TraceId = ?)",
    "sample": (
        "(SELECT o.* FROM otel_traces AS o JOIN (SELECT TraceId FROM otel_traces WHERE RunLabel = ? "
        "GROUP BY TraceId ORDER BY hash(TraceId) LIMIT ?) AS x ON x.TraceId = o.TraceId WHERE o.RunLabel = ?)"
    ),
}

# What span_tree.sql ends with: per span (Gantt, stage mapping) or per request (refresh_run).
OUTPUTS: dict[str, str] = {"spans": "span_tree_spans", "requests": "span_tree_requests"}


# Timestamps (ns) no span has: the "traces" scope's window when none is given.
ALL_TIME = (-(2**62), 2**62)


def _scope_params(
    scope: str, run: str, trace_id: str | None, sample: int | None, window: tuple[int, int] | None = None
) -> list[Any]:
    if scope not in SCOPES:
        raise ValueError(f"unknown scope {scope!r}")
    return {
        "run": [run],
        "traces": [run, *(window or ALL_TIME)],
        "trace": [run, trace_id],
        "sample": [run, sample, run],
    }[scope]


def phase_spans_query(
    phase_rules: list[PhaseRule],
    scope: str,
    run: str,
    trace_id: str | None = None,
    sample: int | None = None,
    window: tuple[int, int] | None = None,
) -> tuple[str, list[Any]]:
    """phase_spans.sql for one scope of one run: the phase spans the rules make there."""
    from tailscope.analysis.phases import attribute_paths, phase_candidates, phase_rules_param

    scope_params = _scope_params(scope, run, trace_id, sample, window)
    candidates_sql, candidate_params = phase_candidates(phase_rules)
    text = sql.load("phase_spans").replace("{scope}", SCOPES[scope]).replace("{candidates}", candidates_sql)
    paths = attribute_paths(phase_rules)
    return text, [paths, *scope_params, *candidate_params, phase_rules_param(phase_rules), *scope_params]


def span_tree_query(
    rules: list[StageRule],
    scope: str,
    run: str,
    trace_id: str | None = None,
    sample: int | None = None,
    output: str = "spans",
    phase_rules: list[PhaseRule] | None = None,
    window: tuple[int, int] | None = None,
) -> tuple[str, list[Any]]:
    """span_tree.sql for one scope of one run (see SCOPES), ending in one of OUTPUTS, with the phase
    spans of `phase_rules` (none when not given). `window`: (first, last) span start in ns for the
    "traces" scope (every time when not given)."""
    from tailscope.analysis.stages import stage_case

    if output not in OUTPUTS:
        raise ValueError(f"unknown output {output!r}")
    scope_params = _scope_params(scope, run, trace_id, sample, window)
    phases_sql, phase_params = phase_spans_query(phase_rules or [], scope, run, trace_id, sample, window)
    names_sql, case_sql, rule_params = stage_case(rules)
    n_name = sum(1 for r in rules if r.name_regex is not None)
    name_params, case_params = rule_params[:n_name], rule_params[n_name:]
    stages_by_position: list[str | None] = [None] * max((r.position for r in rules), default=0)
    for rule in rules:
        stages_by_position[rule.position - 1] = rule.stage
    text = (
        sql.load("span_tree")
        .replace("{scope}", SCOPES[scope])
        .replace("{names}", names_sql)
        .replace("{rule_case}", case_sql)
        .replace("{phases}", phases_sql)
        .replace("{output}", sql.load(OUTPUTS[output]))
    )
    server_rules = [rule.position for rule in rules if rule.span_kind == "Server"]
    params = [
        *scope_params,
        *name_params,
        *case_params,
        *scope_params,
        *phase_params,
        server_rules,
        stages_by_position,
    ]
    return text, params


# Filter fields → fixed SQL over the `requests` table (alias-free column names).
_FILTER_CLAUSES: tuple[tuple[str, str], ...] = (
    ("run", "RunLabel = ?"),
    ("service", "ServiceName = ?"),
    ("route", "Route = ?"),
    ("instance", "Instance = ?"),
    ("start", "Timestamp >= ?"),
    ("end", "Timestamp < ?"),
)


# The same filters in ClickHouse SQL: named server-side parameters (naive datetimes are UTC).
_FILTER_CLAUSES_CLICKHOUSE: tuple[tuple[str, str], ...] = (
    ("run", "RunLabel = {f_run:String}"),
    ("service", "ServiceName = {f_service:String}"),
    ("route", "Route = {f_route:String}"),
    ("instance", "Instance = {f_instance:String}"),
    ("start", "Timestamp >= {f_start:DateTime64(9, 'UTC')}"),
    ("end", "Timestamp < {f_end:DateTime64(9, 'UTC')}"),
)


def filter_where_clickhouse(flt: Filter) -> tuple[str, dict[str, Any]]:
    """filter_where for ClickHouse: a WHERE body ('true' when nothing is set) and its named params."""
    clauses: list[str] = []
    params: dict[str, Any] = {}
    for field_name, clause in _FILTER_CLAUSES_CLICKHOUSE:
        value = getattr(flt, field_name)
        if value is not None:
            clauses.append(clause)
            params[f"f_{field_name}"] = value
    return (" AND ".join(clauses) or "true"), params


def filter_where(flt: Filter) -> tuple[str, list[Any]]:
    """A WHERE body (never empty: 'true' when nothing is set) and its params for the requests table."""
    clauses: list[str] = []
    params: list[Any] = []
    for field_name, clause in _FILTER_CLAUSES:
        value = getattr(flt, field_name)
        if value is not None:
            clauses.append(clause)
            params.append(value)
    return (" AND ".join(clauses) or "true"), params


_INCLUDE = re.compile(r"\{include:(\w+)\}")


def filtered(name: str, flt: Filter, *extra: Any, dialect: Dialect = "duckdb") -> tuple[str, Any]:
    """`<name>.sql` with its `{include:other}` placeholders replaced by other.sql (shared CTEs) and
    its `{where}` placeholder filled from the filter; the filter's params come first, then `extra`
    (the statement's own parameters, in text order after the WHERE). For ClickHouse the file is
    clickhouse/<name>.sql and the params a dict: the filter's by name (f_run, ...), `extra` as
    p1, p2, ... in order."""
    if dialect == "clickhouse":
        where, named = filter_where_clickhouse(flt)
        params: Any = {**named, **{f"p{i}": value for i, value in enumerate(extra, start=1)}}
    else:
        where, positional = filter_where(flt)
        params = [*positional, *extra]
    text = _INCLUDE.sub(lambda match: sql.load(match.group(1), dialect).rstrip(), sql.load(name, dialect))
    if text.count("{where}") != 1:
        raise ValueError(f"{name}.sql must use {{where}} exactly once")
    return text.replace("{where}", where), params
