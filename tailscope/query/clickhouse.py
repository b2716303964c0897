"""SQL builders for the ClickHouse dialect: each returns (statement text, named parameters) and
touches no database, like tailscope.query.builders does for DuckDB.

Texts come from tailscope/sql/clickhouse/*.sql; the only text added here is fixed SQL from constants
(the run scope, the rules' CASE with one `{name:Type}` placeholder per value). Every value (run
label, time range, attribute filters, regexes, stages) is a server-side parameter.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tailscope import sql

if TYPE_CHECKING:
    from tailscope.analysis.types import StageRule

# Which otel_traces rows belong to a run: a time range and resource-attribute filters (tailscope_runs).
RUN_SCOPE = (
    "(SELECT * FROM otel_traces "
    "WHERE Timestamp BETWEEN fromUnixTimestamp64Nano({run_start:Int64}) "
    "AND fromUnixTimestamp64Nano({run_end:Int64}) "
    "AND arrayAll((k, v) -> ResourceAttributes[k] = v, "
    "mapKeys({run_filters:Map(String, String)}), mapValues({run_filters:Map(String, String)})))"
)
# Phase rules are not applied on ClickHouse yet: the phase spans are an empty relation of the
# columns span_tree.sql reads from them.
NO_PHASES = (
    "SELECT '' AS TraceId, '' AS SpanId, '' AS ParentSpanId, '' AS SpanName, '' AS SpanKind, "
    "toInt64(0) AS Duration, toInt64(0) AS StartNs, CAST(NULL AS Nullable(String)) AS AttrStage, "
    "CAST(NULL AS Nullable(Int64)) AS RuleNo WHERE 0"
)


@dataclass(frozen=True)
class RunSelection:
    """A run on ClickHouse: spans starting in [start_ns, end_ns] whose ResourceAttributes hold
    every (key, value) of `filters`."""

    start_ns: int
    end_ns: int
    filters: dict[str, str] = field(default_factory=dict)

    def params(self) -> dict[str, Any]:
        return {"run_start": self.start_ns, "run_end": self.end_ns, "run_filters": dict(self.filters)}


def stage_case(rules: list[StageRule]) -> tuple[str, str, dict[str, Any]]:
    """ClickHouse pieces for the stage rules, as stages.stage_case gives DuckDB's: (name-hit columns
    over SpanName, the CASE giving the first matching rule's position or NULL, their parameters).
    Name regexes are `nr<i>`, span kinds `rk<position>`, attribute regexes `ra<position>`; all
    matched case-insensitively, attribute regexes per key=value line ((?m))."""
    name_cols: list[str] = []
    whens: list[str] = []
    params: dict[str, Any] = {}
    for rule in rules:
        conditions: list[str] = []
        n = int(rule.position)
        if rule.span_kind is not None:
            conditions.append(f"SpanKind = {{rk{n}:String}}")
            params[f"rk{n}"] = rule.span_kind
        if rule.name_regex is not None:
            column = f"nh{len(name_cols) + 1}"
            name_cols.append(f"match(SpanName, concat('(?i)', {{nr{n}:String}})) AS {column}")
            params[f"nr{n}"] = rule.name_regex
            conditions.append(f"h.{column}")
        if rule.attribute_regex is not None:
            conditions.append(f"match(AttrLines, concat('(?mi)', {{ra{n}:String}}))")
            params[f"ra{n}"] = rule.attribute_regex
        whens.append(f"WHEN {' AND '.join(conditions) or 'false'} THEN {n}")
    names_sql = ", ".join(["SpanName", *name_cols])
    case_sql = "CASE " + " ".join(whens) + " END" if whens else "CAST(NULL AS Nullable(Int64))"
    return names_sql, case_sql, params


def span_tree_query(rules: list[StageRule], selection: RunSelection, output: str) -> tuple[str, dict[str, Any]]:
    """clickhouse/span_tree.sql over one run's selection, ending in `output` (fixed SQL that may
    use the CTEs: span_rows, request_root, spans)."""
    names_sql, case_sql, rule_params = stage_case(rules)
    stages: list[str | None] = [None] * max((r.position for r in rules), default=0)
    for rule in rules:
        stages[rule.position - 1] = rule.stage
    text = (
        _strip_comments(sql.load("span_tree", dialect="clickhouse"))
        .replace("{scope}", RUN_SCOPE)
        .replace("{names}", names_sql)
        .replace("{rule_case}", case_sql)
        .replace("{phases}", NO_PHASES)
        .replace("{output}", output)
    )
    params = {
        **selection.params(),
        **rule_params,
        "server_rules": [int(r.position) for r in rules if r.span_kind == "Server"],
        "stages": stages,
    }
    return text, params


def derive_requests_query(
    rules: list[StageRule], run: str, selection: RunSelection
) -> tuple[str, dict[str, Any]]:
    """The INSERT ... SELECT that derives a run's tailscope_requests rows inside ClickHouse."""
    per_request = _strip_comments(sql.load("span_tree_requests", dialect="clickhouse"))
    output = (
        _strip_comments(sql.load("derive_requests", dialect="clickhouse"))
        .replace("{per_request}", per_request)
        .replace("{scope}", RUN_SCOPE)
    )
    text, params = span_tree_query(rules, selection, output)
    return "INSERT INTO tailscope_requests\n" + text, {**params, "run": run}


def requests_query(rules: list[StageRule], selection: RunSelection) -> tuple[str, dict[str, Any]]:
    """The per-request rows of a run's selection without storing them (span_tree_requests.sql)."""
    return span_tree_query(rules, selection, _strip_comments(sql.load("span_tree_requests", "clickhouse")))


def _strip_comments(text: str) -> str:
    return "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("--"))
