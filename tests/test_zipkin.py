"""Zipkin v2 JSON decoder: small hand-built spans in, normalised spans out."""

from __future__ import annotations

import io
from typing import Any

import orjson
import pytest

from ingest import zipkin
from ingest.errors import DecodeError

TRACE = "463ac35c9f6413ad"
PADDED_TRACE = "0000000000000000463ac35c9f6413ad"


def span(span_id: str = "a2fb4a1d1a96d312", **fields: Any) -> dict[str, Any]:
    base = {
        "traceId": TRACE,
        "id": span_id,
        "name": "get /api",
        "kind": "SERVER",
        "timestamp": 1_700_000_000_000_001,
        "duration": 250,
        "localEndpoint": {"serviceName": "frontend", "ipv4": "10.0.0.1", "port": 8080},
    }
    base.update(fields)
    return {k: v for k, v in base.items() if v is not None}


def decode(document: Any, on_bad: Any = None) -> list[dict[str, Any]]:
    data = document if isinstance(document, bytes) else orjson.dumps(document)
    return [row for batch in zipkin.decode(io.BytesIO(data), "z.json", on_bad) for row in batch.rows()]


def test_a_span_is_normalised() -> None:
    (row,) = decode([span(parentId="00000000000000AA", tags={"http.method": "GET"})])
    assert row["trace_id"] == PADDED_TRACE
    assert row["span_id"] == "a2fb4a1d1a96d312"
    assert row["parent_span_id"] == "00000000000000aa"
    assert row["timestamp_ns"] == 1_700_000_000_000_001_000
    assert row["duration_ns"] == 250_000
    assert row["span_kind"] == "Server"
    assert row["service_name"] == "frontend"
    assert row["resource_attributes"] == {
        "service.name": "frontend",
        "net.host.ip": "10.0.0.1",
        "net.host.port": "8080",
    }
    assert row["span_attributes"] == {"http.method": "GET"}
    assert row["status_code"] == "Unset"


def test_128_bit_trace_ids_are_kept_and_uppercase_is_lowered() -> None:
    (row,) = decode([span(traceId="5AAB74DBB904746BB33447BAAE403ED6")])
    assert row["trace_id"] == "5aab74dbb904746bb33447baae403ed6"


def test_service_name_is_kept_as_given() -> None:
    (row,) = decode([span(localEndpoint={"serviceName": "mobile_api"})])
    assert row["service_name"] == "mobile_api"


@pytest.mark.parametrize(
    ("kind", "expected"),
    [
        ("CLIENT", "Client"),
        ("SERVER", "Server"),
        ("PRODUCER", "Producer"),
        ("CONSUMER", "Consumer"),
        (None, "Unspecified"),
    ],
)
def test_kinds(kind: str | None, expected: str) -> None:
    (row,) = decode([span(kind=kind)])
    assert row["span_kind"] == expected


def test_remote_endpoint_becomes_peer_attributes() -> None:
    (row,) = decode([span(remoteEndpoint={"serviceName": "db", "ipv6": "::1", "port": 5432})])
    assert row["span_attributes"] == {"peer.service": "db", "net.peer.ip": "::1", "net.peer.port": "5432"}


def test_annotations_become_events() -> None:
    annotations = [
        {"timestamp": 1_700_000_000_000_010, "value": "wr"},
        {"timestamp": 1_700_000_000_000_020, "value": "ws"},
    ]
    (row,) = decode([span(annotations=annotations)])
    assert row["events"] == [(1_700_000_000_000_010_000, "wr", {}), (1_700_000_000_000_020_000, "ws", {})]


@pytest.mark.parametrize(
    ("tags", "status", "message"),
    [
        ({"error": "Connection refused"}, "Error", "Connection refused"),
        ({"error": "true"}, "Error", ""),
        ({"error": ""}, "Error", ""),
        ({"otel.status_code": "ERROR", "otel.status_description": "boom", "error": "boom"}, "Error", "boom"),
        ({"otel.status_code": "OK"}, "Ok", ""),
        ({"http.status_code": "500"}, "Unset", ""),
    ],
)
def test_error_tags_set_the_status(tags: dict[str, str], status: str, message: str) -> None:
    (row,) = decode([span(tags=tags)])
    assert (row["status_code"], row["status_message"]) == (status, message)


def test_shared_server_half_gets_a_fresh_id_and_the_client_half_as_parent() -> None:
    client = span(
        "74280ae0c10d8062", kind="CLIENT", parentId="bf396325699c84bf", localEndpoint={"serviceName": "a"}
    )
    server = span(
        "74280ae0c10d8062",
        kind="SERVER",
        parentId="bf396325699c84bf",
        shared=True,
        localEndpoint={"serviceName": "b"},
    )
    child_in_server = span(
        "43210ae0c10d1234", kind=None, parentId="74280ae0c10d8062", localEndpoint={"serviceName": "b"}
    )
    rows = {(r["span_kind"], r["service_name"]): r for r in decode([child_in_server, server, client])}
    server_id = zipkin.shared_server_id(PADDED_TRACE, "74280ae0c10d8062")
    assert rows["Client", "a"]["span_id"] == "74280ae0c10d8062"
    assert rows["Server", "b"]["span_id"] == server_id
    assert rows["Server", "b"]["parent_span_id"] == "74280ae0c10d8062"
    assert rows["Unspecified", "b"]["parent_span_id"] == server_id, (
        "the server's child hangs under the server half"
    )
    assert len(server_id) == 16 and server_id != "74280ae0c10d8062"


def test_the_shared_id_is_deterministic() -> None:
    document = [span(kind="CLIENT"), span(shared=True)]
    assert decode(document) == decode(document)


def test_missing_timestamp_and_duration_come_from_annotations() -> None:
    annotations = [
        {"timestamp": 1_615_821_510_040_000, "value": "sr", "endpoint": {"serviceName": "baz"}},
        {"timestamp": 1_615_821_510_041_000, "value": "ss", "endpoint": {"serviceName": "baz"}},
    ]
    given = span(timestamp=None, duration=None, kind=None, localEndpoint=None, annotations=annotations)
    given["binaryAnnotations"] = [{"key": "http.path", "value": "/x"}]
    (row,) = decode([given])
    assert row["timestamp_ns"] == 1_615_821_510_040_000_000
    assert row["duration_ns"] == 1_000_000
    assert row["service_name"] == "baz"
    assert row["span_kind"] == "Server"
    assert row["span_attributes"] == {"http.path": "/x"}


def test_missing_timestamp_without_annotations_keeps_the_span_at_zero() -> None:
    (row,) = decode([span(timestamp=None, duration=None, localEndpoint=None)])
    assert (row["timestamp_ns"], row["duration_ns"], row["service_name"]) == (0, 0, "unknown_service")


def test_array_of_traces_is_flattened() -> None:
    rows = decode([[span("01"), span("02")], [span("03", traceId="01")]])
    assert [r["span_id"][-1] for r in rows] == ["1", "2", "3"]


def test_duplicate_spans_are_kept() -> None:
    assert len(decode([span(), span()])) == 2


@pytest.mark.parametrize(
    ("bad_span", "message"),
    [
        (span(id=None), "id must be a hex string"),
        (span(traceId="zzz"), "traceId 'zzz' is not hexadecimal"),
        (span(traceId="0" * 33), "longer than 32"),
        (span(parentId="xyz"), "parentId 'xyz' is not hexadecimal"),
        (span(duration=-1), "duration -1 is negative"),
        (span(timestamp=18446744073709551615), "out of range"),
        (span(kind="SIDEWAYS"), "kind 'SIDEWAYS'"),
        (span(tags=["a"]), "tags must be an object"),
        (span(name=5), "name must be a string"),
        (span(annotations=[{"value": "x"}]), "annotation timestamp must be a number"),
        ([1], "a span must be an object"),
    ],
)
def test_a_malformed_span_names_its_position_in_strict_mode(bad_span: Any, message: str) -> None:
    with pytest.raises(DecodeError) as caught:
        decode([span(), bad_span])
    assert caught.value.position == "span 2"
    assert message in caught.value.message


def test_with_on_bad_a_malformed_span_is_reported_and_skipped() -> None:
    reported: list[DecodeError] = []
    rows = decode([span("01"), span(id=None), span("03")], reported.append)
    assert [r["span_id"] for r in rows] == ["0000000000000001", "0000000000000003"]
    assert [e.position for e in reported] == ["span 2"]


@pytest.mark.parametrize("data", [b"[", b"", b'{"spans": []}', b"[1, 2", b'"text"'])
def test_file_level_errors(data: bytes) -> None:
    with pytest.raises(DecodeError) as caught:
        decode(data, on_bad=lambda error: None)
    assert str(caught.value).startswith("z.json: ")
