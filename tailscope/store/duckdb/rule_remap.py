"""A stage-rule edit without walking every trace again: the kept paths re-mapped (issue 29).

A span's stage depends on the stage rules only through its path: the chain of (span name, kind,
tailscope.stage attribute or phase rule, attribute-regex hits, SERVER span with children) from its
request root down (span_tree.sql); its attributed time does not depend on them at all. The derive
keeps each distinct path node (span_paths, a few thousand) and each request's attributed ns per path
(request_paths, ~0.9 rows per span). A stage-rule edit then computes each node's stage under the new
rules (remap_path_stages.sql: a walk over the nodes) and re-sums every request's stage columns from
its rows (request_stage_sums.sql, the derive's own sums: the same terms in the same grouping, so the
result equals a derive from the spans), reading no span and walking no trace.

The rows are written lazily (derive.py): the first stage-rule edit derives every run from its spans
and keeps them; the next edits re-map. What the kept rows cannot answer takes the derive from the
spans, keeping the rows for the next edit (derive.refresh_all with keep_paths):
- an edit whose rules hold an attribute regex some kept node was not tried against (a new or
  changed attribute regex: a node keeps the hits of the regexes in force when it was derived);
- a run without its rows (loaded since the last stage-rule edit, none made yet, a store migrated
  from schema version 4) or with spans written since its last derive (derive_state.PathsKept, SpanRows);
- a phase-rule edit (it changes the trees: phase spans), which never comes here.
"""

from __future__ import annotations

from typing import Any

from tailscope import sql
from tailscope.rules import StageRule
from tailscope.rules.stages import stage_rule_problems
from tailscope.store.duckdb import derive, histogram, statements
from tailscope.store.duckdb.rules import regex_error, rules_in_force, store_rules
from tailscope.store.duckdb.statements import attribute_patterns, remap_sums_query

WriterConnection = Any  # a DuckDB connection inside the writer's transaction


def path_rule_case(rules: list[StageRule]) -> tuple[str, list[Any]]:
    """The CASE giving a kept path node's first matching rule's position (NULL: none) and its params:
    span_tree.sql's rule CASE (statements.stage_case) with a name regex matched against the node's
    SpanName and an attribute regex looked up in the node's AttrHits."""
    whens: list[str] = []
    params: list[Any] = []
    for rule in rules:
        conditions: list[str] = []
        if rule.span_kind is not None:
            conditions.append("SpanKind = ?")
            params.append(rule.span_kind)
        if rule.name_regex is not None:
            conditions.append("regexp_matches(SpanName, ?, 'i')")
            params.append(rule.name_regex)
        if rule.attribute_regex is not None:
            conditions.append("list_contains(AttrHits, ?)")
            params.append(rule.attribute_regex)
        whens.append(f"WHEN {' AND '.join(conditions) or 'false'} THEN {int(rule.position)}")
    return ("CASE " + " ".join(whens) + " END" if whens else "CAST(NULL AS INTEGER)"), params


def answers(conn: WriterConnection, rules: list[StageRule]) -> bool:
    """Whether the kept path nodes answer `rules`: each was tried against all of their attribute regexes."""
    patterns = {"patterns": attribute_patterns(rules)}
    return conn.execute(sql.load("remap_uncovered"), patterns).fetchone()[0] == 0


def run_is_kept(conn: WriterConnection, run_label: str) -> bool:
    """Whether the run's kept path rows cover every request it has and every span it holds."""
    state = conn.execute(sql.load("derive_state_read"), [run_label]).fetchone()
    if state is None or not state[2]:
        return False
    return int(state[0]) == int(conn.execute(sql.load("derive_run_rows"), [run_label]).fetchone()[0])


def stage_paths(conn: WriterConnection, rules: list[StageRule]) -> None:
    """temp._ts_path_stage: every kept node's bucket under `rules` (remap_path_stages.sql)."""
    case_sql, case_params = path_rule_case(rules)
    server_rules = [rule.position for rule in rules if rule.span_kind == "Server"]
    stages: list[str | None] = [None] * max((r.position for r in rules), default=0)
    for rule in rules:
        stages[rule.position - 1] = rule.stage
    conn.execute(sql.load("remap_drop_stages"))
    text = sql.load("remap_path_stages").replace("{rule_case}", case_sql)
    conn.execute(text, [*case_params, server_rules, stages, server_rules])


def remap_run(conn: WriterConnection, run_label: str) -> None:
    """Re-sum one run's requests from its kept paths (temp._ts_path_stage staged) and rebuild its
    pre-aggregates; its spans, span count and longest request are unchanged."""
    conn.execute(sql.load("remap_drop"))
    conn.execute(remap_sums_query(), [run_label, run_label, statements.SPAN_TIMES_MAX_HASH])
    conn.execute(sql.load("remap_update"), {"run": run_label})
    conn.execute(sql.load("remap_drop"))
    histogram.rebuild(conn, run_label)


def refresh_after_edit(conn: WriterConnection, progress: derive.Progress | None = None) -> None:
    """After a stage-rule edit (inside its transaction): every run whose kept paths answer the new
    rules re-mapped, every other run derived from its spans keeping its path rows (derive.refresh_all)."""
    rules = rules_in_force(conn)
    if not answers(conn, rules):
        derive.refresh_all(conn, progress, keep_paths=True)
        return
    stage_paths(conn, rules)

    def remap(run_label: str) -> bool:
        if not run_is_kept(conn, run_label):
            return False
        remap_run(conn, run_label)
        return True

    try:
        derive.refresh_all(conn, progress, remap=remap, keep_paths=True)
    finally:
        conn.execute(sql.load("remap_drop_stages"))


def replace_rules(
    conn: WriterConnection, rules: list[StageRule], progress: derive.Progress | None = None
) -> None:
    """Validate, store (renumbering positions 1..n in list order) and bring every run's derived rows
    up to date, in one transaction on a writer connection: re-mapped from the kept paths where they
    answer the rules, derived from the spans elsewhere. Raises ValueError listing the problems when
    invalid; nothing is changed then."""
    problems = stage_rule_problems(rules, lambda pattern: regex_error(conn, pattern))
    if problems:
        raise ValueError("invalid stage rules: " + "; ".join(problems))
    derive.rederive_after(conn, lambda: store_rules(conn, rules), progress, refresh_after_edit)
