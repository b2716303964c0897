"""The stage mapping a sampled diagnosis reads, recorded by each whole derive of a run.

A diagnosis maps its spans to stages by the stage mapping of `MAPPING_TRACES` traces of its first read
window (sample_plan.mapping_scope; the run's when it reads the run whole). Computing it live costs a
span tree statement whose planning alone (~26,000 characters: the stage rules' CASE, the phase
rules' spans, the walk) is ~50-130 ms of CPU whatever the scope holds, paid by every diagnosis
(bench/RESULTS.md, scale18 and scale19). A whole derive of a run that a diagnosis samples knows the
run's span count and extent, so it computes that same mapping once (the same statement over the same
scope: `live`) and keeps its rows in `stage_mapping_kept` with what they were computed for: the run's
span count, the traces, the window and a digest of the stage and phase rules in force (and the
DuckDB version, whose hash picks the traces). The reader answers a mapping from the record only
where all of them equal the asked scope's and the run's span count now (`kept`: exact, as
derive_state.PhaseCandidates is); anything else (a flush since, a stage-rule edit re-mapped from
the kept paths, another window or sample size, a run read whole, a store no writer of this version
derived) computes it live as before.
"""

from __future__ import annotations

import hashlib
from typing import Any

import duckdb

from tailscope import sql
from tailscope.store.duckdb import rules
from tailscope.store.duckdb.scope import staged_scope
from tailscope.store.duckdb.statements import WINDOWS_WHERE, padded_windows, span_tree_query
from tailscope.store.sample_plan import DEFAULT_MAX_SPANS, mapping_scope

Window = tuple[int, int] | None


def rules_digest(conn: Any) -> str:
    """What the mapping depends on besides the spans: the stage and phase rules in force, and the
    engine's version (its hash orders the sampled traces)."""
    text = repr((rules.rules_in_force(conn), rules.phase_rules_in_force(conn), duckdb.__version__))
    return hashlib.sha256(text.encode()).hexdigest()


def live(conn: Any, run: str, traces: int, window: Window) -> list[tuple[Any, ...]]:
    """(span name, kind, stage, rule number, spans) over `traces` traces of the run (with a span in
    `window`, (first, end) ns, where given): span_tree.sql's span rows counted."""
    conn.execute(sql.load("derive_drop_scope"))
    if window is None:
        conn.execute(sql.load("stage_mapping_scope"), [run, int(traces)])
    else:
        conn.execute(sql.load("stage_mapping_scope_window"), [run, *window, int(traces)])
    try:
        with staged_scope(conn, "traces", run, window=window) as staged:
            stage_rules, phase_rules = rules.rules_in_force(conn), rules.phase_rules_in_force(conn)
            text, params = span_tree_query(stage_rules, scope=staged, run=run, phase_rules=phase_rules)
            summary = sql.load("stage_mapping_summary").replace("{span_tree}", text)
            return [tuple(row) for row in conn.execute(summary, params).fetchall()]
    finally:
        conn.execute(sql.load("derive_drop_scope"))


def kept(conn: Any, run: str, traces: int, window: Window) -> list[tuple[Any, ...]] | None:
    """The recorded mapping of that scope, None where there is none that speaks for the run now (a
    whole run's scope never has one: `record` keeps a sample's only, so it is not looked up)."""
    if window is None:
        return None
    first, end = window
    params = {"run": run, "traces": int(traces), "first": first, "end": end, "rules": rules_digest(conn)}
    try:
        rows = conn.execute(sql.load("stage_mapping_kept_read"), params).fetchall()
    except duckdb.CatalogException:  # a store no writer of this version has opened yet
        return None
    return [tuple(row) for row in rows] or None


def record(conn: Any, run: str, spans: int, max_spans: int | None = None) -> None:
    """Keep the mapping a diagnosis of the run (`spans` spans now) with `max_spans` (DEFAULT_MAX_SPANS
    when None) will ask for, where it reads a sample. A run it reads whole keeps none: there the
    statement's fixed cost is a large share of a derive (a 2,000-request run's whole derive: ~0.18 ->
    ~0.27 s of CPU with it, bench/RESULTS.md scale19), and such a run is diagnosed in well under 1 s."""
    conn.execute(sql.load("stage_mapping_kept_forget"), [run])
    max_spans = DEFAULT_MAX_SPANS if max_spans is None else max_spans
    if not max_spans or spans <= max_spans:  # read whole (sample_plan.plan)
        return
    flat = padded_windows(None)
    extent = sql.load("diagnosis_extent").replace("{windows}", WINDOWS_WHERE)
    bound = {"run": run, "from_ns": flat[0::2], "to_ns": flat[1::2]}
    count, first, last = conn.execute(extent, bound).fetchone()
    if not count or count != spans:
        return
    traces, window = mapping_scope(int(count), int(first), int(last), max_spans)
    if window is None:  # too short to split: read whole
        return
    rows = live(conn, run, traces, window)
    if not rows:  # no request in the scope: nothing to keep (the reader computes it, and finds none)
        return
    head = [run, int(count), traces, *window, rules_digest(conn)]
    conn.executemany(sql.load("stage_mapping_kept_write"), [[*head, *row] for row in rows])


def forget(conn: Any, run: str | None) -> None:
    """Drop a run's record (every run's with None)."""
    conn.execute(sql.load("stage_mapping_kept_forget"), [run])
