"""OTLP/JSON decoding: every accepted shape, ids, enums, errors with positions, and the fast path
agreeing with the reference decoder."""

from __future__ import annotations

import io
import json
from typing import Any

import pyarrow as pa
import pytest

from ingest import otlp_fast, otlp_json
from ingest.columns import SpanColumns
from ingest.errors import DecodeError

TRACE = "5b8efff798038103d269b633813fc60c"
SPAN = "eee19b7ec3c1b174"
PARENT = "eee19b7ec3c1b173"


def span(**overrides: Any) -> dict[str, Any]:
    base = {
        "traceId": TRACE,
        "spanId": SPAN,
        "parentSpanId": PARENT,
        "name": "model.forward",
        "kind": 2,
        "startTimeUnixNano": "1544712660000000000",
        "endTimeUnixNano": "1544712661000000000",
        "attributes": [{"key": "batch.size", "value": {"intValue": "8"}}],
        "status": {"code": 2, "message": "boom"},
    }
    base.update(overrides)
    return base


def request(*spans: dict[str, Any], resource: list | None = None) -> dict[str, Any]:
    attributes = (
        resource if resource is not None else [{"key": "service.name", "value": {"stringValue": "api"}}]
    )
    return {
        "resourceSpans": [
            {
                "resource": {"attributes": attributes},
                "scopeSpans": [{"scope": {"name": "lib", "version": "1.0"}, "spans": list(spans)}],
            }
        ]
    }


def decode(data: bytes, source: str = "t.json", on_bad: Any = None) -> SpanColumns:
    out = SpanColumns()
    for batch in otlp_json.decode(io.BytesIO(data), source, on_bad):
        out.extend(batch)
    return out


def test_one_request_decodes_every_field() -> None:
    event = {
        "timeUnixNano": "1544712660500000000",
        "name": "gc",
        "attributes": [{"key": "gen", "value": {"intValue": 2}}],
    }
    link = {
        "traceId": TRACE.upper(),
        "spanId": PARENT,
        "traceState": "a=b",
        "attributes": [{"key": "k", "value": {"boolValue": True}}],
    }
    data = json.dumps(request(span(events=[event], links=[link], traceState="x=1"))).encode()
    [row] = decode(data).rows()
    assert row == {
        "timestamp_ns": 1544712660000000000,
        "trace_id": TRACE,
        "span_id": SPAN,
        "parent_span_id": PARENT,
        "trace_state": "x=1",
        "span_name": "model.forward",
        "span_kind": "Server",
        "service_name": "api",
        "resource_attributes": {"service.name": "api"},
        "scope_name": "lib",
        "scope_version": "1.0",
        "span_attributes": {"batch.size": "8"},
        "duration_ns": 1_000_000_000,
        "status_code": "Error",
        "status_message": "boom",
        "events": [(1544712660500000000, "gc", {"gen": "2"})],
        "links": [(TRACE, PARENT, "a=b", {"k": "true"})],
    }


def _snake(value: Any) -> Any:
    if isinstance(value, dict):
        out = {}
        for key, inner in value.items():
            snake = "".join("_" + c.lower() if c.isupper() else c for c in key)
            out[snake] = _snake(inner)
        return out
    if isinstance(value, list):
        return [_snake(item) for item in value]
    return value


def _legacy(req: dict) -> dict:
    rs = req["resourceSpans"][0]
    ss = rs.pop("scopeSpans")[0]
    rs["instrumentationLibrarySpans"] = [{"instrumentationLibrary": ss["scope"], "spans": ss["spans"]}]
    return req


@pytest.mark.parametrize(
    "shape",
    [
        lambda r: json.dumps(r, indent=2),
        lambda r: json.dumps(r) + "\n" + json.dumps(r) + "\n",
        lambda r: json.dumps([r, r]),
        lambda r: json.dumps({"result": r}, indent=1),
        lambda r: json.dumps({"batches": r["resourceSpans"]}),
        lambda r: json.dumps(_legacy(r)),
        lambda r: json.dumps(_snake(r)),
    ],
    ids=["document", "json-lines", "array", "result", "batches", "legacy", "snake_case"],
)
def test_every_container_shape_gives_the_same_span(shape: Any) -> None:
    columns = decode(shape(request(span())).encode())
    assert len(columns) >= 1
    assert set(columns.span_id) == {SPAN}
    assert columns.scope_name[0] == "lib" and columns.span_attributes[0] == {"batch.size": "8"}


def test_protojson_spelling_base64_ids_enum_names_numbers() -> None:
    data = json.dumps(
        request(
            span(
                traceId="aYQql5kRA2zz6CIIbsqgBw==",
                spanId="Wmn8F4uo+Dc=",
                parentSpanId="",
                kind="SPAN_KIND_CLIENT",
                startTimeUnixNano=1544712660000000000,
                endTimeUnixNano=1544712660000000001,
                status={"code": "STATUS_CODE_OK"},
            )
        )
    ).encode()
    [row] = decode(data).rows()
    assert (row["trace_id"], row["span_id"], row["parent_span_id"]) == (
        "69842a979911036cf3e822086ecaa007",
        "5a69fc178ba8f837",
        "",
    )
    assert (row["span_kind"], row["status_code"], row["duration_ns"]) == ("Client", "Ok", 1)


def test_empty_ids_get_one_synthetic_trace_per_file_and_stable_span_ids() -> None:
    line = json.dumps(
        request(span(traceId="", spanId="", parentSpanId=""), span(traceId="", spanId="", name="b"))
    )
    data = (line + "\n" + line + "\n").encode()
    first, again = decode(data, "dir/a.jsonl"), decode(data, "other/a.jsonl")
    assert len(set(first.trace_id)) == 1 and len(first.trace_id[0]) == 32
    assert len(set(first.span_id)) == 4
    assert first.span_id == again.span_id  # same file name: same ids, so re-ingesting dedupes
    assert decode(data, "b.jsonl").trace_id[0] != first.trace_id[0]


def test_resource_without_service_name_is_unknown_service() -> None:
    [row] = decode(json.dumps(request(span(), resource=[])).encode()).rows()
    assert row["service_name"] == "unknown_service"


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        (span(endTimeUnixNano="1544712659000000000"), "ends before it starts"),
        (span(traceId="zzz"), "neither 32-char hex nor base64"),
        (span(kind=42), "unknown span kind"),
        (span(attributes=[{"key": "x", "value": {"doubleValue": "NaN"}}]), "not a finite number"),
        (span(startTimeUnixNano="99999999999999999999"), "out of range"),
    ],
)
def test_bad_record_names_file_line_and_what(bad: dict, message: str) -> None:
    data = (json.dumps(request(span())) + "\n\n" + json.dumps(request(bad)) + "\n").encode()
    with pytest.raises(DecodeError, match=message) as caught:
        decode(data, "f.jsonl")
    assert str(caught.value).startswith("f.jsonl: line 3: ")
    skipped: list[DecodeError] = []
    assert len(decode(data, "f.jsonl", skipped.append)) == 1
    assert [e.position for e in skipped] == ["line 3"]


@pytest.mark.parametrize(
    ("data", "position"),
    [
        (b'{"resourceSpans": []}\n{"resourceSpans": [}\n', "line 2"),
        (b'{"resourceSpans": []}\n{"resourceSpans": "\xff\xfe"}\n', "line 2"),
        (b'{"resourceSpans": [NaN]}\n', "line 1"),
        (b"[" * 5000 + b"]" * 5000 + b"\n", "line 1"),
        (b'{\n  "resourceSpans": [\n   }\n', "line 3"),
    ],
    ids=["syntax", "non-utf8", "nan", "deep-nesting", "document-syntax"],
)
def test_malformed_json_is_a_decode_error_with_position(data: bytes, position: str) -> None:
    with pytest.raises(DecodeError) as caught:
        decode(data, "f.json")
    assert caught.value.position == position


def test_line_length_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(otlp_json, "MAX_LINE_BYTES", 1000)
    big = json.dumps(request(span(attributes=[{"key": "v", "value": {"stringValue": "x" * 900}}])))
    with pytest.raises(DecodeError, match="longer than"):
        decode((big + "\n").encode())
    with pytest.raises(DecodeError, match="longer than"):
        list(otlp_fast.decode(io.BytesIO((big + "\n").encode()), "f"))


def test_megabyte_attribute_values_are_kept() -> None:
    value = "v" * (1 << 20)
    data = json.dumps(request(span(attributes=[{"key": "big", "value": {"stringValue": value}}]))).encode()
    assert decode(data).span_attributes[0]["big"] == value


def test_decode_request_is_strict_and_returns_one_batch() -> None:
    assert (
        len(otlp_json.decode_request(json.dumps(request(span(), span(spanId=PARENT))).encode(), "req")) == 2
    )
    with pytest.raises(DecodeError, match="req: body"):
        otlp_json.decode_request(b"{not json", "req")
    with pytest.raises(DecodeError, match="ends before"):
        otlp_json.decode_request(json.dumps(request(span(endTimeUnixNano="1"))).encode(), "req")


# ------------------------------------------------------------------ fast path = reference decoder


def _table(batches: list) -> list[dict]:
    tables = [batch.to_arrow() for batch in batches]
    rows = []
    for table in tables:
        for column in range(table.num_columns):  # undo the fast path's dictionary encoding
            field = table.schema.field(column)
            if pa.types.is_dictionary(field.type):
                chunked = table.column(column).combine_chunks()
                table = table.set_column(column, field.name, chunked.dictionary.take(chunked.indices))
        rows.extend(table.to_pylist())
    return sorted(rows, key=lambda r: (r["TraceId"], r["SpanId"], r["SpanName"]))


def test_fast_path_matches_reference_on_mixed_lines() -> None:
    lines = [
        request(span(), span(spanId=PARENT, parentSpanId="", kind=1, status={})),
        request(span(spanId="AAAAAAAAAAAAAAAA")),  # uppercase: passed to the reference decoder
        _snake(request(span(spanId="1111111111111111"))),
        request(
            span(
                spanId="2222222222222222",
                traceId="",
                attributes=[
                    {"key": "arr", "value": {"arrayValue": {"values": [{"doubleValue": 1.0}]}}},
                    {"key": "b", "value": {"bytesValue": "AQID"}},
                    {"key": "e", "value": {}},
                ],
            )
        ),
        request(
            span(
                spanId="3333333333333333",
                events=[{"timeUnixNano": "5", "name": "e"}],
                links=[{"traceId": TRACE, "spanId": SPAN}],
            )
        ),
    ]
    data = "\n".join(json.dumps(line) for line in lines).encode() + b"\n"
    fast = list(otlp_fast.decode(io.BytesIO(data), "m.jsonl"))
    reference = list(otlp_json.decode(io.BytesIO(data), "m.jsonl"))
    assert any(isinstance(batch, otlp_fast.ArrowSpans) for batch in fast)
    assert _table(fast) == _table(reference)


def test_fast_path_reports_bad_lines_like_the_reference() -> None:
    data = (
        json.dumps(request(span())) + "\n" + json.dumps(request(span(endTimeUnixNano="0"))) + "\n"
    ).encode()
    with pytest.raises(DecodeError, match=r"line 2: .*ends before it starts"):
        list(otlp_fast.decode(io.BytesIO(data), "f.jsonl"))
    skipped: list[DecodeError] = []
    batches = list(otlp_fast.decode(io.BytesIO(data), "f.jsonl", skipped.append))
    assert sum(len(b) for b in batches) == 1 and len(skipped) == 1


def test_is_json_lines_tells_documents_from_lines() -> None:
    assert otlp_fast.is_json_lines(b'{"resourceSpans":[]}\n{"resourceSpans":[]}\n')
    assert otlp_fast.is_json_lines(b'{"resourceSpans":[}\n')
    assert not otlp_fast.is_json_lines(b'{\n  "resourceSpans": []\n}\n')
