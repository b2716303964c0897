"""Triton's own trace file (trace mode `triton`, TIMESTAMPS): one trace per request, ensemble members
nested, timestamps as events that the Triton phase rules turn into stages."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from ingest import detect, triton_trace
from ingest.errors import DecodeError
from ingest.loader import load_paths
from tailscope.analysis import Filter, waterfall
from tailscope.store.duckdb.connection import connect_reader
from tailscope.store.duckdb.store import DuckDBStore as Store

FIXTURE = Path(__file__).parent / "fixtures" / "frameworks" / "triton_trace.json"


def decode(records: list, on_bad=None) -> dict:
    data = json.dumps(records).encode()
    batches = list(triton_trace.decode(io.BytesIO(data), "trace.json", on_bad))
    return {k: v for b in batches for k, v in b.to_arrow().to_pydict().items()} if batches else {}


def stamps(rid: int, *pairs) -> list[dict]:
    return [{"id": rid, "timestamps": [{"name": n, "ns": ns}]} for n, ns in pairs]


def test_detected_and_ensemble_members_nested_under_their_ensemble() -> None:
    head = FIXTURE.read_bytes()[:65536]
    assert detect.detect(head) == "triton_trace"
    records = [
        {"id": 7, "model_name": "pipeline", "model_version": 1},
        {"id": 8, "model_name": "resnet50", "model_version": 2, "parent_id": 7},
        *stamps(
            8,
            ("REQUEST_START", 1_200),
            ("QUEUE_START", 1_300),
            ("COMPUTE_START", 2_000),
            ("REQUEST_END", 9_000),
        ),
        *stamps(7, ("HTTP_RECV_START", 1_000), ("HTTP_SEND_END", 10_000)),
    ]
    cols = decode(records)
    by_name = {name: i for i, name in enumerate(cols["SpanName"])}
    ensemble, member = by_name["pipeline"], by_name["resnet50"]
    assert cols["ParentSpanId"][ensemble] == "" and cols["SpanKind"][ensemble] == "Server"
    assert cols["ParentSpanId"][member] == cols["SpanId"][ensemble] and cols["SpanKind"][member] == "Internal"
    assert cols["TraceId"][member] == cols["TraceId"][ensemble]
    assert (cols["Duration"][ensemble], cols["Duration"][member]) == (9_000, 7_800)
    events = json.loads(cols["Events"][member])
    assert [e["Name"] for e in events] == ["REQUEST_START", "QUEUE_START", "COMPUTE_START", "REQUEST_END"]
    assert json.loads(cols["SpanAttributes"][member])["model_version"] == "2"


def test_a_grpc_request_starts_when_it_has_been_read() -> None:
    records = [
        {"id": 1, "model_name": "m"},
        *stamps(
            1,
            ("GRPC_WAITREAD_START", 0),
            ("GRPC_WAITREAD_END", 20_000),
            ("REQUEST_START", 20_500),
            ("GRPC_SEND_END", 30_000),
        ),
    ]
    cols = decode(records)
    assert cols["Duration"] == [10_000]
    assert json.loads(cols["SpanAttributes"][0])["triton.protocol"] == "grpc"


def test_bad_records_are_named() -> None:
    records = [
        {"id": 1, "model_name": "m"},
        *stamps(1, ("REQUEST_START", 5)),
        {"id": "two", "timestamps": []},
    ]
    with pytest.raises(DecodeError, match=r"^trace.json: record 3: id must be an integer, not a string$"):
        decode(records)
    bad: list = []
    assert decode(records, bad.append)["SpanName"] == ["m"] and len(bad) == 1
    with pytest.raises(DecodeError, match="expected a JSON array"):
        list(triton_trace.decode(io.BytesIO(b'{"id": 1}'), "trace.json", None))


def test_the_fixture_ingests_once_and_its_stages_add_up(tmp_path) -> None:
    db = tmp_path / "store.duckdb"
    for _ in range(2):  # loading the same file again adds nothing: ids are deterministic
        summary = load_paths([FIXTURE], db, "triton")
        assert not [f.error for f in summary.files if f.error]
    with connect_reader(db) as conn:
        assert conn.execute("SELECT SpanCount, TraceCount FROM runs").fetchone() == (28, 20)
        assert conn.execute(
            "SELECT bool_and(ingress_ns + queue_ns + parsing_ns + feature_hydration_ns + preprocessing_ns"
            " + model_forward_ns + postprocessing_ns + downstream_ns + serialization_ns + unattributed_ns"
            " = Duration), max(unattributed_ns::DOUBLE / Duration) FROM requests"
        ).fetchone()[0]
        unattributed = conn.execute(
            "SELECT max(unattributed_ns::DOUBLE / Duration) FROM requests"
        ).fetchone()[0]
    assert unattributed < 0.1  # Triton accounts for nearly all of a request
    body = {s.stage: s.mean_ms for s in waterfall(Store(db), Filter(run="triton"), "p50").stages}
    assert body["model_forward"] > 5 and body["preprocessing"] >= 2.2 and body["queue"] < 1
    tail = {s.stage: s for s in waterfall(Store(db), Filter(run="triton"), "p90").stages}
    assert tail["queue"].tail_excess_share > 0.9


def test_a_file_copied_while_triton_runs_has_no_closing_bracket() -> None:
    records = [{"id": 1, "model_name": "m"}, *stamps(1, ("REQUEST_START", 5), ("REQUEST_END", 9))]
    text = "[\n" + ",\n".join(json.dumps(r) for r in records) + ",\n"
    batches = list(triton_trace.decode(io.BytesIO(text.encode()), "trace.json", None))
    assert batches[0].to_arrow().column("Duration").to_pylist() == [4]
    with pytest.raises(DecodeError, match="invalid JSON"):
        list(triton_trace.decode(io.BytesIO(b'[{"id": 1, "model_'), "trace.json", None))
