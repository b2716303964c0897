"""Writing to a ClickHouse store: spans into the exporter's otel_traces, runs as selections, derived rows.

The decoders (ingest/) give a batch of spans as an Arrow table in tailscope's column form
(ingest.columns.COLUMNS: attributes as JSON text, events and links as JSON arrays). `exporter_table`
turns it into the exporter's columns (Map attributes, Nested events and links as parallel arrays)
and `append_spans` sends it in one insert per batch. A run written by tailscope is a selection like
any other: its spans carry the resource attribute `tailscope.run` = the label, and its row in
tailscope_runs selects on that and on the batch's time range (`define_run`). `refresh_run` derives
the run's tailscope_requests rows with one INSERT ... SELECT inside ClickHouse.
"""

from __future__ import annotations

from typing import Any

import orjson
import pyarrow as pa
import pyarrow.compute as pc

from tailscope import sql
from tailscope.analysis.types import StageRule
from tailscope.query.clickhouse import RunSelection, derive_statements, scoped, stage_mapping_statements
from tailscope.store.clickhouse import ClickHouseStore

RUN_ATTRIBUTE = "tailscope.run"
_MAP = pa.map_(pa.string(), pa.string())


def _map_column(column: pa.ChunkedArray, extra: dict[str, str]) -> pa.Array:
    """JSON object texts as an Arrow map column, each distinct text parsed once, `extra` added."""
    array = column.combine_chunks()
    if not pa.types.is_dictionary(array.type):
        array = array.dictionary_encode()
    maps = pa.array(
        [list({**orjson.loads(text), **extra}.items()) for text in array.dictionary.to_pylist()], _MAP
    )
    return pc.take(maps, array.indices)


def _nested(column: pa.ChunkedArray, keys: tuple[str, ...], prefix: str) -> dict[str, pa.Array]:
    """JSON arrays of objects (events, links) as the exporter's Nested parallel arrays."""
    out: dict[str, list[Any]] = {key: [] for key in (*keys, "Attributes")}
    for text in column.to_pylist():
        items = orjson.loads(text) if text != "[]" else ()
        for key in keys:
            out[key].append([item[key] for item in items])
        out["Attributes"].append([list(item.get("Attributes", {}).items()) for item in items])
    arrays = {}
    for key, values in out.items():
        if key == "Attributes":
            kind = pa.list_(_MAP)
        elif key == "Timestamp":
            kind = pa.list_(pa.timestamp("ns"))
        else:
            kind = pa.list_(pa.string())
        arrays[f"{prefix}.{key}"] = pa.array(values, kind)
    return arrays


def exporter_table(chunk: pa.Table, run: str | None = None) -> pa.Table:
    """A decoded batch in the exporter's otel_traces columns; with `run`, each span's resource
    attributes get tailscope.run = run (the run's selection filter)."""
    columns: dict[str, Any] = {
        name: chunk.column(name)
        for name in chunk.column_names
        if name not in ("Events", "Links", "ResourceAttributes", "SpanAttributes", "RunLabel")
    }
    columns["Timestamp"] = pc.cast(chunk.column("Timestamp"), pa.timestamp("ns"))
    columns["Duration"] = pc.cast(chunk.column("Duration"), pa.uint64())
    columns["ResourceAttributes"] = _map_column(
        chunk.column("ResourceAttributes"), {RUN_ATTRIBUTE: run} if run is not None else {}
    )
    columns["SpanAttributes"] = _map_column(chunk.column("SpanAttributes"), {})
    columns.update(_nested(chunk.column("Events"), ("Timestamp", "Name"), "Events"))
    columns.update(_nested(chunk.column("Links"), ("TraceId", "SpanId", "TraceState"), "Links"))
    for name, column in list(columns.items()):
        if isinstance(column, pa.ChunkedArray) and pa.types.is_dictionary(column.type):
            columns[name] = pc.cast(column, column.type.value_type)
    return pa.table(columns)


def append_spans(store: ClickHouseStore, chunk: pa.Table, run: str | None = None) -> tuple[int, int]:
    """Insert one decoded batch into otel_traces; (first, last) span start of the batch in ns."""
    table = exporter_table(chunk, run)
    store.insert_arrow("otel_traces", table)
    starts = pc.cast(table.column("Timestamp"), pa.int64())
    bounds = pc.min_max(starts)
    return int(bounds["min"].as_py()), int(bounds["max"].as_py())


def define_run(
    store: ClickHouseStore,
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
            "filters": selection.filters,
            "files": files or [],
            "setup": setup or {},
        },
    )


def run_selection(store: ClickHouseStore, run: str) -> RunSelection | None:
    """A run's selection, None when no run has that label."""
    row = store.query(sql.load("run_selection", dialect="clickhouse"), {"run": run}).first()
    if row is None:
        return None
    filters = dict(row[2]) if not isinstance(row[2], dict) else row[2]
    return RunSelection(int(row[0]), int(row[1]), filters)


def rules_in_force(store: ClickHouseStore) -> list[StageRule]:
    """The stored stage rules, seeding the defaults into an empty table first."""
    from tailscope.analysis.stages import default_rules

    rows = store.query(sql.load("stage_rules_list", dialect="clickhouse")).rows
    if not rows:
        rules = default_rules()
        store.insert_arrow(
            "tailscope_stage_rules",
            pa.table(
                {
                    "position": pa.array([r.position for r in rules], pa.int32()),
                    "stage": [r.stage for r in rules],
                    "span_kind": [r.span_kind for r in rules],
                    "name_regex": [r.name_regex for r in rules],
                    "attribute_regex": [r.attribute_regex for r in rules],
                    "description": [r.description for r in rules],
                }
            ),
        )
        return rules
    return [
        StageRule(
            position=r[0],
            stage=r[1],
            span_kind=r[2],
            name_regex=r[3],
            attribute_regex=r[4],
            description=r[5] or "",
        )
        for r in rows
    ]


def refresh_run(store: ClickHouseStore, run: str) -> int:
    """Derive a run's tailscope_requests rows again, inside ClickHouse; how many there are now."""
    selection = run_selection(store, run)
    if selection is None:
        raise KeyError(run)
    rules = rules_in_force(store)
    store.query(sql.load("derive_delete_run", dialect="clickhouse"), {"run": run})
    for text, params in derive_statements(rules, run, selection):
        store.query(text, params)
    return int(store.query(sql.load("run_request_count", dialect="clickhouse"), {"run": run}).single_value())


def stage_mapping(
    store: ClickHouseStore, run: str, sample_traces: int | None = None
) -> list[tuple[str, str, str, int, int]]:
    """The stage mapping in force over a run (or `sample_traces` of its traces, chosen by hash):
    (span name, span kind, stage, rule number, spans)."""
    selection = run_selection(store, run)
    if selection is None:
        raise KeyError(run)
    sample_ids = None
    if sample_traces is not None:
        text, params = scoped("sample_traces", selection, traces=int(sample_traces))
        sample_ids = [row[0] for row in store.query(text, params).rows]
    statements = stage_mapping_statements(rules_in_force(store), selection, sample_ids)
    rows: list[tuple[str, str, str, int, int]] = []
    for i, (text, params) in enumerate(statements):
        result = store.query(text, params)
        if i == len(statements) - 2:
            rows = [tuple(row) for row in result.rows]  # type: ignore[misc]
    return rows
