"""DuckDB's SQL builders: each returns (statement text, bound parameters) and touches no database.

Statement texts come from tailscope/sql/*.sql; the only text a builder adds is fixed SQL chosen from
constants in this module (a scope, a filter clause per set field). Every user value (run labels,
services, routes, regexes, times) travels as a bound parameter. tests/test_queries_sql.py checks the
builders' output against tests/golden/.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from tailscope import sql
from tailscope.rules import PhaseRule, StageRule
from tailscope.rules.phases import attribute_paths, phase_rules_param
from tailscope.store.interface import SPAN_WINDOWS

if TYPE_CHECKING:
    from tailscope.store.interface import RequestFilter

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
    # the spans starting in one of SPAN_WINDOWS windows [first, end) (a sampled diagnosis: row groups
    # outside every window are skipped by their Timestamp range; unused windows are empty)
    "windows": "(SELECT * FROM otel_traces WHERE RunLabel = ? AND ("
    + " OR ".join(
        ["(Timestamp >= make_timestamp_ns(?::BIGINT) AND Timestamp < make_timestamp_ns(?::BIGINT))"]
        * SPAN_WINDOWS
    )
    + "))",
    # one trace within the time its spans can start (reader.trace_tree: its request's interval)
    "trace_window": (
        "(SELECT * FROM otel_traces WHERE RunLabel = ? AND TraceId = ? "
        "AND Timestamp BETWEEN make_timestamp_ns(?::BIGINT) AND make_timestamp_ns(?::BIGINT))"
    ),
    "sample": (
        "(SELECT o.* FROM otel_traces AS o JOIN (SELECT TraceId FROM otel_traces WHERE RunLabel = ? "
        "GROUP BY TraceId ORDER BY hash(TraceId) LIMIT ?) AS x ON x.TraceId = o.TraceId WHERE o.RunLabel = ?)"
    ),
    # one of the above, staged once (scope_spans_stage.sql, scope.staged_scope): read four times by
    # span_tree.sql, it then costs one read of otel_traces instead of four
    "staged": "(SELECT * FROM temp._ts_scope_spans)",
}

# What span_tree.sql ends with: per span (Gantt, stage mapping) or per request (refresh_run).
# "paths": per (request, path signature) rows, path nodes and request roots, for the derive
# (derive.py turns them into `requests` rows and the kept rows a rule edit re-maps, rule_remap.py).
OUTPUTS: dict[str, str] = {
    "spans": "span_tree_spans",
    "requests": "span_tree_requests",
    "paths": "span_tree_paths",
}

# At most this many distinct attribute regexes are kept as hit bits of a span's path (a BIGINT mask);
# a rule edit naming one beyond them re-derives from the spans.
MASK_BITS = 62

# The derive keeps requests.SpanTimes (span_tree_requests.sql) for the requests whose hash(TraceId) is
# at most this: the lowest 1/16 of the hash range. The stage breakdown's seeded sample takes the N
# requests of lowest hash in its band, so a sample of 500 from a band of more than 8,000 requests
# lies there; a smaller band (a small run) reads its sample's spans, cheap at that size. Keeping it
# for every request cost 30-60 % more CPU per derive (1 M spans: 0.94 -> 1.51 s); for 1/16 of them
# a few %.
SPAN_TIMES_MAX_HASH = 2**60 - 1


# Timestamps (ns) no span has: the "traces" scope's window when none is given.
ALL_TIME = (-(2**62), 2**62)


def padded_windows(windows: Sequence[tuple[int, int]] | None) -> list[int]:
    """SPAN_WINDOWS (first, end) pairs, flat: `windows` (all time when None), then empty ones."""
    given = list(windows or [ALL_TIME])
    if len(given) > SPAN_WINDOWS:
        raise ValueError(f"{len(given)} windows: at most {SPAN_WINDOWS} are read at once")
    return [t for pair in given + [(0, 0)] * (SPAN_WINDOWS - len(given)) for t in pair]


# The diagnosis statements' {windows} condition: SPAN_WINDOWS windows in the list parameters
# $from_ns / $to_ns (constant-folded, so row groups outside every window are skipped).
WINDOWS_WHERE = (
    "("
    + " OR ".join(
        f"(Timestamp >= make_timestamp_ns($from_ns[{i}]) AND Timestamp < make_timestamp_ns($to_ns[{i}]))"
        for i in range(1, SPAN_WINDOWS + 1)
    )
    + ")"
)


def _scope_params(
    scope: str,
    run: str,
    trace_id: str | None,
    sample: int | None,
    window: tuple[int, int] | None = None,
    windows: Sequence[tuple[int, int]] | None = None,
) -> list[Any]:
    if scope not in SCOPES:
        raise ValueError(f"unknown scope {scope!r}")
    return {
        "run": [run],
        "traces": [run, *(window or ALL_TIME)],
        "trace": [run, trace_id],
        "windows": [run, *padded_windows(windows)],
        "trace_window": [run, trace_id, *(window or ALL_TIME)],
        "sample": [run, sample, run],
        "staged": [],
    }[scope]


def staged_scope_query(
    scope: str,
    run: str,
    trace_id: str | None = None,
    sample: int | None = None,
    window: tuple[int, int] | None = None,
) -> tuple[str, list[Any]]:
    """scope_spans_stage.sql for one scope of one run: copies its spans into temp._ts_scope_spans,
    which the "staged" scope reads."""
    if scope == "staged":
        raise ValueError("the staged scope is staged already")
    params = _scope_params(scope, run, trace_id, sample, window)
    return sql.load("scope_spans_stage").replace("{scope}", SCOPES[scope]), params


def phase_spans_query(
    phase_rules: list[PhaseRule],
    scope: str,
    run: str,
    trace_id: str | None = None,
    sample: int | None = None,
    window: tuple[int, int] | None = None,
    windows: Sequence[tuple[int, int]] | None = None,
    staged: bool = False,
) -> tuple[str, list[Any]]:
    """phase_spans.sql for one scope of one run: the phase spans the rules make there. `staged`: its
    candidates are the rows a derive staged in temp._ts_phase_candidates (derive_candidates_query
    over the same scope), not read from the scope again."""
    scope_params = _scope_params(scope, run, trace_id, sample, window, windows)
    if staged:
        rows, rows_params = sql.load("phase_candidates_staged"), []
    else:
        rows, rows_params = phase_candidate_rows(phase_rules, scope, scope_params)
    text = sql.load("phase_spans").replace("{candidate_rows}", rows).replace("{scope}", SCOPES[scope])
    return text, [*rows_params, phase_rules_param(phase_rules), *scope_params]


def phase_candidate_rows(
    phase_rules: list[PhaseRule], scope: str, scope_params: list[Any]
) -> tuple[str, list[Any]]:
    """phase_candidates.sql over one scope (its parameters `scope_params`) and its parameters."""
    candidates_sql, candidate_params = phase_candidates(phase_rules)
    text = sql.load("phase_candidates").replace("{scope}", SCOPES[scope])
    text = text.replace("{candidates}", candidates_sql)
    return text, [attribute_paths(phase_rules), *scope_params, *candidate_params]


def derive_candidates_query(
    phase_rules: list[PhaseRule], scope: str, run: str, window: tuple[int, int] | None = None
) -> tuple[str, list[Any]]:
    """derive_stage_candidates.sql: a derive's scope's phase candidates into temp._ts_phase_candidates
    (what span_tree_query's `staged_candidates` reads)."""
    rows, params = phase_candidate_rows(phase_rules, scope, _scope_params(scope, run, None, None, window))
    return sql.load("derive_stage_candidates").replace("{candidate_rows}", rows), params


def span_tree_query(
    rules: list[StageRule],
    scope: str,
    run: str,
    trace_id: str | None = None,
    sample: int | None = None,
    output: str = "spans",
    phase_rules: list[PhaseRule] | None = None,
    window: tuple[int, int] | None = None,
    staged_candidates: bool = False,
) -> tuple[str, list[Any]]:
    """span_tree.sql for one scope of one run (see SCOPES), ending in one of OUTPUTS, with the phase
    spans of `phase_rules` (none when not given). `window`: (first, last) span start in ns for the
    "traces" scope (every time when not given). `staged_candidates`: the phase spans' candidates are
    in temp._ts_phase_candidates (derive_candidates_query over the same scope, a derive's)."""
    if output not in OUTPUTS:
        raise ValueError(f"unknown output {output!r}")
    scope_params = _scope_params(scope, run, trace_id, sample, window)
    phases_sql, phase_params = phase_spans_query(
        phase_rules or [], scope, run, trace_id, sample, window, staged=staged_candidates
    )
    paths = output == "paths"
    names_sql, case_sql, rule_params = stage_case(rules, hit_columns=paths)
    n_name = sum(1 for r in rules if r.name_regex is not None)
    name_params, case_params = rule_params[:n_name], rule_params[n_name:]
    patterns = attribute_patterns(rules) if paths else []
    hits_sql = "".join(f", regexp_matches(AttrLines, ?, 'i') AS ah{k}" for k in range(1, len(patterns) + 1))
    bits = [f"(CAST(t.ah{k} AS BIGINT) << {k - 1})" for k in range(1, min(len(patterns), MASK_BITS) + 1)]
    mask_sql = f"CASE WHEN t.AttrLines IS NOT NULL THEN CAST({' | '.join(bits) or '0'} AS BIGINT) END"
    stages_by_position: list[str | None] = [None] * max((r.position for r in rules), default=0)
    for rule in rules:
        stages_by_position[rule.position - 1] = rule.stage
    text = (
        span_tree_variant(paths)
        .replace("{scope}", SCOPES[scope])
        .replace("{names}", names_sql)
        .replace("{rule_case}", case_sql)
        .replace("{attr_mask}", mask_sql)
        .replace("{attr_hits}", hits_sql)
        .replace("{phases}", phases_sql)
        .replace("{output}", sql.load(OUTPUTS[output]))
    )
    server_rules = [rule.position for rule in rules if rule.span_kind == "Server"]
    params = [
        *scope_params,
        *name_params,
        *case_params,
        *["(?m)" + pattern for pattern in patterns],
        *scope_params,
        *phase_params,
        server_rules,
        *([patterns_digest(patterns)] if paths else []),
        stages_by_position,
        *([SPAN_TIMES_MAX_HASH] if output == "requests" else []),
    ]
    return text, params


def span_tree_variant(paths: bool) -> str:
    """span_tree.sql with the lines of one variant: those ending in a [paths] marker for the paths
    output (the path signatures a derive keeps), those ending in a [plain] marker for the others
    (markers removed); unmarked lines are in both."""
    keep, drop = ("--[paths]", "--[plain]") if paths else ("--[plain]", "--[paths]")
    lines: list[str] = []
    for line in sql.load("span_tree").splitlines():
        text = line.rstrip()
        if text.endswith(drop):
            continue
        lines.append(text[: -len(keep)].rstrip() if text.endswith(keep) else line)
    return "\n".join(lines) + "\n"


def attribute_patterns(rules: list[StageRule]) -> list[str]:
    """The rules' distinct attribute regexes in rule order: the k-th is the hit column ah<k> and, among
    the first MASK_BITS, bit k-1 of a span's AttrMask."""
    return list(dict.fromkeys(r.attribute_regex for r in rules if r.attribute_regex is not None))


def patterns_digest(patterns: list[str]) -> int:
    """A 63-bit digest of the attribute regexes a derive's hit masks were taken against (in its paths'
    root signatures, so that masks over other regexes never share a path)."""
    digest = hashlib.blake2b("\n".join(patterns[:MASK_BITS]).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") >> 1


def stage_sums_query(paths: str, named: str) -> str:
    """request_stage_sums.sql over two relations (fixed SQL): `paths` of (TK, Bucket, Ns) rows and
    `named`, the same with SpanName; one parameter follows, statements.SPAN_TIMES_MAX_HASH."""
    return sql.load("request_stage_sums").replace("{paths}", paths).replace("{named}", named)


def remap_sums_query() -> str:
    """remap_sums.sql: a re-mapped run's per-request sums from its kept paths and temp._ts_path_stage
    (params: run, run, SPAN_TIMES_MAX_HASH)."""
    kept = (
        "(SELECT k.TK, m.Bucket, m.SpanName, k.Ns FROM request_paths AS k "
        "JOIN temp._ts_path_stage AS m ON m.PathId = k.PathId WHERE k.RunLabel = ?)"
    )
    return sql.load("remap_sums").replace("{sums}", stage_sums_query(kept, kept))


def derive_requests_from_paths() -> str:
    """derive_paths_requests.sql: the derive's per-request rows from its per-path temp table (one
    parameter: SPAN_TIMES_MAX_HASH)."""
    rows = "temp._ts_tree_rows"
    sums = stage_sums_query(
        f"(SELECT TK, Bucket, Ns FROM {rows} WHERE Part = 'path')",
        f"(SELECT p.TK, p.Bucket, n.SpanName, p.Ns FROM {rows} AS p JOIN span_paths AS n ON n.Sig = p.Sig "
        "WHERE p.Part = 'path')",
    )
    return sql.load("derive_paths_requests").replace("{sums}", sums)


# Filter fields → fixed SQL over the `requests` table (alias-free column names).
_FILTER_CLAUSES: tuple[tuple[str, str], ...] = (
    ("run", "RunLabel = ?"),
    ("service", "ServiceName = ?"),
    ("route", "Route = ?"),
    ("instance", "Instance = ?"),
    ("start", "Timestamp >= ?"),
    ("end", "Timestamp < ?"),
)


def filter_where(flt: RequestFilter) -> tuple[str, list[Any]]:
    """A WHERE body (never empty: 'true' when nothing is set) and its params for the requests table."""
    clauses: list[str] = []
    params: list[Any] = []
    for field_name, clause in _FILTER_CLAUSES:
        value = getattr(flt, field_name)
        if value is not None:
            clauses.append(clause)
            params.append(value)
    return (" AND ".join(clauses) or "true"), params


def filtered(name: str, flt: RequestFilter, *extra: Any, weighted: bool = False) -> tuple[str, list[Any]]:
    """`<name>.sql` with its `{include:other}` placeholders and its `{where}` filled from the filter
    (sql.load_filtered; `weighted`: the files' weighted versions); the filter's params come first,
    then `extra` (the statement's own parameters, in text order after the WHERE)."""
    where, positional = filter_where(flt)
    return sql.load_filtered(name, "duckdb", where, weighted), [*positional, *extra]


def stage_case(rules: list[StageRule], hit_columns: bool = False) -> tuple[str, str, list[Any]]:
    """SQL pieces for the rules: (name-hit columns over `SpanName`, the rule-number CASE over a span
    joined with its name hits, params in text order: name columns first, then the CASE).

    The CASE yields the position of the first matching rule, or NULL. It reads `SpanKind`, the
    name-hit columns `nh1`, `nh2`, ... (one per rule with a name regex) and an attribute regex's
    match against `AttrLines` (the span's attributes as "key=value" lines, see span_tree.sql), in
    multi-line mode: `^` and `$` are a line's ends, as it was against each key=value pair when
    attributes were a MAP. `hit_columns`: the match read from the attribute-hit columns `ah1`,
    `ah2`, ... (one per distinct attribute regex, attribute_patterns: span_tree.sql's paths output
    computes them for every span the rules are tried on, for its path signatures) instead of inline
    (where a CASE tries a regex only on the spans no earlier rule matched)."""
    patterns = attribute_patterns(rules)
    name_cols: list[str] = []
    name_params: list[Any] = []
    whens: list[str] = []
    case_params: list[Any] = []
    for rule in rules:
        conditions: list[str] = []
        if rule.span_kind is not None:
            conditions.append("SpanKind = ?")
            case_params.append(rule.span_kind)
        if rule.name_regex is not None:
            column = f"nh{len(name_cols) + 1}"
            name_cols.append(f"regexp_matches(SpanName, ?, 'i') AS {column}")
            name_params.append(rule.name_regex)
            conditions.append(column)
        if rule.attribute_regex is not None and hit_columns:
            conditions.append(f"ah{patterns.index(rule.attribute_regex) + 1}")
        elif rule.attribute_regex is not None:
            conditions.append("regexp_matches(AttrLines, ?, 'i')")
            case_params.append("(?m)" + rule.attribute_regex)
        whens.append(f"WHEN {' AND '.join(conditions) or 'false'} THEN {int(rule.position)}")
    names_sql = ", ".join(["SpanName", *name_cols])
    case_sql = "CASE " + " ".join(whens) + " END" if whens else "CAST(NULL AS INTEGER)"
    return names_sql, case_sql, name_params + case_params


def phase_candidates(rules: list[PhaseRule]) -> tuple[str, list[str]]:
    """The candidate filter of phase_spans.sql and its parameters: a span whose attributes hold one
    of the attribute rules' keys ('"key":') or whose events hold one of the event rules' names ('"name"'),
    as one regex of literal alternatives per column (RE2 reads the text once; 24 contains() tests
    read it once each: a sampled diagnosis' windows at 1 M spans 166 -> 61 ms CPU, bench/RESULTS.md
    "Scale: diagnosis load path"); Events only where a span has any."""
    attribute = sorted({f'"{r.start_key}":' for r in rules if r.source == "attribute"})
    events = sorted({f'"{r.start_key}"' for r in rules if r.source == "events"})
    tests: list[str] = []
    params: list[str] = []
    if attribute:
        tests.append("regexp_matches(SpanAttributes, ?)")
        params.append(literal_alternatives(attribute))
    if events:
        tests.append("(Events <> '[]' AND regexp_matches(Events, ?))")
        params.append(literal_alternatives(events))
    return (" OR ".join(tests) or "false"), params


def literal_alternatives(needles: list[str]) -> str:
    """An RE2 pattern matching wherever any of `needles` occurs as written (metacharacters escaped)."""
    return "|".join(re.sub(r"([\\.+*?()|\[\]{}^$])", r"\\\1", needle) for needle in needles)
