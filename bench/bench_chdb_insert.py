"""Ways of getting decoded Arrow span chunks into the exporter's otel_traces in chdb (bench_chdb_probe.py).

The decoders give attributes, events and links as JSON text (ingest/columns.py); the exporter's table
wants Map(LowCardinality(String), String) and Nested parallel arrays. Either ClickHouse converts the
text (JSONExtract in an INSERT ... SELECT), or Python builds Arrow map/list columns first.
"""

from __future__ import annotations

from collections.abc import Callable
from importlib import resources
from pathlib import Path

import orjson
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from chdb import session as chs

# Arrow and Parquet fields are nullable; the exporter's columns are not (and Nested cannot be).
NOT_NULL = "SETTINGS schema_inference_make_columns_nullable = 0"
DDL = ("otel_traces_ddl", "otel_traces_trace_id_ts_ddl", "otel_traces_trace_id_ts_mv_ddl")
MAP = "Map(LowCardinality(String), String)"
# SELECT list turning one decoded chunk (JSON text columns) into the exporter's columns.
CONVERT = f"""
    Timestamp, TraceId, SpanId, ParentSpanId, TraceState, SpanName, SpanKind, ServiceName,
    JSONExtract(ResourceAttributes, '{MAP}') AS ResourceAttributes, ScopeName, ScopeVersion,
    JSONExtract(SpanAttributes, '{MAP}') AS SpanAttributes, toUInt64(Duration) AS Duration,
    StatusCode, StatusMessage,
    arrayMap(e -> fromUnixTimestamp64Nano(JSONExtract(e, 'Timestamp', 'Int64')), JSONExtractArrayRaw(Events))
        AS `Events.Timestamp`,
    arrayMap(e -> JSONExtractString(e, 'Name'), JSONExtractArrayRaw(Events)) AS `Events.Name`,
    arrayMap(e -> JSONExtract(e, 'Attributes', '{MAP}'), JSONExtractArrayRaw(Events)) AS `Events.Attributes`,
    arrayMap(e -> JSONExtractString(e, 'TraceId'), JSONExtractArrayRaw(Links)) AS `Links.TraceId`,
    arrayMap(e -> JSONExtractString(e, 'SpanId'), JSONExtractArrayRaw(Links)) AS `Links.SpanId`,
    arrayMap(e -> JSONExtractString(e, 'TraceState'), JSONExtractArrayRaw(Links)) AS `Links.TraceState`,
    arrayMap(e -> JSONExtract(e, 'Attributes', '{MAP}'), JSONExtractArrayRaw(Links)) AS `Links.Attributes`
"""
COLUMNS = (
    "Timestamp, TraceId, SpanId, ParentSpanId, TraceState, SpanName, SpanKind, ServiceName, "
    "ResourceAttributes, ScopeName, ScopeVersion, SpanAttributes, Duration, StatusCode, StatusMessage, "
    "`Events.Timestamp`, `Events.Name`, `Events.Attributes`, "
    "`Links.TraceId`, `Links.SpanId`, `Links.TraceState`, `Links.Attributes`"
)
STRUCTURE = (
    "Timestamp DateTime64(9), TraceId String, SpanId String, ParentSpanId String, TraceState String, "
    "SpanName String, SpanKind String, ServiceName String, ResourceAttributes String, ScopeName String, "
    "ScopeVersion String, SpanAttributes String, Duration Int64, StatusCode String, StatusMessage String, "
    "Events String, Links String"
)


def create_tables(sess: chs.Session) -> None:
    for name in ("otel_traces_trace_id_ts_mv", "otel_traces_trace_id_ts", "otel_traces"):
        sess.query(f"DROP TABLE IF EXISTS {name} SYNC")
    folder = resources.files("tailscope.sql.clickhouse")
    for name in DDL:
        sess.query(folder.joinpath(f"{name}.sql").read_text(encoding="utf-8"))


def via_python_fn(sess: chs.Session, chunks: list[pa.Table], work: Path) -> None:
    """INSERT ... SELECT <JSONExtract conversions> FROM Python(chunk): chdb reads the Arrow table in place."""
    for chunk in chunks:  # noqa: B007 (read by name in the query)
        sess.query(f"INSERT INTO otel_traces ({COLUMNS}) SELECT {CONVERT} FROM Python(chunk) {NOT_NULL}")


def via_plain_strings(sess: chs.Session, chunks: list[pa.Table], work: Path) -> None:
    """As via_python_fn, but the span attribute dictionary handed over as plain strings: Python()
    turns a dictionary with many distinct values into LowCardinality slowly (~1-1.6 s per million
    rows), a string column in ~0.05 s; the few-valued dictionaries (services, resources) stay."""
    for chunk in chunks:
        index = chunk.column_names.index("SpanAttributes")
        flat = chunk.set_column(index, "SpanAttributes", chunk.column(index).cast(pa.string()))  # noqa: F841
        sess.query(f"INSERT INTO otel_traces ({COLUMNS}) SELECT {CONVERT} FROM Python(flat) {NOT_NULL}")


def via_arrow_stream(sess: chs.Session, chunks: list[pa.Table], work: Path) -> None:
    """Arrow IPC stream bytes through send_insert (a plain INSERT only: it refuses INSERT ... SELECT)
    into a Memory staging table of text columns, then the same conversions from there."""
    sess.query(f"CREATE TABLE IF NOT EXISTS stage ({STRUCTURE}) ENGINE = Memory")
    for chunk in chunks:
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, chunk.schema) as writer:
            writer.write_table(chunk)
        with sess.send_insert("INSERT INTO stage", "ArrowStream") as inserter:
            inserter.append(sink.getvalue().to_pybytes())
            inserter.finish()
        sess.query(f"INSERT INTO otel_traces ({COLUMNS}) SELECT {CONVERT} FROM stage")
        sess.query("TRUNCATE TABLE stage")


def via_parquet(sess: chs.Session, chunks: list[pa.Table], work: Path) -> None:
    """Each chunk written to a Parquet file (uncompressed) and read back by file()."""
    for i, chunk in enumerate(chunks):
        path = work / f"chunk{i}.parquet"
        pq.write_table(chunk, path, compression="none")
        sess.query(
            f"INSERT INTO otel_traces ({COLUMNS}) SELECT {CONVERT} FROM file('{path}', Parquet) {NOT_NULL}"
        )
        path.unlink()


def _map_column(column: pa.ChunkedArray | pa.Array) -> pa.Array:
    """A dictionary column of JSON objects as an Arrow map column: each distinct text parsed once."""
    array = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    if not pa.types.is_dictionary(array.type):
        array = array.dictionary_encode()
    maps = pa.array(
        [list(orjson.loads(v).items()) for v in array.dictionary.to_pylist()],
        pa.map_(pa.string(), pa.string()),
    )
    return pc.take(maps, array.indices)


def _events(column: pa.ChunkedArray) -> dict[str, pa.Array]:
    times, names, attrs = [], [], []
    for text in column.to_pylist():
        items = orjson.loads(text) if text != "[]" else ()
        times.append([e["Timestamp"] for e in items])
        names.append([e["Name"] for e in items])
        attrs.append([list(e["Attributes"].items()) for e in items])
    return {
        "Events.Timestamp": pa.array(times, pa.list_(pa.timestamp("ns"))),
        "Events.Name": pa.array(names, pa.list_(pa.string())),
        "Events.Attributes": pa.array(attrs, pa.list_(pa.map_(pa.string(), pa.string()))),
    }


def _links(column: pa.ChunkedArray) -> dict[str, pa.Array]:
    out: dict[str, list] = {
        "Links.TraceId": [],
        "Links.SpanId": [],
        "Links.TraceState": [],
        "Links.Attributes": [],
    }
    for text in column.to_pylist():
        items = orjson.loads(text) if text != "[]" else ()
        for key in ("TraceId", "SpanId", "TraceState"):
            out[f"Links.{key}"].append([e[key] for e in items])
        out["Links.Attributes"].append([list(e["Attributes"].items()) for e in items])
    typed = {k: pa.array(v, pa.list_(pa.string())) for k, v in out.items() if k != "Links.Attributes"}
    typed["Links.Attributes"] = pa.array(out["Links.Attributes"], pa.list_(pa.map_(pa.string(), pa.string())))
    return typed


def exporter_arrow(chunk: pa.Table) -> pa.Table:
    """The chunk in the exporter's column types, built in Python/Arrow (maps, nested lists)."""
    cols = {n: chunk.column(n) for n in chunk.column_names if n not in ("Events", "Links")}
    cols["ResourceAttributes"] = _map_column(chunk.column("ResourceAttributes"))
    cols["SpanAttributes"] = _map_column(chunk.column("SpanAttributes"))
    cols.update(_events(chunk.column("Events")))
    cols.update(_links(chunk.column("Links")))
    return pa.table(cols)


def via_arrow_maps(sess: chs.Session, chunks: list[pa.Table], work: Path) -> None:
    """Maps and nested lists built in Arrow, then a plain INSERT ... SELECT * FROM Python(table)."""
    for chunk in chunks:
        typed = exporter_arrow(chunk)  # noqa: F841 (read by name in the query)
        sess.query(f"INSERT INTO otel_traces ({COLUMNS}) SELECT * FROM Python(typed) {NOT_NULL}")


def _split_dictionary(chunk: pa.Table, name: str) -> tuple[pa.Array, pa.Table]:
    """A dictionary column as (int32 indices, a one-column table of its distinct texts)."""
    column = chunk.column(name).unify_chunks() if chunk.column(name).num_chunks > 1 else chunk.column(name)
    array = column.combine_chunks()
    if not pa.types.is_dictionary(array.type):
        array = array.dictionary_encode()
    return array.indices, pa.table({"v": array.dictionary})


# Maps parsed once per distinct attribute text (the decoders dictionary-encode attribute columns):
# a scalar subquery turns the batch's distinct texts into an array of maps, rows pick theirs by index.
CONVERT_BY_INDEX = CONVERT.replace(
    f"JSONExtract(ResourceAttributes, '{MAP}') AS ResourceAttributes",
    "res_maps[ResourceIdx + 1] AS ResourceAttributes",
).replace(
    f"JSONExtract(SpanAttributes, '{MAP}') AS SpanAttributes", "span_maps[SpanIdx + 1] AS SpanAttributes"
)
WITH_MAPS = (
    f"WITH (SELECT groupArray(JSONExtract(v, '{MAP}')) FROM Python(res_dict)) AS res_maps, "
    f"(SELECT groupArray(JSONExtract(v, '{MAP}')) FROM Python(span_dict)) AS span_maps "
)


def via_dictionary_maps(sess: chs.Session, chunks: list[pa.Table], work: Path) -> None:
    """Python(chunk) with the attribute columns as dictionary indices plus their distinct texts,
    each distinct text parsed to a Map once (Python() converting a dictionary column with many
    distinct values to LowCardinality costs ~1.5 s per million rows; indices cost nothing)."""
    for chunk in chunks:
        res_idx, res_dict = _split_dictionary(chunk, "ResourceAttributes")  # noqa: RUF059 (Python())
        span_idx, span_dict = _split_dictionary(chunk, "SpanAttributes")  # noqa: RUF059 (Python())
        rows = chunk.drop_columns(["ResourceAttributes", "SpanAttributes"])
        rows = rows.append_column("ResourceIdx", res_idx).append_column("SpanIdx", span_idx)
        select = f"{WITH_MAPS} SELECT {CONVERT_BY_INDEX} FROM Python(rows) {NOT_NULL}"
        sess.query(f"INSERT INTO otel_traces ({COLUMNS}) {select}")


INSERTS: dict[str, Callable[[chs.Session, list[pa.Table], Path], None]] = {
    "Python(arrow) + JSONExtract": via_python_fn,
    "Python(arrow), SpanAttributes as plain strings, + JSONExtract": via_plain_strings,
    "ArrowStream bytes -> Memory stage + JSONExtract": via_arrow_stream,
    "Parquet file -> file() + JSONExtract": via_parquet,
    "Arrow maps built in Python -> Python()": via_arrow_maps,
    "Python(arrow), maps parsed once per distinct text": via_dictionary_maps,
}
