"""SQL builders for the ClickHouse dialect: each returns (statement text, named parameters) and
touches no database, like tailscope.store.duckdb.statements does for DuckDB.

Texts come from tailscope/sql/clickhouse/*.sql; the only text added here is fixed SQL from constants
(the run scope, the rules' CASE with one `{name:Type}` placeholder per value). Every value (run
label, time range, attribute filters, regexes, stages) is a server-side parameter.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tailscope import sql
from tailscope.rules import PhaseRule, StageRule
from tailscope.rules.phases import phase_rules_param

if TYPE_CHECKING:
    from tailscope.store.interface import RequestFilter

# Which otel_traces rows belong to a run: a time range and resource-attribute filters (tailscope_runs).
# Each filter is one map lookup with a constant key, the i-th element of the bound arrays (fixed SQL
# for the selection's number of filters: run_where); arrayAll's lambda over the two arrays looked the
# keys up again on every row, about twice the cost of the whole filter.
TIME_WHERE = (
    "Timestamp BETWEEN fromUnixTimestamp64Nano({run_start:Int64}) "
    "AND fromUnixTimestamp64Nano({run_end:Int64})"
)
FILTER_WHERE = (
    "ResourceAttributes[{{run_filter_keys:Array(String)}}[{i}]] = {{run_filter_values:Array(String)}}[{i}]"
)


def run_where(filters: int) -> str:
    """The WHERE condition of a run's rows for a selection with `filters` attribute filters."""
    return " AND ".join([TIME_WHERE, *(FILTER_WHERE.format(i=i) for i in range(1, filters + 1))])


def run_scope(filters: int) -> str:
    """The run's rows as a subquery."""
    return f"(SELECT * FROM otel_traces WHERE {run_where(filters)})"


SECOND_WHERE = (
    "toDateTime(Timestamp) BETWEEN toDateTime({{sample_lo:Array(Int64)}}[{i}]) "
    "AND toDateTime({{sample_hi:Array(Int64)}}[{i}])"
)


def seconds_where(stretches: int) -> str:
    """Timestamp within one of `stretches` second ranges (sample_lo / sample_hi, unix seconds, both
    included): the primary key's toDateTime(Timestamp), so only their granules are read."""
    return "(" + " OR ".join(SECOND_WHERE.format(i=i) for i in range(1, stretches + 1)) + ")"


def sample_scope(filters: int, stretches: int = 0, proven: bool = False, unproven: bool = True) -> str:
    """Some traces of a run (the sampled views: sample_ids) as a subquery: PREWHERE reads the TraceId
    column first and the rest (attribute maps) only for the granules holding the sample's rows
    (1 M spans: the mapping's first step 0.83 s -> 0.50 s); with `stretches`, only the seconds the
    sample's spans start in (sample.trace_seconds). With `proven`, the traces proven_ids (no span
    outside the run where they are read: sample.sample_rows) come from _ts_sample_rows, read
    there without the run's attribute filters, and only the rest (sample_ids; none when not
    `unproven`) from otel_traces with them; both then with the span tree's columns only
    (SAMPLE_COLUMNS)."""
    seconds = f" AND {seconds_where(stretches)}" if stretches else ""
    where = run_where(filters) + seconds
    read = f"FROM otel_traces PREWHERE TraceId IN {{sample_ids:Array(String)}} WHERE {where}"
    if not proven:
        return f"(SELECT * {read})"
    parts = [f"SELECT {sample_columns()} FROM {SAMPLE_ROWS} WHERE TraceId IN {{proven_ids:Array(String)}}"]
    if unproven:
        parts.append(f"SELECT {sample_columns(f'CAST(ResourceAttributes AS {RESOURCE_MAP})')} {read}")
    return "(" + " UNION ALL ".join(parts) + ")"


def sample_columns(resources: str = "ResourceAttributes") -> str:
    """SAMPLE_COLUMNS as a select list, the resource map given by the expression `resources`."""
    expression = (
        "ResourceAttributes" if resources == "ResourceAttributes" else f"{resources} AS ResourceAttributes"
    )
    return ", ".join(expression if c == "ResourceAttributes" else c for c in SAMPLE_COLUMNS)


SAMPLE_ROWS = "_ts_sample_rows"  # clickhouse/sample_rows.sql's table
RESOURCE_MAP = "Map(LowCardinality(String), String)"
# The otel_traces columns the span tree reads from its scope (span_tree_1_spans.sql, phase_spans.sql).
SAMPLE_COLUMNS = (
    "Timestamp",
    "TraceId",
    "SpanId",
    "ParentSpanId",
    "SpanName",
    "SpanKind",
    "ServiceName",
    "ResourceAttributes",
    "SpanAttributes",
    "Duration",
    "`Events.Timestamp`",
    "`Events.Name`",
)


def seconds_params(seconds: list[tuple[int, int]] | None) -> dict[str, Any]:
    """seconds_where's parameters."""
    seconds = seconds or []
    return {"sample_lo": [lo for lo, _ in seconds], "sample_hi": [hi for _, hi in seconds]}


# No phase rules (or no span they could read): the phase spans as an empty relation of
# phase_spans.sql's columns.
NO_PHASES = (
    "SELECT '' AS TraceId, '' AS SpanId, '' AS ParentSpanId, '' AS SpanName, '' AS SpanKind, "
    "'' AS ServiceName, CAST(map(), 'Map(LowCardinality(String), String)') AS ResourceAttributes, "
    "'' AS StatusCode, toInt64(0) AS StartNs, toInt64(0) AS Duration, "
    "CAST(NULL AS Nullable(String)) AS AttrStage, CAST(NULL AS Nullable(Int64)) AS RuleNo WHERE 0"
)
# The columns of phase_spans.sql span_tree.sql reads.
PHASE_COLUMNS = "TraceId, SpanId, ParentSpanId, SpanName, SpanKind, Duration, StartNs, AttrStage, RuleNo"


def phase_params(phase_rules: list[PhaseRule]) -> dict[str, Any]:
    """phase_spans.sql's parameters: the rules as parallel arrays, and the keys that make a span a
    candidate (attribute rules' duration keys, event rules' start event names)."""
    # the per-rule values as DuckDB's list-of-structs parameter has them, one array per field
    structs = phase_rules_param(phase_rules)
    fields = ("grp", "phase", "stage", "source", "start_key", "end_key", "factor", "name_regex")
    return {
        "ph_pos": [int(s["pos"]) for s in structs],
        **{f"ph_{field}": [s[field] for s in structs] for field in fields},
        "ph_attribute_keys": sorted({r.start_key for r in phase_rules if r.source == "attribute"}),
        "ph_event_keys": sorted({r.start_key for r in phase_rules if r.source == "events"}),
    }


def phases_relation(phase_rules: list[PhaseRule], scope: str) -> tuple[str, dict[str, Any]]:
    """The phase spans of `scope` as span_tree.sql's {phases} relation, and its parameters."""
    if not phase_rules:
        return NO_PHASES, {}
    text = _text("phase_spans").replace("{scope}", scope)
    return f"SELECT {PHASE_COLUMNS} FROM (\n{text}\n)", phase_params(phase_rules)


@dataclass(frozen=True)
class RunSelection:
    """A run on ClickHouse: spans starting in [start_ns, end_ns] whose ResourceAttributes hold
    every (key, value) of `filters`."""

    start_ns: int
    end_ns: int
    filters: dict[str, str] = field(default_factory=dict)

    def params(self) -> dict[str, Any]:
        """The scope's parameters; the filters as two arrays (a dict parameter does not reach a
        server as a Map through clickhouse-connect)."""
        return {
            "run_start": self.start_ns,
            "run_end": self.end_ns,
            "run_filter_keys": list(self.filters),
            "run_filter_values": list(self.filters.values()),
        }


def stage_case(rules: list[StageRule]) -> tuple[str, str, dict[str, Any]]:
    """ClickHouse pieces for the stage rules, as stages.stage_case gives DuckDB's: (name-hit columns
    over SpanName, each after a comma, computed on each span's row: SpanName is LowCardinality in
    the exporter's table, so ClickHouse runs a regex once per distinct name, as DuckDB's name_hits
    CTE does by hand; the CASE over them (`t.nh<i>`) giving the first matching rule's position or
    NULL; their parameters).
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
            conditions.append(f"t.{column}")
        if rule.attribute_regex is not None:
            conditions.append(f"match(AttrLines, concat('(?mi)', {{ra{n}:String}}))")
            params[f"ra{n}"] = rule.attribute_regex
        whens.append(f"WHEN {' AND '.join(conditions) or 'false'} THEN {n}")
    names_sql = "".join(f", {col}" for col in name_cols)
    case_sql = "CASE " + " ".join(whens) + " END" if whens else "CAST(NULL AS Nullable(Int64))"
    return names_sql, case_sql, params


# A filter's fields as named server-side parameters over tailscope_requests (naive datetimes: UTC).
_FILTER_CLAUSES: tuple[tuple[str, str], ...] = (
    ("run", "RunLabel = {f_run:String}"),
    ("service", "ServiceName = {f_service:String}"),
    ("route", "Route = {f_route:String}"),
    ("instance", "Instance = {f_instance:String}"),
    ("start", "Timestamp >= {f_start:DateTime64(9, 'UTC')}"),
    ("end", "Timestamp < {f_end:DateTime64(9, 'UTC')}"),
)


def filter_where(flt: RequestFilter) -> tuple[str, dict[str, Any]]:
    """The filter's set fields: a WHERE body ('true' when nothing is set) and its named params."""
    clauses: list[str] = []
    params: dict[str, Any] = {}
    for field_name, clause in _FILTER_CLAUSES:
        value = getattr(flt, field_name)
        if value is not None:
            clauses.append(clause)
            params[f"f_{field_name}"] = value
    return (" AND ".join(clauses) or "true"), params




def filtered(name: str, flt: RequestFilter, *extra: Any, weighted: bool = False) -> Statement:
    """clickhouse/<name>.sql (or the shared file) with its {include:...} and {where} filled
    (sql.load_filtered; `weighted`: the files' weighted versions); the params a dict: the filter's
    by name (f_run, ...), `extra` as p1, p2, ... in order."""
    where, named = filter_where(flt)
    params = {**named, **{f"p{i}": value for i, value in enumerate(extra, start=1)}}
    return sql.load_filtered(name, "clickhouse", where, weighted), params


STEPS = (
    "span_tree_1_spans",
    "span_tree_2_roots",
    "span_tree_3_tiers",
    "span_tree_4_walk",
    "span_tree_5_exclusive",
)
Statement = tuple[str, dict[str, Any]]


def span_tree_statements(
    rules: list[StageRule],
    selection: RunSelection,
    output: str,
    sample_ids: list[str] | None = None,
    phase_rules: list[PhaseRule] | None = None,
    seconds: list[tuple[int, int]] | None = None,
    proven_ids: list[str] | None = None,
) -> list[Statement]:
    """clickhouse/span_tree*.sql over one run's selection (or the traces `sample_ids` of it, read in
    the second ranges `seconds` when given: sample.trace_seconds; those of them in `proven_ids`
    read without the run's attribute filters: sample_scope), in order: drop the temporary
    tables, fill them step by step, the final statement ending in `output` (fixed SQL that may read
    span_rows, _ts_request_root and _ts_spans), drop them again. Every statement gets the same
    parameters."""
    names_sql, case_sql, rule_params = stage_case(rules)
    stages: list[str | None] = [None] * max((r.position for r in rules), default=0)
    for rule in rules:
        stages[rule.position - 1] = rule.stage
    params = {
        **selection.params(),
        **rule_params,
        "server_rules": [int(r.position) for r in rules if r.span_kind == "Server"],
        "stages": stages,
    }
    scope = run_scope(len(selection.filters))
    if sample_ids is not None:
        known = set(proven_ids or [])
        proven = [i for i in sample_ids if i in known]
        unproven = [i for i in sample_ids if i not in known]
        scope = sample_scope(len(selection.filters), len(seconds or []), bool(proven), bool(unproven))
        params.update(sample_ids=unproven, proven_ids=proven, **seconds_params(seconds))
    phases_sql, phases_params = phases_relation(phase_rules or [], scope)
    params.update(phases_params)
    drop = (_text("span_tree_drop"), {})
    steps = [
        (
            _text(name)
            .replace("{phases}", phases_sql)
            .replace("{scope}", scope)
            .replace("{names}", names_sql)
            .replace("{rule_case}", case_sql),
            params,
        )
        for name in STEPS
    ]
    final = (_text("span_tree").replace("{output}", output), params)
    return [drop, *steps, final, drop]


ALL_TIME = (-(2**62), 2**62)  # a window no span starts outside


def derive_statements(
    rules: list[StageRule],
    run: str,
    selection: RunSelection,
    keep: tuple[int, int] = ALL_TIME,
    phase_rules: list[PhaseRule] | None = None,
    source: str | None = None,
    into: str = "tailscope_requests",
    durations_into: str | None = None,
) -> list[Statement]:
    """The statements that derive a run's tailscope_requests rows inside ClickHouse (the INSERT ...
    SELECT into `into` comes after the span tree's steps): the requests of `selection` whose root
    starts in `keep` ([start, end) ns). `durations_into`: also the spans starting in `keep` into
    that table of span durations (derive_durations.sql). `source`: a table with otel_traces'
    columns read instead of it (a load's converted spans, overlap), bound as an identifier."""
    if into not in ("tailscope_requests", "_ts_derived"):
        raise ValueError(f"unknown target {into!r}")
    if durations_into not in (None, "tailscope_span_durations", "_ts_derived_durations"):
        raise ValueError(f"unknown target {durations_into!r}")
    output = (
        _text("derive_requests")
        .replace("{per_request}", _text("span_tree_requests"))
        .replace("{scope_where}", run_where(len(selection.filters)))
    )
    statements = span_tree_statements(rules, selection, output, phase_rules=phase_rules)
    insert, params = statements[-2]
    bound = {**params, "run": run, "keep_start": keep[0], "keep_end": keep[1]}
    statements[-2] = (f"INSERT INTO {into}\n" + insert, bound)
    if durations_into is not None:
        statements.insert(-1, (f"INSERT INTO {durations_into}\n" + _text("derive_durations"), bound))
    return statements if source is None else [from_source(statement, source) for statement in statements]


def from_source(statement: Statement, source: str) -> Statement:
    """A statement reading otel_traces made to read `source` (a table with its columns, in memory:
    its PREWHERE ... WHERE becomes one WHERE), bound as an identifier."""
    text, params = statement
    text = re.sub(r"PREWHERE (.*?)\bWHERE ", r"WHERE (\1) AND ", text, flags=re.DOTALL)
    return text.replace("FROM otel_traces", "FROM {source:Identifier}"), {**params, "source": source}


def scoped(
    name: str,
    selection: RunSelection,
    phase_rules: list[PhaseRule] | None = None,
    sample_ids: list[str] | None = None,
    seconds: list[tuple[int, int]] | None = None,
    **params: Any,
) -> Statement:
    """clickhouse/<name>.sql with its {scope} the run's selection (or its traces `sample_ids`, read in
    `seconds` when given) (and its {phases}, if it has one, the phase spans `phase_rules` make there:
    phase_spans.sql), and the parameters."""
    text = _text(name)
    if "{phases}" in text:
        text = text.replace("{phases}", _text("phase_spans") if phase_rules else NO_PHASES)
        params = {**phase_params(phase_rules or []), **params}
    filters = len(selection.filters)
    if sample_ids is None:
        return text.replace("{scope}", run_scope(filters)), {**selection.params(), **params}
    scope = sample_scope(filters, len(seconds or []))
    sample = {"sample_ids": list(sample_ids), **seconds_params(seconds)}
    return text.replace("{scope}", scope), {**selection.params(), **sample, **params}


def _text(name: str) -> str:
    return strip_comments(sql.load(name, dialect="clickhouse"))


def strip_comments(text: str) -> str:
    return "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("--"))
