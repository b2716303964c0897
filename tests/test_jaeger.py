"""Jaeger UI JSON decoder: small hand-built traces in, normalised spans out."""

from __future__ import annotations

import io
from typing import Any

import orjson
import pytest

from ingest import jaeger
from ingest.errors import DecodeError


def span(span_id: str = "0000000000000002", **fields: Any) -> dict[str, Any]:
    base = {
        "traceID": "00000000000000a1",
        "spanID": span_id,
        "operationName": "op",
        "references": [],
        "startTime": 1_700_000_000_000_001,
        "duration": 250,
        "tags": [],
        "logs": [],
        "processID": "p1",
        "warnings": None,
    }
    base.update(fields)
    return base


def trace(*spans: dict[str, Any], processes: Any = None) -> dict[str, Any]:
    if processes is None:
        processes = {
            "p1": {"serviceName": "frontend", "tags": [{"key": "host", "type": "string", "value": "h1"}]}
        }
    return {"traceID": "00000000000000a1", "spans": list(spans), "processes": processes}


def decode(document: Any, on_bad: Any = None) -> list[dict[str, Any]]:
    data = document if isinstance(document, bytes) else orjson.dumps(document)
    return [row for batch in jaeger.decode(io.BytesIO(data), "t.json", on_bad) for row in batch.rows()]


def test_data_wrapper_bare_array_and_single_trace_decode_alike() -> None:
    given = trace(span())
    wrapped, bare, single = decode({"data": [given]}), decode([given]), decode(given)
    assert wrapped == bare == single
    assert len(wrapped) == 1


def test_ids_are_padded_lowercase_and_times_become_nanoseconds() -> None:
    rows = decode(trace(span("ABC", traceID="00000000000000A1")))
    (row,) = rows
    assert row["trace_id"] == "000000000000000000000000000000a1"
    assert row["span_id"] == "0000000000000abc"
    assert row["timestamp_ns"] == 1_700_000_000_000_001_000
    assert row["duration_ns"] == 250_000


def test_process_gives_service_name_and_resource_attributes() -> None:
    (row,) = decode(trace(span()))
    assert row["service_name"] == "frontend"
    assert row["resource_attributes"] == {"host": "h1", "service.name": "frontend"}


def test_inline_process_is_used_when_there_is_no_processes_map() -> None:
    given = span(processID=None, process={"serviceName": "inline", "tags": []})
    (row,) = decode({"traceID": "a1", "spans": [given]})
    assert row["service_name"] == "inline"


def test_child_of_reference_is_the_parent_and_follows_from_becomes_a_link() -> None:
    refs = [
        {"refType": "CHILD_OF", "traceID": "00000000000000ff", "spanID": "00000000000000ff"},
        {"refType": "CHILD_OF", "traceID": "00000000000000a1", "spanID": "0000000000000001"},
        {"refType": "FOLLOWS_FROM", "traceID": "00000000000000a1", "spanID": "0000000000000009"},
    ]
    (row,) = decode(trace(span(references=refs)))
    assert row["parent_span_id"] == "0000000000000001"
    assert row["links"] == [
        ("000000000000000000000000000000ff", "00000000000000ff", "", {"opentracing.ref_type": "child_of"}),
        (
            "000000000000000000000000000000a1",
            "0000000000000009",
            "",
            {"opentracing.ref_type": "follows_from"},
        ),
    ]


def test_a_lone_follows_from_reference_is_both_parent_and_link() -> None:
    refs = [{"refType": "FOLLOWS_FROM", "traceID": "00000000000000a1", "spanID": "0000000000000007"}]
    (row,) = decode(trace(span(references=refs)))
    assert row["parent_span_id"] == "0000000000000007"
    assert row["links"][0][3] == {"opentracing.ref_type": "follows_from"}


def test_tags_of_every_type_render_as_strings_and_special_tags_become_fields() -> None:
    tags = [
        {"key": "span.kind", "type": "string", "value": "client"},
        {"key": "error", "type": "bool", "value": True},
        {"key": "retries", "type": "int64", "value": 3},
        {"key": "big", "type": "int64", "value": "9223372036854775222"},
        {"key": "ratio", "type": "float64", "value": 0.5},
        {"key": "whole", "type": "float64", "value": 2.0},
        {"key": "cached", "type": "bool", "value": False},
        {"key": "blob", "type": "binary", "value": "AAAwOQ=="},
        {"key": "otel.scope.name", "type": "string", "value": "lib"},
        {"key": "w3c.tracestate", "type": "string", "value": "k=v"},
    ]
    (row,) = decode(trace(span(tags=tags)))
    assert row["span_kind"] == "Client"
    assert row["status_code"] == "Error"
    assert row["scope_name"] == "lib"
    assert row["trace_state"] == "k=v"
    assert row["span_attributes"] == {
        "retries": "3",
        "big": "9223372036854775222",
        "ratio": "0.5",
        "whole": "2",
        "cached": "false",
        "blob": "AAAwOQ==",
    }


def test_otel_status_code_tag_wins_over_error_tag() -> None:
    tags = [
        {"key": "otel.status_code", "type": "string", "value": "OK"},
        {"key": "error", "type": "bool", "value": True},
    ]
    (row,) = decode(trace(span(tags=tags)))
    assert row["status_code"] == "Ok"


def test_otel_status_description_becomes_the_status_message() -> None:
    tags = [
        {"key": "otel.status_code", "type": "string", "value": "ERROR"},
        {"key": "otel.status_description", "type": "string", "value": "boom"},
    ]
    (row,) = decode(trace(span(tags=tags)))
    assert (row["status_code"], row["status_message"]) == ("Error", "boom")


def test_logs_become_events_named_by_their_event_field() -> None:
    logs = [
        {
            "timestamp": 1_700_000_000_000_100,
            "fields": [{"key": "event", "type": "string", "value": "retry"}],
        },
        {"timestamp": 1_700_000_000_000_200, "fields": [{"key": "x", "type": "int64", "value": 1}]},
    ]
    (row,) = decode(trace(span(logs=logs)))
    assert row["events"] == [
        (1_700_000_000_000_100_000, "retry", {}),
        (1_700_000_000_000_200_000, "log", {"x": "1"}),
    ]


def test_unknown_keys_are_ignored() -> None:
    document = {"_comment": "generated", "data": [dict(trace(span()), warnings=["w"], extra={"a": 1})]}
    assert len(decode(document)) == 1


def test_duplicate_span_ids_are_kept() -> None:
    assert len(decode(trace(span(), span()))) == 2


@pytest.mark.parametrize(
    ("bad_span", "message"),
    [
        (span("zzz"), "spanID 'zzz' is not hexadecimal"),
        (span("0" * 17), "longer than 16"),
        (span(duration=-5), "duration -5 is negative"),
        (span(startTime="soon"), "startTime must be a number"),
        (span(startTime=2**63), "out of range"),
        (span(startTime=1.5), "not a whole number"),
        (span(processID="p9"), "processID 'p9' is not in the trace's processes"),
        (span(spanID=None), "spanID must be a hex string"),
        (span(references=[{"refType": "SIBLING_OF", "spanID": "01"}]), "refType 'SIBLING_OF'"),
        (span(tags={"k": "v"}), "tags must be an array"),
        ("not a span", "a span must be an object"),
    ],
)
def test_a_malformed_span_names_trace_and_span_in_strict_mode(bad_span: Any, message: str) -> None:
    with pytest.raises(DecodeError) as caught:
        decode(trace(span(), bad_span))
    assert caught.value.position == "trace 1 span 2"
    assert message in caught.value.message
    assert str(caught.value).startswith("t.json: trace 1 span 2: ")


def test_with_on_bad_a_malformed_span_is_reported_and_skipped() -> None:
    reported: list[DecodeError] = []
    rows = decode({"data": [trace(span("01"), span("zz"), span("03")), "junk"]}, reported.append)
    assert [r["span_id"] for r in rows] == ["0000000000000001", "0000000000000003"]
    assert [e.position for e in reported] == ["trace 1 span 2", "trace 2"]


def test_missing_processes_is_an_error() -> None:
    with pytest.raises(DecodeError, match="processID 'p1' is not in the trace's processes"):
        decode({"traceID": "a1", "spans": [span()]})


@pytest.mark.parametrize(
    ("data", "position"),
    [
        (b'{"data": [', "line 1 column 11"),
        (b"", "byte 0"),
        (b"  \n ", "byte 0"),
        (b'{"traces": []}', "byte 0"),
        (b'{"data": 5}', "data"),
    ],
)
def test_file_level_errors_are_raised_even_with_on_bad(data: bytes, position: str) -> None:
    with pytest.raises(DecodeError) as caught:
        decode(data, on_bad=lambda error: None)
    assert caught.value.position == position


def test_a_byte_order_mark_is_tolerated() -> None:
    assert len(decode(b"\xef\xbb\xbf" + orjson.dumps(trace(span())))) == 1


def test_batches_hold_at_most_batch_spans(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(jaeger, "BATCH_SPANS", 2)
    document = orjson.dumps(trace(*(span(f"{i:016x}") for i in range(1, 6))))
    sizes = [len(b) for b in jaeger.decode(io.BytesIO(document), "t.json")]
    assert sizes == [2, 2, 1]


def anonymized_span(span_id: str, trace_id: str, service: str, parent: str | None = None) -> dict[str, Any]:
    """A span as Jaeger's anonymizer writes it: its own traceID and a `process` object, no processID."""
    refs = [] if parent is None else [{"refType": "CHILD_OF", "traceID": trace_id, "spanID": parent}]
    given = span(span_id, traceID=trace_id, references=refs, processID=None, warnings=["clock skew"])
    del given["processID"]
    tags = [{"key": "ip", "type": "string", "value": "10.0.0.1"}]
    given["process"] = {"serviceName": service, "tags": tags}
    return given


def test_a_bare_array_of_spans_each_with_its_process_decodes() -> None:
    rows = decode(
        [
            anonymized_span("01", "a1", "frontend"),
            anonymized_span("02", "a1", "backend", parent="01"),
            anonymized_span("03", "b2", "frontend"),
        ]
    )
    assert [(r["trace_id"][-2:], r["span_id"][-2:], r["parent_span_id"][-2:]) for r in rows] == [
        ("a1", "01", ""),
        ("a1", "02", "01"),
        ("b2", "03", ""),
    ]
    assert [r["service_name"] for r in rows] == ["frontend", "backend", "frontend"]
    assert rows[1]["resource_attributes"] == {"ip": "10.0.0.1", "service.name": "backend"}


def test_a_malformed_span_in_a_bare_span_array_names_the_span() -> None:
    bad = anonymized_span("03", "a1", "x")
    bad["duration"] = -1
    with pytest.raises(DecodeError) as caught:
        decode([anonymized_span("01", "a1", "x"), anonymized_span("02", "a1", "x"), bad])
    assert caught.value.position == "span 3"
    reported: list[DecodeError] = []
    assert len(decode([anonymized_span("01", "a1", "x"), bad], reported.append)) == 1
    assert [e.position for e in reported] == ["span 2"]


def test_a_bare_span_array_is_detected_and_ingested(tmp_path: Any) -> None:
    from ingest.detect import detect
    from tailscope.cli.main import main

    spans = [anonymized_span("01", "a1", "frontend"), anonymized_span("02", "a1", "db", "01")]
    document = orjson.dumps(spans)
    assert detect(document) == "jaeger"
    path = tmp_path / "anonymized.json"
    path.write_bytes(document)
    assert main(["ingest", str(path), "--db", str(tmp_path / "t.duckdb"), "--run", "anon"]) == 0
    import duckdb

    with duckdb.connect(str(tmp_path / "t.duckdb"), read_only=True) as conn:
        count, traces = conn.execute(
            "SELECT count(*), count(DISTINCT TraceId) FROM otel_traces WHERE RunLabel = 'anon'"
        ).fetchone()
    assert (count, traces) == (2, 1)
