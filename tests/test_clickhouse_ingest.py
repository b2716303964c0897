"""What `tailscope ingest` stores in chdb does not depend on how the rows reach it: the staged
batches read in place by chdb's Python() table function give the same otel_traces rows as the Arrow
stream they were sent as before (attributes, events, links, hostile texts, NULLs), and a new run's
spans written while its requests are derived (ch_overlap) give the same otel_traces, lookup and
tailscope_requests rows as writing first and deriving after."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from ingest.loader import FileResult, decode_file, load_paths
from tailscope import sql
from tailscope.store.clickhouse import dedupe as ch_dedupe
from tailscope.store.clickhouse import overlap as ch_overlap
from tailscope.store.clickhouse import write as ch_write
from tailscope.store.clickhouse.engine import ClickHouseStore

pytest.importorskip("chdb", reason="chdb not installed ([clickhouse] extra)")

HOSTILE = 'x\'); DROP TABLE otel_traces; --\t\\n\n üñí "q"'


def _kv(key: str, value: str) -> dict[str, Any]:
    return {"key": key, "value": {"stringValue": value}}


def _span(i: int) -> dict[str, Any]:
    start = 1_700_000_000_000_000_000 + i * 1_000_000
    return {
        "traceId": f"{i // 3:032x}",
        "spanId": f"{i + 1:016x}",
        "parentSpanId": "" if i % 3 == 0 else f"{i // 3 * 3 + 1:016x}",
        "name": f"op {i % 4} {HOSTILE if i == 5 else ''}",
        "kind": 1 + i % 3,
        "startTimeUnixNano": str(start),
        "endTimeUnixNano": str(start + 500_000 + i),
        "attributes": [_kv("http.route", f"/r{i % 2}"), _kv("hostile", HOSTILE), _kv("n", str(i))]
        if i != 4
        else [],
        "events": [{"timeUnixNano": str(start + 10), "name": "gc", "attributes": [_kv("gen", str(i % 3))]}]
        * (i % 3),
        "links": [{"traceId": f"{i:032x}", "spanId": f"{i:016x}", "attributes": [_kv("why", HOSTILE)]}]
        * (i % 2),
        "status": {"code": 2 if i == 7 else 0, "message": HOSTILE if i == 7 else ""},
    }


# three resources: a hostile one, one that already names a run (the key moves last, with the new
# value), one without attributes
RESOURCES = (
    [_kv("service.name", "svc"), _kv("host.name", HOSTILE)],
    [_kv("tailscope.run", "earlier"), _kv("service.name", "svc2"), _kv("z", "1")],
    [],
)


def _decoded(folder: Path, spans: int = 30) -> pa.Table:
    record = {
        "resourceSpans": [
            {
                "resource": {"attributes": attributes},
                "scopeSpans": [
                    {
                        "scope": {"name": "s", "version": "1"},
                        "spans": [_span(i) for i in range(spans) if i % len(RESOURCES) == r],
                    }
                ],
            }
            for r, attributes in enumerate(RESOURCES)
        ]
    }
    path = folder / "spans.jsonl"
    path.write_text(json.dumps(record) + "\n", encoding="utf-8")
    with open(path, "rb") as raw:
        tables = [b.to_arrow() for b in decode_file(raw, str(path), FileResult(path=str(path)), None)]
    return pa.concat_tables(tables)


def _ready_rows(store: ClickHouseStore) -> list[tuple[Any, ...]]:
    return store.query("SELECT * FROM _ts_ready ORDER BY SpanId").rows


def _as_stream(store: ClickHouseStore) -> Any:
    """insert_arrow as it was: the rows sent as Arrow stream bytes."""
    transport = store.transport

    def insert(table: str, data: pa.Table) -> None:
        columns = ", ".join(f"`{name}`" for name in data.column_names)
        transport._insert_stream(f"INSERT INTO {table} ({columns})", data)  # type: ignore[attr-defined]

    return insert


def test_staged_rows_read_in_place_equal_the_streamed_ones(
    chdb_store: ClickHouseStore, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    chunk = _decoded(tmp_path)
    ch_write.clear_staged(chdb_store)
    ch_write.stage_spans(chdb_store, chunk, "r")
    in_place = _ready_rows(chdb_store)
    ch_write.clear_staged(chdb_store)
    monkeypatch.setattr(chdb_store.transport, "insert_arrow", _as_stream(chdb_store))
    ch_write.stage_spans(chdb_store, chunk, "r")
    streamed = _ready_rows(chdb_store)
    assert len(in_place) == 30
    assert in_place == streamed
    hostile = "SELECT count() FROM _ts_ready WHERE SpanAttributes['hostile'] = {h:String}"
    assert chdb_store.query(hostile, {"h": HOSTILE}).single_value() == 29  # span 4 has no attributes


MAP = "'Map(LowCardinality(String), String)'"
RAW = "CREATE TEMPORARY TABLE raw (SpanId String, ResourceAttributes String, SpanAttributes String)"
AS_BEFORE = (  # the attribute texts converted as before ch_write.attribute_maps
    f"SELECT mapUpdate(JSONExtract(ResourceAttributes, {MAP}), map('tailscope.run', {{run:String}})), "
    f"JSONExtract(SpanAttributes, {MAP}) FROM raw ORDER BY SpanId"
)


def test_attribute_maps_equal_what_json_extract_and_map_update_gave(
    chdb_store: ClickHouseStore, tmp_path: Path
) -> None:
    chunk = _decoded(tmp_path)
    chdb_store.query(RAW)
    names = ("SpanId", "ResourceAttributes", "SpanAttributes")
    chdb_store.insert_arrow("raw", pa.table({n: pc.cast(chunk.column(n), pa.string()) for n in names}))
    before = chdb_store.query(AS_BEFORE, {"run": "r"}).rows
    ch_write.clear_staged(chdb_store)
    ch_write.stage_spans(chdb_store, chunk, "r")
    staged = "SELECT ResourceAttributes, SpanAttributes FROM _ts_ready ORDER BY SpanId"
    assert chdb_store.query(staged).rows == before
    assert {tuple(key for key, _ in row[0]) for row in before} == {
        ("service.name", "host.name", "tailscope.run"),
        ("service.name", "z", "tailscope.run"),
        ("tailscope.run",),
    }
    assert [] in [row[1] for row in before]


def test_nulls_become_defaults_as_in_the_stream(
    chdb_store: ClickHouseStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    chdb_store.query("CREATE TEMPORARY TABLE t (a String, b Int64, c DateTime64(9)) ENGINE = Memory")
    data = pa.table(
        {
            "a": pa.array(["x", None], pa.string()),
            "b": pa.array([None, 2], pa.int64()),
            "c": pa.array([None, 5], pa.timestamp("ns")),
        }
    )
    chdb_store.insert_arrow("t", data)
    in_place = chdb_store.query("SELECT * FROM t ORDER BY b").rows
    chdb_store.query("TRUNCATE TABLE t")
    _as_stream(chdb_store)("t", data)
    assert chdb_store.query("SELECT * FROM t ORDER BY b").rows == in_place
    assert in_place[0][:2] == ("x", 0)


def _steady_file(folder: Path, requests: int = 300) -> Path:
    simulate_api = pytest.importorskip("reference_pipeline.simulate.api")
    path = folder / "steady.jsonl"
    simulate_api.simulate_to_file(path, "steady", requests, 3)
    return path


SPANS_OF = (
    "SELECT * EXCEPT ResourceAttributes, mapFilter((k, v) -> k != 'tailscope.run', ResourceAttributes) "
    "FROM otel_traces WHERE ResourceAttributes['tailscope.run'] = {run:String} "
    "ORDER BY TraceId, SpanId"
)
REQUESTS_OF = (
    "SELECT * EXCEPT RunLabel FROM tailscope_requests WHERE RunLabel = {run:String} ORDER BY TraceId"
)
LOOKUP = "SELECT TraceId, min(Start), max(End) FROM otel_traces_trace_id_ts GROUP BY TraceId ORDER BY TraceId"


def _stored(store: ClickHouseStore, run: str) -> tuple[list[Any], list[Any]]:
    return store.query(SPANS_OF, {"run": run}).rows, store.query(REQUESTS_OF, {"run": run}).rows


def test_writing_while_deriving_stores_what_the_sequential_load_did(
    chdb_store: ClickHouseStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _steady_file(tmp_path)
    overlapped = load_paths([path], chdb_store, "overlap")
    lookup = chdb_store.query(LOOKUP).rows
    with monkeypatch.context() as patched:
        patched.setattr(ch_overlap, "possible", lambda *args: False)
        sequential = load_paths([path], chdb_store, "sequential")
    with monkeypatch.context() as patched:  # a run over one derive window: written, then derived
        patched.setattr(ch_write, "PART_SPANS", 1000)
        windowed = load_paths([path], chdb_store, "windowed")
    assert windowed.traces == 300
    assert _stored(chdb_store, "windowed") == _stored(chdb_store, "sequential")
    assert overlapped.spans == sequential.spans > 3000
    assert overlapped.traces == sequential.traces == 300
    spans, requests = _stored(chdb_store, "overlap")
    assert (spans, requests) == _stored(chdb_store, "sequential")
    assert len(requests) == 300
    assert lookup == chdb_store.query(LOOKUP).rows  # the same traces, written three times
    assert not chdb_store.query("SELECT name FROM system.tables WHERE name LIKE '_tailscope_ready_%'").rows


def test_a_new_label_with_spans_already_stored_is_derived_from_all_of_them(
    chdb_store: ClickHouseStore, tmp_path: Path
) -> None:
    path = _steady_file(tmp_path, 100)
    with open(path, "rb") as raw:
        batches = [b.to_arrow() for b in decode_file(raw, str(path), FileResult(path=str(path)), None)]
    for batch in batches:  # spans of the label, but no run defined (a load that stopped part way)
        ch_dedupe.append_spans_once(chdb_store, batch, "late")
    summary = load_paths([path], chdb_store, "late")
    assert summary.traces == 100  # counted in otel_traces: each trace's spans are there twice
    derived = chdb_store.query(REQUESTS_OF, {"run": "late"}).rows
    ch_write.refresh_run(chdb_store, "late")
    assert derived == chdb_store.query(REQUESTS_OF, {"run": "late"}).rows
    assert len(derived) == 100


def test_a_failed_write_defines_no_run_and_stores_no_rows(
    chdb_store: ClickHouseStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _steady_file(tmp_path, 50)

    def failing_write(*args: Any) -> tuple[int, int]:
        raise RuntimeError("disk full")

    monkeypatch.setattr(ch_overlap, "_write", failing_write)
    with pytest.raises(RuntimeError, match="disk full"):
        load_paths([path], chdb_store, "failed")
    assert ch_write.run_selection(chdb_store, "failed") is None
    assert chdb_store.query(SPANS_OF, {"run": "failed"}).rows == []
    assert chdb_store.query(REQUESTS_OF, {"run": "failed"}).rows == []
    assert not chdb_store.query("SELECT name FROM system.tables WHERE name LIKE '_tailscope_ready_%'").rows


def test_a_shared_table_left_by_an_interrupted_load_is_dropped_by_the_next(
    chdb_store: ClickHouseStore, tmp_path: Path
) -> None:
    left = ch_overlap.ready_table(chdb_store)  # as a load killed before its drop leaves it
    load_paths([_steady_file(tmp_path, 20)], chdb_store, "next")
    stale = sql.load("ingest_shared_ready_stale", dialect="clickhouse")
    assert left.startswith("_tailscope_ready_") and chdb_store.query(stale).rows == []
    assert len(chdb_store.query(REQUESTS_OF, {"run": "next"}).rows) == 20
