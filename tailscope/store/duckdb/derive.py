"""Derived per-request data on DuckDB, rebuilt for a run inside the writer's transaction.

The store's writers (tailscope.store.duckdb.writer: ingest's files, the receiver's flushes) call
`refresh_run(conn, run_label)` after writing a run's spans, inside the same transaction, so a reader
never sees spans without their derived rows.

What it maintains (DDL in sql/schema.sql): `requests`, one row per trace with a request root and that
request's exclusive time per stage, and `derive_state`, how many of a run's spans the derived rows
reflect. A writer that knows which traces it touched (the loader and the receiver: the trace ids of
the batches of one transaction) passes them, and only those traces are recomputed, so a flush costs
what its batch costs, not what the run holds. Anything unexpected (the run's span count is not the
recorded count plus what the writer says it added, no recorded state, more than half the run new)
falls back to recomputing the whole run. Rule edits recompute every run (`refresh_all`). All of it
is SQL in DuckDB: span_tree.sql (span level, aggregated per request by span_tree_requests.sql) then
derive_requests.sql (root attributes, dominant stage).

A run whose derive_state says PathsKept is derived from per-path rows instead (span_tree.sql's paths
variant, aggregated per request and path signature by span_tree_paths.sql, then per request by
request_stage_sums.sql), which are kept (span_paths, request_paths): a stage-rule edit re-maps them
instead of walking every trace again (rule_remap.py). They cost the derive +25-45 % CPU, so they are
written lazily: by the first stage-rule edit (which derives every run from its spans anyway), and
kept current afterwards only where they exist (a flush into such a run replaces its touched traces'
rows, a phase-rule edit re-derives them); ingest and the receiver's flushes into a run without them
derive as before and pay nothing for them.

(Rowids cannot mark how far a run was read: inside a transaction DuckDB numbers uncommitted rows
from 2^55, so a high-water mark taken in the writer's transaction matched nothing after commit.)
"""

from __future__ import annotations

from collections.abc import Callable
from itertools import pairwise
from typing import Any

import pyarrow as pa

from tailscope import sql
from tailscope.rules import PhaseRule
from tailscope.rules.phases import phase_rule_problems
from tailscope.store.duckdb import histogram, kept_mapping, statements
from tailscope.store.duckdb.rules import (
    phase_rules_in_force,
    regex_error,
    rules_in_force,
    seed_phase_rules,
    seed_rules,
    store_phase_rules,
)
from tailscope.store.duckdb.statements import (
    ALL_TIME,
    MASK_BITS,
    attribute_patterns,
    derive_candidates_query,
    derive_requests_from_paths,
    span_tree_query,
)

Connection = Any  # a DuckDB connection
# A long derive's progress: (fraction done 0..1, what it is doing), as the diagnosis reports its own.
Progress = Callable[[float, str], None]
WriterConnection = Any  # a DuckDB connection inside the writer's transaction

# A whole-run derive goes through the run's traces in time windows of about this many spans, so its
# memory and its reads follow the window, not the run (the walk and the sweep hold every span in scope).
PART_SPANS = 1_000_000
# How far a trace's spans may start outside its root's interval (clocks of different hosts: NTP keeps
# them within milliseconds; 10 s leaves room for a badly synchronised host).
CLOCK_SKEW_NS = 10 * 10**9


def _drop_temp(conn: WriterConnection) -> None:
    conn.execute(sql.load("derive_drop_rows"))
    conn.execute(sql.load("derive_drop_tree"))
    conn.execute(sql.load("derive_drop_candidates"))
    conn.execute(sql.load("derive_drop_scope"))


def _delete_run(conn: WriterConnection, run_label: str | None, paths: bool = True) -> None:
    """Drop a run's derived requests (every run's: None) and, with `paths`, its kept path rows (a run
    has them only where derive_state says so: PathsKept)."""
    conn.execute(sql.load("derive_delete_run"), [run_label])
    if paths:
        conn.execute(sql.load("derive_paths_delete_run"), [run_label])


def refresh_run(
    conn: WriterConnection,
    run_label: str,
    touched: pa.Table | None = None,
    added: int = 0,
    span_range: tuple[int, int, int] | None = None,
    progress: Callable[[float], None] | None = None,
    keep_paths: bool | None = None,
    whole: bool = False,
) -> None:
    """Bring the derived rows of one run up to date with its spans.

    `touched`: a table with a TraceId column naming every trace that received spans since the last
    refresh, `added` how many spans those writes added to the run; with them only those traces are
    recomputed. Without them, a run whose span count moved is recomputed whole. `span_range`:
    (first start, last start, longest duration) of the added spans in ns; with it the touched
    traces' older spans are looked for only where they can be (see `trace_window`). `progress`:
    called with the fraction of a whole-run derive done after each of its parts. `keep_paths`: whether
    a whole-run derive keeps the run's path rows (rule_remap.py); by default only where the run kept
    them before (a stage-rule edit wrote them): an incremental derive keeps them current there, and
    a run without them pays nothing for them. `whole`: derive the whole run even if nothing is new.
    """
    seed_rules(conn)
    if seed_phase_rules(conn):  # a new store, or one derived before phase rules existed:
        refresh_all(conn)  # every run derived with them, this one included
        return
    count = conn.execute(sql.load("derive_run_rows"), [run_label]).fetchone()[0]
    state = conn.execute(sql.load("derive_state_read"), [run_label]).fetchone()
    kept = state is not None and bool(state[2])
    if count == 0:
        _delete_run(conn, run_label, paths=kept)
        histogram.forget(conn, run_label)
        conn.execute(sql.load("derive_state_forget"), [run_label])
        kept_mapping.forget(conn, run_label)
        return
    if not whole and state is not None and count == state[0] and (touched is None or added == 0):
        return  # nothing new
    incremental = (
        not whole
        and state is not None
        and touched is not None
        and count == state[0] + added
        and added * 2 < count
    )
    _drop_temp(conn)
    if incremental:
        conn.register("_ts_touched", touched)
        try:
            conn.execute(sql.load("derive_scope"))
        finally:
            conn.unregister("_ts_touched")
        known = longest_request(conn, run_label, state)
        window = trace_window(conn, run_label, span_range, known)

        found: list[bool] = []

        def replace() -> None:
            conn.execute(sql.load("derive_delete_scope"), [run_label, *window])
            if kept:
                conn.execute(sql.load("derive_paths_delete_scope"), [run_label, *window])
            found.append(_derive(conn, run_label, "traces", window, keep_paths=kept))

        histogram.around_refresh(conn, run_label, window, replace)
        # every span written since the last derive is in the touched traces' scope: the run has phase
        # candidates if it had before or the scope has; unknown stays unknown unless the scope has
        candidates = True if any(found) else state[3]
        written = conn.execute(sql.load("derive_longest_in_window"), [run_label, *window]).fetchone()[0]
        longest = max(known, int(written or 0))  # an upper bound: a request derived shorter may remain
        paths_kept = kept  # the touched traces' rows replaced: as complete as before
        kept_mapping.forget(conn, run_label)  # the run's spans moved on: a diagnosis maps them live
    else:
        _delete_run(conn, run_label, paths=kept)
        paths_kept = kept if keep_paths is None else keep_paths
        parts = -(-count // PART_SPANS)
        if parts == 1:
            candidates = _derive(conn, run_label, "run", keep_paths=paths_kept)
        else:
            candidates = _derive_in_parts(conn, run_label, parts, progress, paths_kept)
        histogram.rebuild(conn, run_label)
        longest = int(conn.execute(sql.load("derive_longest_request"), [run_label]).fetchone()[0] or 0)
        kept_mapping.record(conn, run_label, count)  # the stage mapping a diagnosis of the run reads
    conn.execute(sql.load("derive_state_write"), [run_label, count, longest, paths_kept, candidates])


def _derive_in_parts(
    conn: WriterConnection,
    run_label: str,
    parts: int,
    progress: Callable[[float], None] | None = None,
    keep_paths: bool = False,
) -> bool:
    """A whole run derived in `parts` time windows of about equal span counts, each trace in the
    window of its first span. Each part reads the spans of its window (plus the reach of a trace
    on either side), so the cost per span stays flat as the run grows; hash partitions each read
    the whole run (50 M spans: 50 parts × 50 M rows, 2.5× the cost per span of a 5 M-span run).
    Whether any part's scope held phase candidates (see `_derive`)."""
    quantiles = [part / parts for part in range(1, parts)]
    bounds_row = conn.execute(sql.load("derive_part_bounds"), [quantiles, run_label]).fetchone()
    first, last, longest, cuts = bounds_row
    reach = max(int(longest), 0) + 2 * CLOCK_SKEW_NS
    bounds = [first, *sorted(set(cuts) - {first}), last + 1]
    candidates = False
    for done, (low, high) in enumerate(pairwise(bounds), start=1):
        conn.execute(sql.load("derive_scope_part"), [run_label, low, high, reach])
        candidates |= _derive(conn, run_label, "traces", (low, high + reach), keep_paths)
        if progress is not None:
            progress(done / (len(bounds) - 1))
    return candidates


def longest_request(conn: Connection, run_label: str, state: tuple[Any, ...] | None = None) -> int:
    """At least the run's longest request (ns): derive_state's (`state`, its row when the caller
    has read it), or its derived requests scanned when the state does not know it (a store derived
    before it kept it)."""
    if state is None:
        state = conn.execute(sql.load("derive_state_read"), [run_label]).fetchone()
    if state is not None and state[1] is not None:
        return int(state[1])
    return int(conn.execute(sql.load("derive_longest_request"), [run_label]).fetchone()[0] or 0)


def trace_window(
    conn: Connection,
    run_label: str,
    span_range: tuple[int, int, int] | None,
    known: int | None = None,
) -> tuple[int, int]:
    """Where the spans of the traces a write touched can start: within the longest request (or span)
    the run has seen, plus 10 s of clock skew, of the written spans' starts.

    A trace's spans all start inside its root's interval, so two of its spans start at most the
    root's duration apart. The root is either among the written spans (their longest bounds it) or
    stored and derived (the run's longest request bounds it: `known`, else longest_request). If the
    root has not arrived yet, the trace is derived from what the window holds and derived again,
    whole, when the root arrives.
    DuckDB skips the row groups outside the window by their Timestamp min/max, so a flush into a long
    run reads what the window holds, not the run's whole TraceId column."""
    if span_range is None:
        return ALL_TIME
    first, last, longest = span_range
    if known is None:
        known = longest_request(conn, run_label)
    reach = max(int(longest), int(known)) + CLOCK_SKEW_NS
    return first - reach, last + reach


def _derive(
    conn: WriterConnection,
    run_label: str,
    scope: str,
    window: tuple[int, int] = ALL_TIME,
    keep_paths: bool = False,
) -> bool:
    """Derive the requests of one scope (the run, or the traces in _ts_scope) into `requests`; with
    `keep_paths` from per-path rows, kept in span_paths and request_paths (+25-45 % CPU). Whether
    the scope holds any span the phase rules could read (a phase candidate, phase_candidates.sql):
    staged first, which span_tree.sql's phase spans then read, so the answer costs no extra scan."""
    # (not staged as the readers' span trees are, scope.staged_scope: the window already bounds what
    # each read scans, and the copy cost more than the reads it saved: 6.5 vs 6.1 s CPU for 2 M spans)
    rules = rules_in_force(conn)
    phase_rules = phase_rules_in_force(conn)
    staging, staging_params = derive_candidates_query(phase_rules, scope, run_label, window)
    conn.execute(staging, staging_params)
    candidates = bool(conn.execute(sql.load("derive_candidates_count")).fetchone()[0])
    output = "paths" if keep_paths else "requests"
    text, params = span_tree_query(
        rules, scope, run_label, output=output, phase_rules=phase_rules, window=window, staged_candidates=True
    )
    if not keep_paths:
        conn.execute(f"CREATE TEMP TABLE _ts_request_rows AS {text}", params)
        conn.execute(sql.load("derive_requests"), [run_label, *window])
        _drop_temp(conn)
        return candidates
    conn.execute(f"CREATE TEMP TABLE _ts_tree_rows AS {text}", params)
    conn.execute(sql.load("derive_paths_nodes"), [attribute_patterns(rules)[:MASK_BITS]])
    conn.execute(derive_requests_from_paths(), [statements.SPAN_TIMES_MAX_HASH])
    conn.execute(sql.load("derive_requests"), [run_label, *window])
    conn.execute(sql.load("derive_paths_keep"), [run_label])
    _drop_temp(conn)
    return candidates


def rederive_after(
    conn: WriterConnection,
    write: Callable[[], None],
    progress: Progress | None = None,
    refresh: Callable[[WriterConnection, Progress | None], None] | None = None,
) -> None:
    """Run `write` (a rule edit) and recompute every run (`refresh`, refresh_all unless given), in one
    transaction: all or nothing."""
    conn.begin()
    try:
        write()
        (refresh or refresh_all)(conn, progress)
        conn.commit()
    except BaseException:
        conn.rollback()
        raise


def run_sizes(conn: Connection) -> dict[str, int]:
    """Every run that has spans, with its span count."""
    runs = [row[0] for row in conn.execute(sql.load("span_runs")).fetchall()]
    return {run: int(conn.execute(sql.load("derive_run_rows"), [run]).fetchone()[0]) for run in runs}


def refresh_all(
    conn: WriterConnection,
    progress: Progress | None = None,
    remap: Callable[[str], bool] | None = None,
    keep_paths: bool = False,
) -> None:
    """Recompute every run from scratch (after a rule edit); `progress`: told the fraction of the
    store's spans derived after each part of a run (about PART_SPANS spans). `remap(run)`: tried
    first for each run, True when it brought the run's derived rows up to date itself (a stage-rule
    edit re-mapped from the kept paths, rule_remap.py); the other runs are derived from their spans,
    keeping their path rows with `keep_paths` (a stage-rule edit: the next one re-maps them), else
    only where they kept them before (a phase-rule edit keeps them current, adds none)."""
    kept_before = {row[0] for row in conn.execute(sql.load("derive_paths_kept_runs")).fetchall()}
    if remap is None:  # every run from its spans: nothing derived before is kept, no path node either
        conn.execute(sql.load("derive_state_forget"), [None])
        _delete_run(conn, None)
        conn.execute(sql.load("derive_paths_forget"))
        histogram.forget(conn, None)
    by_run = run_sizes(conn)
    runs, sizes = list(by_run), list(by_run.values())
    total, done = max(sum(sizes), 1), 0
    for run_label, size in zip(runs, sizes, strict=True):

        def told(fraction: float, run: str = run_label, before: int = done, spans: int = size) -> None:
            if progress is not None:
                step = f"run {run!r}: {fraction:.0%} of its {spans:,} spans"
                progress((before + fraction * spans) / total, step)

        told(0.0)
        if remap is not None and remap(run_label):
            told(1.0)
        else:
            keep = keep_paths or run_label in kept_before
            refresh_run(conn, run_label, progress=told, keep_paths=keep, whole=True)
        done += size
    if progress is not None:
        progress(1.0, f"{len(runs)} runs, {done:,} spans derived")


def replace_phase_rules(conn: Connection, rules: list[PhaseRule], progress: Progress | None = None) -> None:
    """Validate, store (renumbering positions 1..n in list order) and derive every run again from its
    spans (a phase-rule edit changes the trees), in one transaction on a writer connection. Raises
    ValueError listing the problems when invalid; nothing is changed then. (A stage-rule edit:
    rule_remap.replace_rules.)"""
    problems = phase_rule_problems(rules, lambda pattern: regex_error(conn, pattern))
    if problems:
        raise ValueError("invalid phase rules: " + "; ".join(problems))
    rederive_after(conn, lambda: store_phase_rules(conn, rules), progress)
