"""Trace exports built in memory for the hostile-input, property and crash-safety tests.

Good files in every format (OTLP JSON / JSON lines / protobuf, Jaeger UI JSON, Zipkin v2 JSON) and
the malformed or hostile variants of them. Nothing here is committed as a data file: each case is a
function that returns the file's bytes.
"""

from __future__ import annotations

import gzip
import json
import random
import struct
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import Any

import zstandard
from opentelemetry.proto.common.v1 import common_pb2
from opentelemetry.proto.resource.v1 import resource_pb2
from opentelemetry.proto.trace.v1 import trace_pb2

START_NS = 1_700_000_000_000_000_000
TRACE = "5b8efff798038103d269b633813fc60c"


def span_id(i: int) -> str:
    return f"{i + 1:016x}"


# ----------------------------------------------------------------------------------------- OTLP JSON


def otlp_span(i: int, **fields: Any) -> dict[str, Any]:
    span = {
        "traceId": TRACE,
        "spanId": span_id(i),
        "parentSpanId": "" if i == 0 else span_id(0),
        "name": f"op-{i}",
        "kind": 2 if i == 0 else 1,
        "startTimeUnixNano": str(START_NS + i * 1000),
        "endTimeUnixNano": str(START_NS + i * 1000 + 500_000),
        "attributes": [{"key": "i", "value": {"intValue": str(i)}}],
    }
    span.update(fields)
    return span


def otlp_request(spans: list[dict[str, Any]], service: str = "svc") -> dict[str, Any]:
    return {
        "resourceSpans": [
            {
                "resource": {"attributes": [{"key": "service.name", "value": {"stringValue": service}}]},
                "scopeSpans": [{"scope": {"name": "hostile"}, "spans": spans}],
            }
        ]
    }


def otlp_json(count: int = 3, **fields: Any) -> bytes:
    """A pretty-printed OTLP/JSON document of `count` spans (fields override the last span's)."""
    spans = [otlp_span(i) for i in range(count)]
    spans[-1].update(fields)
    return json.dumps(otlp_request(spans), indent=1).encode()


def otlp_jsonl(lines: int = 4, per_line: int = 2, trace: str = TRACE) -> bytes:
    out = []
    for line in range(lines):
        spans = [otlp_span(line * per_line + i, traceId=trace) for i in range(per_line)]
        out.append(json.dumps(otlp_request(spans), separators=(",", ":")))
    return ("\n".join(out) + "\n").encode()


# ------------------------------------------------------------------------------------ OTLP protobuf


def otlp_proto_message(count: int = 3, first: int = 0, trace: str = TRACE) -> trace_pb2.TracesData:
    data = trace_pb2.TracesData()
    resource_spans = data.resource_spans.add()
    resource_spans.resource.CopyFrom(
        resource_pb2.Resource(
            attributes=[
                common_pb2.KeyValue(key="service.name", value=common_pb2.AnyValue(string_value="svc"))
            ]
        )
    )
    scope_spans = resource_spans.scope_spans.add()
    scope_spans.scope.name = "hostile"
    for i in range(first, first + count):
        span = scope_spans.spans.add()
        span.trace_id = bytes.fromhex(trace)
        span.span_id = bytes.fromhex(span_id(i))
        if i:
            span.parent_span_id = bytes.fromhex(span_id(0))
        span.name = f"op-{i}"
        span.kind = trace_pb2.Span.SPAN_KIND_INTERNAL
        span.start_time_unix_nano = START_NS + i * 1000
        span.end_time_unix_nano = START_NS + i * 1000 + 500_000
    return data


def otlp_proto(count: int = 3) -> bytes:
    return otlp_proto_message(count).SerializeToString()


def length_prefixed(*messages: bytes) -> bytes:
    """The Collector file exporter's protobuf stream: <4-byte big-endian length><message> ..."""
    return b"".join(struct.pack(">I", len(m)) + m for m in messages)


# ------------------------------------------------------------------------------- Jaeger and Zipkin


def jaeger_span(i: int, **fields: Any) -> dict[str, Any]:
    span = {
        "traceID": TRACE[16:],
        "spanID": span_id(i),
        "operationName": f"op-{i}",
        "references": []
        if i == 0
        else [{"refType": "CHILD_OF", "traceID": TRACE[16:], "spanID": span_id(0)}],
        "startTime": START_NS // 1000 + i,
        "duration": 500,
        "tags": [{"key": "i", "type": "int64", "value": i}],
        "logs": [],
        "processID": "p1",
    }
    span.update(fields)
    return span


def jaeger(count: int = 3, processes: Any = "default", **fields: Any) -> bytes:
    spans = [jaeger_span(i) for i in range(count)]
    spans[-1].update(fields)
    trace: dict[str, Any] = {"traceID": TRACE[16:], "spans": spans}
    if processes == "default":
        processes = {"p1": {"serviceName": "svc", "tags": []}}
    if processes is not None:
        trace["processes"] = processes
    return json.dumps({"data": [trace]}, indent=1).encode()


def zipkin_span(i: int, **fields: Any) -> dict[str, Any]:
    span = {
        "traceId": TRACE,
        "id": span_id(i),
        "name": f"op-{i}",
        "kind": "SERVER" if i == 0 else "CLIENT",
        "timestamp": START_NS // 1000 + i,
        "duration": 500,
        "localEndpoint": {"serviceName": "svc"},
        "tags": {"i": str(i)},
    }
    if i:
        span["parentId"] = span_id(0)
    span.update(fields)
    return {k: v for k, v in span.items() if v is not None}


def zipkin(count: int = 3, **fields: Any) -> bytes:
    spans = [zipkin_span(i) for i in range(count)]
    spans[-1].update(fields)
    spans[-1] = {k: v for k, v in spans[-1].items() if v is not None}
    return json.dumps(spans, indent=1).encode()


# ------------------------------------------------------------------------------------------- bombs


@cache
def _gzip_member(chunk: bytes) -> bytes:
    return gzip.compress(chunk, 9, mtime=0)


@cache
def _zstd_frame(chunk: bytes) -> bytes:
    return zstandard.ZstdCompressor(level=3).compress(chunk)


def gzip_bomb(prefix: bytes = b"", total: int = 10 << 30, fill: int = 0) -> bytes:
    """A gzip file of `prefix` then `total` bytes of `fill`, as repeated members (valid gzip)."""
    chunk = bytes([fill]) * (1 << 20)
    head = gzip.compress(prefix, mtime=0) if prefix else b""
    return head + _gzip_member(chunk) * (total // len(chunk))


def zstd_bomb(prefix: bytes = b"", total: int = 10 << 30, fill: int = 0) -> bytes:
    """A zstd file of `prefix` then `total` bytes of `fill`, as repeated frames (valid zstd)."""
    chunk = bytes([fill]) * (16 << 20)
    head = zstandard.ZstdCompressor().compress(prefix) if prefix else b""
    return head + _zstd_frame(chunk) * (total // len(chunk))


# ------------------------------------------------------------------------------------------- cases


@dataclass(frozen=True)
class Case:
    """One input. `stored` None: strict mode must reject it whole. An int: it is valid-but-odd and
    loads that many spans. `says`: words the one-line error (or nothing) must contain."""

    name: str
    make: Callable[[], bytes]
    stored: int | None = None
    says: str = ""


def _protobuf_wrong_wire_type() -> bytes:
    # TracesData field 1 (resource_spans) must be length-delimited (wire type 2); send it as a varint.
    return bytes([0x08, 0x96, 0x01]) + otlp_proto(2)


def _protobuf_bad_utf8() -> bytes:
    good = otlp_proto(1)
    return good.replace(b"op-0", b"op\xff\xfe")


def _random(size: int, seed: int) -> bytes:
    return random.Random(seed).randbytes(size)


SPACES = {"total": 1 << 30, "fill": 0x20}

HOSTILE_CASES: list[Case] = [
    # truncated files
    Case("truncated_otlp_json", lambda: otlp_json(5)[:-40]),
    Case("truncated_otlp_jsonl_last_line", lambda: otlp_jsonl(4)[:-30]),
    Case("truncated_otlp_protobuf", lambda: otlp_proto(5)[:-7]),
    Case("truncated_length_prefixed_protobuf", lambda: length_prefixed(otlp_proto(2), otlp_proto(2))[:-9]),
    Case("truncated_gzip", lambda: gzip.compress(otlp_json(50), mtime=0)[:-200]),
    Case("truncated_zstd", lambda: zstandard.ZstdCompressor().compress(otlp_json(50))[:-50]),
    Case("truncated_jaeger", lambda: jaeger(4)[:-25]),
    Case("truncated_zipkin", lambda: zipkin(4)[:-25]),
    # not trace data at all
    Case("csv", lambda: b"trace_id,span_id,name,start,end\n1,2,op,3,4\n"),
    Case("html", lambda: b"<!DOCTYPE html>\n<html><body>502 Bad Gateway</body></html>\n"),
    Case("png_header", lambda: b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(64)),
    Case("zip_header", lambda: b"PK\x03\x04" + _random(500, 3)),
    Case("random_bytes", lambda: _random(4096, 1)),
    Case("nul_bytes", lambda: bytes(4096)),
    Case("gzip_of_csv", lambda: gzip.compress(b"a,b,c\n1,2,3\n" * 100, mtime=0)),
    Case("zstd_of_random_bytes", lambda: zstandard.ZstdCompressor().compress(_random(4096, 2))),
    Case("json_but_not_traces", lambda: b'{"hello": "world", "items": [1, 2, 3]}'),
    Case("json_scalar", lambda: b'"just a string"'),
    Case("empty_file", lambda: b"", says="empty"),
    Case("whitespace_only", lambda: b"  \n\t\r\n   \n", says="empty"),
    # bad ids
    Case("otlp_trace_id_zzz", lambda: otlp_json(traceId="zzz"), says="'zzz'"),
    Case("otlp_trace_id_wrong_length", lambda: otlp_json(traceId=TRACE[:30])),
    Case("otlp_span_id_not_hex", lambda: otlp_json(spanId="xyzxyzxyzxyzxyzx")),
    Case("protobuf_span_id_wrong_length", lambda: _protobuf_span_id_wrong_length()),
    Case("jaeger_span_id_not_hex", lambda: jaeger(spanID="xyz"), says="'xyz'"),
    Case("jaeger_trace_id_too_long", lambda: jaeger(traceID="0" * 33)),
    Case("zipkin_trace_id_too_long", lambda: zipkin(traceId="a" * 33)),
    Case("zipkin_span_without_id", lambda: zipkin(id=None), says="id"),
    # decompression bombs: 10 GiB of zeros (caught at the first bytes: not a trace format), and a JSON
    # start followed by a gigabyte of spaces (caught by the expansion limit or the document cap)
    Case("gzip_bomb_10GiB_zeros", lambda: gzip_bomb()),
    Case("zstd_bomb_10GiB_zeros", lambda: zstd_bomb()),
    Case("zstd_bomb_otlp_json_prefix", lambda: zstd_bomb(b'{"resourceSpans": [', **SPACES)),
    Case("zstd_bomb_jaeger_prefix", lambda: zstd_bomb(b'{"data": [{"traceID": "1", "spans": [', **SPACES)),
    Case("zstd_bomb_zipkin_prefix", lambda: zstd_bomb(b'[{"traceId": "1", "id": "2"}, ', **SPACES)),
    Case("gzip_bomb_otlp_jsonl_prefix", lambda: gzip_bomb(otlp_jsonl(1, 1) + b"{", **SPACES)),
    # hostile structure and values
    Case("deeply_nested_json_array", lambda: b"[" * 100_000 + b"]" * 100_000),
    Case("deeply_nested_otlp_attribute", lambda: _deeply_nested_attribute()),
    Case("deeply_nested_jaeger", lambda: b'{"data": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"),
    Case("otlp_end_before_start", lambda: otlp_json(endTimeUnixNano=str(START_NS - 1)), says="before"),
    Case("otlp_nan_timestamp", lambda: otlp_json(2).replace(f'"{START_NS + 1000}"'.encode(), b"NaN", 1)),
    Case(
        "otlp_infinity_timestamp",
        lambda: otlp_json(2).replace(f'"{START_NS + 1000}"'.encode(), b"Infinity", 1),
    ),
    Case("jaeger_nan_start", lambda: jaeger(2).replace(str(START_NS // 1000 + 1).encode(), b"NaN", 1)),
    Case(
        "zipkin_infinity_duration", lambda: zipkin(2).replace(b'"duration": 500', b'"duration": Infinity', 1)
    ),
    Case("otlp_timestamp_overflows_64_bits", lambda: otlp_json(startTimeUnixNano="99999999999999999999")),
    Case("otlp_negative_timestamp", lambda: otlp_json(startTimeUnixNano="-5")),
    Case("jaeger_start_overflows_int64", lambda: jaeger(startTime=2**64 + 5)),
    Case("zipkin_timestamp_overflows_ns", lambda: zipkin(timestamp=2**62)),
    Case("jaeger_negative_duration", lambda: jaeger(duration=-500), says="negative"),
    Case("zipkin_negative_duration", lambda: zipkin(duration=-1), says="negative"),
    Case("non_utf8_bytes_in_otlp_json", lambda: otlp_json(2).replace(b'"op-1"', b'"op-\xff\xfe"')),
    Case("non_utf8_bytes_in_zipkin", lambda: zipkin(2).replace(b'"op-1"', b'"op-\xc3\x28"')),
    Case("invalid_utf8_in_protobuf_string", _protobuf_bad_utf8),
    Case("protobuf_length_prefix_larger_than_file", lambda: struct.pack(">I", 1 << 20) + otlp_proto(2)),
    Case("protobuf_wrong_wire_type", _protobuf_wrong_wire_type),
    Case("jaeger_missing_processes", lambda: jaeger(processes=None), says="processes"),
    Case("jaeger_unknown_process_id", lambda: jaeger(processID="p7"), says="'p7'"),
    Case("jsonl_garbage_line_in_the_middle", lambda: _jsonl_with_garbage_line(), says="line 3"),
    Case("otlp_unknown_span_kind", lambda: otlp_json(kind=99)),
    Case(
        "otlp_event_name_not_a_string", lambda: otlp_json(events=[{"timeUnixNano": str(START_NS), "name": 5}])
    ),
    Case("otlp_status_message_not_a_string", lambda: otlp_json(status={"code": 2, "message": ["x"]})),
    Case("otlp_trace_state_not_a_string", lambda: otlp_json(traceState={"k": "v"})),
    Case("otlp_span_name_object", lambda: otlp_json(name={"a": 1})),
    Case("otlp_jsonl_event_name_not_a_string", lambda: _jsonl_event_name_number()),
    Case("otlp_jsonl_null_attribute", lambda: _jsonl_null_attribute()),
    Case("otlp_scope_name_not_a_string", lambda: otlp_json(2).replace(b'"name": "hostile"', b'"name": 7')),
    Case(
        "otlp_link_trace_state_not_a_string",
        lambda: otlp_json(links=[{"traceId": TRACE, "spanId": span_id(0), "traceState": 1}]),
    ),
    Case(
        "jaeger_start_plus_duration_overflows",
        lambda: jaeger(startTime=(2**63 - 1) // 1000 - 1, duration=10**9),
    ),
    Case("zipkin_unknown_kind", lambda: zipkin(kind="SIDEWAYS")),
    Case("trailing_garbage_after_document", lambda: jaeger(2) + b"\n}}}garbage"),
    # valid but odd: documented outcomes
    Case("duplicate_spans_kept_once", lambda: otlp_jsonl(2, 2) + otlp_jsonl(2, 2), stored=4),
    Case("json_with_bom_otlp", lambda: b"\xef\xbb\xbf" + otlp_json(3), stored=3),
    Case("json_with_bom_jaeger", lambda: b"\xef\xbb\xbf" + jaeger(3), stored=3),
    Case("json_with_bom_zipkin", lambda: b"\xef\xbb\xbf" + zipkin(3), stored=3),
    Case("megabyte_attribute_value", lambda: otlp_json(2, attributes=_big_attribute()), stored=2),
    Case("zipkin_span_without_timestamp", lambda: zipkin(2, timestamp=None, duration=None), stored=2),
    Case("jaeger_repeated_span_id_with_other_content", lambda: _jaeger_repeated_id(), stored=3),
]


def _protobuf_span_id_wrong_length() -> bytes:
    data = otlp_proto_message(2)
    data.resource_spans[0].scope_spans[0].spans[1].span_id = b"\x01\x02\x03"
    return data.SerializeToString()


def _deeply_nested_attribute() -> bytes:
    value = '{"kvlistValue": {"values": [{"key": "a", "value": ' * 100 + "{}" + "}]}}" * 100
    document = otlp_json(2).decode()
    marker = '"key": "i",'
    at = document.rindex(marker)
    return (document[:at] + f'"key": "deep", "value": {value}}}, {{' + document[at:]).encode()


def _jsonl_with_garbage_line() -> bytes:
    lines = otlp_jsonl(4).splitlines(keepends=True)
    lines[2] = b"{this is not json}\n"
    return b"".join(lines)


def _big_attribute() -> list[dict[str, Any]]:
    return [{"key": "payload", "value": {"stringValue": "x" * (1 << 20)}}]


def _jaeger_repeated_id() -> bytes:
    spans = [
        jaeger_span(0),
        jaeger_span(1),
        jaeger_span(1, operationName="other", startTime=START_NS // 1000 + 9),
    ]
    return json.dumps(
        [{"traceID": TRACE[16:], "spans": spans, "processes": {"p1": {"serviceName": "s"}}}]
    ).encode()


def _jsonl_event_name_number() -> bytes:
    request = otlp_request([otlp_span(0), otlp_span(1, events=[{"timeUnixNano": str(START_NS), "name": 5}])])
    return (json.dumps(request, separators=(",", ":")) + "\n").encode()


def _jsonl_null_attribute() -> bytes:
    request = otlp_request([otlp_span(0), otlp_span(1, attributes=[None])])
    return (json.dumps(request, separators=(",", ":")) + "\n").encode()
