"""Writing to a ClickHouse store: spans into the exporter's otel_traces, runs as selections, derived rows.

The decoders (ingest/) give a batch of spans as an Arrow table in tailscope's column form
(ingest.columns.COLUMNS: attributes as JSON text, events and links as JSON arrays). `stage_spans`
stages it and has ClickHouse convert it into the exporter's columns (Map attributes, Nested events
and links as parallel arrays) with one INSERT ... SELECT per batch; store.dedupe writes the spans
a run does not have yet into otel_traces. A run written by
tailscope is a selection like any other: its spans carry the resource attribute `tailscope.run` =
the label, and its row in tailscope_runs selects on that and on the spans' time range
(`define_run`). `refresh_run` derives the run's tailscope_requests rows inside ClickHouse.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable

import orjson
import pyarrow as pa
import pyarrow.compute as pc

from tailscope import sql
from tailscope.rules import PhaseRule, StageRule
from tailscope.rules.phases import default_phase_rules, phase_rules_from_rows
from tailscope.rules.stages import default_rules, rules_from_rows
from tailscope.store.clickhouse import sample, span_durations
from tailscope.store.clickhouse.statements import (
    ALL_TIME,
    RunSelection,
    derive_statements,
    from_source,
    phase_params,
    scoped,
    span_tree_statements,
    strip_comments,
)
from tailscope.store.clickhouse.store import WRITE_TIME_LIMIT_S, ClickHouseClient

# A rule edit's progress: (fraction of the runs derived, what is being derived).
Progress = Callable[[float, str], None]
RUN_ATTRIBUTE = "tailscope.run"
# A derive goes through a run in time windows of about this many spans (memory follows the window).
# Each window also reads the spans within the run's longest request of it, so fewer, larger windows
# read less twice (1 M spans in two windows: 6.9 s, in one: 3.4-4.0 s).
PART_SPANS = 2_000_000
# How far a trace's spans may start outside its root's interval (clocks of different hosts), as
# tailscope.store.duckdb.derive.CLOCK_SKEW_NS.
CLOCK_SKEW_NS = 10 * 10**9
# The session's table of converted spans (ingest_ready_ddl.sql); overlap names a shared one.
READY = "_ts_ready"


ATTRIBUTE_MAP = pa.map_(pa.string(), pa.string())


def staged_table(chunk: pa.Table, run: str | None = None) -> pa.Table:
    """A decoded batch as the staging table's columns (dictionaries decoded, no RunLabel; the
    attribute texts as Arrow maps, `attribute_maps`); with `run`, each span's resource attributes
    carry tailscope.run = run."""
    columns = {}
    for name, column in zip(chunk.column_names, chunk.columns, strict=True):
        if name == "RunLabel":
            continue
        if name in ("ResourceAttributes", "SpanAttributes"):
            columns[name] = attribute_maps(column, run if name == "ResourceAttributes" else None)
            continue
        columns[name] = (
            pc.cast(column, column.type.value_type) if pa.types.is_dictionary(column.type) else column
        )
    return pa.table(columns)


def attribute_maps(column: pa.ChunkedArray | pa.Array, run: str | None = None) -> pa.Array:
    """Attribute texts (JSON objects of string values) as an Arrow map column, each distinct text
    parsed once (the decoders give a batch's attributes as a dictionary: 1 M spans have ~13
    distinct resources and ~8,000 distinct span attribute sets) and the rows taking theirs (1 M
    spans: ~0.9 s less than JSONExtract on every row). With `run`: tailscope.run = run last (a key
    already there moves there), as ClickHouse's mapUpdate put it."""
    array = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    if not pa.types.is_dictionary(array.type):
        array = pc.dictionary_encode(array)
    maps = []
    for text in array.dictionary.to_pylist():
        attributes = orjson.loads(text) if text else {}
        if run is not None:
            attributes.pop(RUN_ATTRIBUTE, None)
            attributes[RUN_ATTRIBUTE] = run
        maps.append(list(attributes.items()))
    return pc.take(pa.array(maps, ATTRIBUTE_MAP), array.indices)


def stage_spans(
    store: ClickHouseClient, chunk: pa.Table, run: str | None = None, ready: str = READY
) -> tuple[int, int]:
    """Add one decoded batch to the session's staging table (created when missing); with `run`,
    convert it at once into the exporter's columns in `ready` (the session's _ts_ready, or a load's
    shared table, overlap, for `move_ready`), its spans'
    resource attributes with tailscope.run = run. (first, last) span start of the batch in ns."""
    store.query(sql.load("ingest_stage_ddl", dialect="clickhouse"))
    store.insert_arrow("_ts_stage", staged_table(chunk, run))
    if run is not None:
        if ready == READY:
            store.query(sql.load("ingest_ready_ddl", dialect="clickhouse"))
        try:
            store.query(
                sql.load("ingest_stage_move", dialect="clickhouse"), {"target": ready}, WRITE_TIME_LIMIT_S
            )
        finally:
            store.query(sql.load("ingest_stage_clear", dialect="clickhouse"))
    bounds = pc.min_max(pc.cast(chunk.column("Timestamp"), pa.int64()))
    return int(bounds["min"].as_py()), int(bounds["max"].as_py())


def move_ready(store: ClickHouseClient, ready: str = READY) -> None:
    """The spans `stage_spans(..., run)` converted into otel_traces in one insert; the session's
    tables emptied after."""
    try:
        store.query(sql.load("ingest_ready_move", dialect="clickhouse"), {"ready": ready}, WRITE_TIME_LIMIT_S)
    finally:
        clear_staged(store)


def clear_staged(store: ClickHouseClient, ready: str = READY) -> None:
    """Drop what is staged or converted (a file rejected part way: nothing of it is written): the
    session's tables, and `ready` when it is a load's shared one."""
    for name in ("ingest_stage_ddl", "ingest_stage_clear", "ingest_ready_ddl"):
        store.query(sql.load(name, dialect="clickhouse"))
    for table in {READY, ready}:
        store.query(sql.load("ingest_ready_clear", dialect="clickhouse"), {"ready": table})


def define_run(
    store: ClickHouseClient,
    run: str,
    selection: RunSelection,
    files: list[str] | None = None,
    setup: dict[str, str] | None = None,
) -> None:
    """Name a selection of otel_traces as a run (a newer definition replaces an older one)."""
    store.query(
        sql.load("run_define", dialect="clickhouse"),
        {
            "run": run,
            "start": selection.start_ns,
            "end": selection.end_ns,
            "filter_keys": list(selection.filters),
            "filter_values": list(selection.filters.values()),
            "files": files or [],
            "setup_keys": list(setup or {}),
            "setup_values": list((setup or {}).values()),
        },
    )


def run_selection(store: ClickHouseClient, run: str) -> RunSelection | None:
    """A run's selection, None when no run has that label."""
    row = store.query(sql.load("run_selection", dialect="clickhouse"), {"run": run}).first()
    if row is None:
        return None
    filters = dict(row[2]) if not isinstance(row[2], dict) else row[2]
    return RunSelection(int(row[0]), int(row[1]), filters)


def rules_in_force(store: ClickHouseClient) -> list[StageRule]:
    """The stored stage rules, seeding the defaults into an empty table first."""
    rows = store.query(sql.load("stage_rules_list", dialect="clickhouse")).rows
    if not rows:
        rules = default_rules()
        _insert_rules(store, "stage_rules", rules, StageRule)
        return rules
    return rules_from_rows(rows)


def _insert_rules(store: ClickHouseClient, table: str, rules: list, kind: type) -> None:
    """Rules into tailscope_<table>, numbered 1..n in list order."""
    columns = {"position": pa.array(range(1, len(rules) + 1), pa.int32())}
    for name in [f.name for f in dataclasses.fields(kind)][1:]:
        columns[name] = pa.array([getattr(r, name) for r in rules], pa.string())
    store.insert_arrow(f"tailscope_{table}", pa.table(columns))


def _replace_rules(
    store: ClickHouseClient, table: str, rules: list, kind: type, progress: Progress | None = None
) -> list[str]:
    """Store an edited (already validated) rule list in place of the stored one, renumbered 1..n,
    and derive every run again with it, as the DuckDB store does in its writer; the runs derived."""
    store.query(sql.load(f"{table}_clear", dialect="clickhouse"))
    _insert_rules(store, table, rules, kind)
    return _derive_every_run(store, progress)


def replace_stage_rules(
    store: ClickHouseClient, rules: list[StageRule], progress: Progress | None = None
) -> list[str]:
    return _replace_rules(store, "stage_rules", rules, StageRule, progress)


def phase_rules_in_force(store: ClickHouseClient) -> list[PhaseRule]:
    """The stored phase rules (tailscope_phase_rules), the defaults when none are."""
    rows = store.query(sql.load("phase_rules_list", dialect="clickhouse")).rows
    return phase_rules_from_rows(rows) if rows else default_phase_rules()


def replace_phase_rules(
    store: ClickHouseClient, rules: list[PhaseRule], progress: Progress | None = None
) -> list[str]:
    return _replace_rules(store, "phase_rules", rules, PhaseRule, progress)


def _derive_every_run(store: ClickHouseClient, progress: Progress | None = None) -> list[str]:
    runs = [row[0] for row in store.query(sql.load("defined_runs", dialect="clickhouse")).rows]
    for done, run in enumerate(runs):
        if progress is not None:
            progress(done / len(runs), f"run {run!r} ({done + 1} of {len(runs)})")
        refresh_run(store, run)
    if progress is not None:
        progress(1.0, f"{len(runs)} runs derived")
    return runs


def refresh_run(store: ClickHouseClient, run: str, part_spans: int = PART_SPANS) -> int:
    """Derive a run's tailscope_requests rows again, inside ClickHouse, in time windows of about
    `part_spans` spans each (memory follows the window, not the run); how many rows there are now."""
    selection = run_selection(store, run)
    if selection is None:
        raise KeyError(run)
    text, params = scoped("run_reach", selection)
    spans, longest = store.query(text, params).first() or (0, 0)
    parts = max(1, -(-int(spans) // part_spans))
    width = -(-(selection.end_ns + 1 - selection.start_ns) // parts)
    edges = [selection.start_ns + i * width for i in range(parts)] + [selection.end_ns + 1]
    edges[0], edges[-1] = ALL_TIME
    rules = rules_in_force(store)
    forget_derived(store, run)
    for keep in itertools.pairwise(edges):
        refresh_window(store, run, keep, int(longest or 0), rules, selection, deleted=True, durations=True)
    return int(store.query(sql.load("run_request_count", dialect="clickhouse"), {"run": run}).single_value())


def forget_derived(store: ClickHouseClient, run: str) -> None:
    """A run's derived rows and span durations gone, before the whole run is derived again: one
    delete each, none for a run without rows (a lightweight delete costs ~1 s however little it
    removes)."""
    if store.query(sql.load("run_has_requests", dialect="clickhouse"), {"run": run}).single_value():
        store.query(sql.load("derive_delete_window", dialect="clickhouse"), _window(run, ALL_TIME))
    span_durations.forget_run(store, run)


def phase_rules_for(
    store: ClickHouseClient,
    selection: RunSelection,
    sample_ids: list[str] | None = None,
    seconds: list[tuple[int, int]] | None = None,
    source: str | None = None,
) -> list[PhaseRule]:
    """The phase rules in force (phase_rules_in_force), or none when the run (or its traces
    `sample_ids`, in `seconds`) has no span they could read (phase_candidates_any.sql: the phase
    spans then cost nothing). `source`: a table read instead of otel_traces
    (statements.from_source)."""
    rules = phase_rules_in_force(store)
    statement = scoped(
        "phase_candidates_any", selection, sample_ids=sample_ids, seconds=seconds, **phase_params(rules)
    )
    text, params = statement if source is None else from_source(statement, source)
    return rules if store.query(text, params).single_value() else []


def _window(run: str, keep: tuple[int, int]) -> dict[str, object]:
    return {"run": run, "keep_start": keep[0], "keep_end": keep[1]}


def refresh_window(
    store: ClickHouseClient,
    run: str,
    keep: tuple[int, int],
    longest_ns: int,
    rules: list[StageRule] | None = None,
    selection: RunSelection | None = None,
    deleted: bool = False,
    durations: bool = False,
) -> None:
    """Derive again the run's requests whose root starts in `keep` ([start, end) ns), reading only
    the spans that can belong to them: within `longest_ns` (the run's longest span, so its longest
    request) plus CLOCK_SKEW_NS of the window (as the DuckDB derive's trace_window). `deleted`:
    the window's old rows are already gone (refresh_run deletes the run's once). `durations`: also
    the window's span durations (refresh_run, having forgotten the run's; `collect` adds them as
    the spans arrive: span_durations)."""
    selection = selection or run_selection(store, run)
    if selection is None:
        raise KeyError(run)
    reach = longest_ns + CLOCK_SKEW_NS
    around = RunSelection(
        max(selection.start_ns, keep[0] - reach), min(selection.end_ns, keep[1] + reach), selection.filters
    )
    if not deleted:
        store.query(sql.load("derive_delete_window", dialect="clickhouse"), _window(run, keep))
    phases = phase_rules_for(store, around)
    statements = derive_statements(
        rules or rules_in_force(store),
        run,
        around,
        keep,
        phases,
        durations_into=span_durations.TABLE if durations else None,
    )
    for text, params in statements:
        store.query(text, params, WRITE_TIME_LIMIT_S)


def stage_mapping(
    store: ClickHouseClient, run: str, sample_traces: int | None = None
) -> list[tuple[str, str, str, int, int]]:
    """The stage mapping in force over a run (or `sample_traces` of its traces, from a few stretches
    of time: sample_traces.sql, read in their seconds, without the run's filters where no span of
    theirs is outside the run: sample): (span name, span kind, stage, rule number, spans)."""
    selection = run_selection(store, run)
    if selection is None:
        raise KeyError(run)
    sample_ids, seconds = None, None
    if sample_traces is not None:
        text = sql.load("sample_traces", dialect="clickhouse")
        rows = store.query(text, {"run": run, "traces": int(sample_traces)}).rows
        sample_ids = [row[0] for row in rows]
        seconds = sample.trace_seconds(store, sample_ids, sample.selection_seconds(selection))
    rules, phases = rules_in_force(store), phase_rules_for(store, selection, sample_ids, seconds)
    output = strip_comments(sql.load("stage_mapping_summary", dialect="clickhouse"))
    with sample.sample_rows(store, run, selection, sample_ids or [], seconds) as proven:
        statements = span_tree_statements(rules, selection, output, sample_ids, phases, seconds, proven)
        result = store.query_steps(statements)
    return [tuple(row) for row in result.rows]  # type: ignore[misc]
