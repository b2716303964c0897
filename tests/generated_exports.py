"""Generated trace exports for the property tests: a small span model, hypothesis strategies that
draw span sets, writers for every format, and what each format's decoder should give back.

`expected_*` say what a format can carry of a span: Jaeger and Zipkin keep µs, Zipkin has no
Internal kind, no links, no scope and no event attributes; Jaeger carries kind, status and scope as
tags.
"""

from __future__ import annotations

import base64
import json
import re
from dataclasses import dataclass, replace
from typing import Any

from hypothesis import strategies as st
from opentelemetry.proto.common.v1 import common_pb2
from opentelemetry.proto.trace.v1 import trace_pb2

from ingest import anyvalue

KINDS = ("Unspecified", "Internal", "Server", "Client", "Producer", "Consumer")
STATUSES = ("Unset", "Ok", "Error")
MAX_START_US = 4_000_000_000_000_000  # year 2096
# ------------------------------------------------------------------------------------ the model


@dataclass(frozen=True)
class Span:
    trace_id: str
    span_id: str
    parent_span_id: str
    name: str
    kind: str
    service: str
    start_ns: int
    duration_ns: int
    status: str
    message: str
    attributes: dict[str, Any]  # str, int, bool or float values
    events: tuple[tuple[int, str, dict[str, str]], ...]
    links: tuple[tuple[str, str, str, dict[str, str]], ...]
    trace_state: str
    scope: tuple[str, str]


def render(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return anyvalue.format_double(value)
    return str(value)


def hex_of(size: int) -> st.SearchStrategy[str]:
    return st.binary(min_size=size, max_size=size).filter(any).map(bytes.hex)


trace_ids = st.one_of(hex_of(16), hex_of(8).map(lambda h: "0" * 16 + h))
names = st.text(max_size=12)
keys = st.text(alphabet="abcxyz_.é日", min_size=1, max_size=6).map(lambda k: "k." + k)
values = st.one_of(
    st.text(max_size=12),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.booleans(),
    st.floats(allow_nan=False, allow_infinity=False),
)
string_maps = st.dictionaries(keys, st.text(max_size=8), max_size=2)


@st.composite
def span_sets(draw: st.DrawFn) -> list[Span]:
    trace_id = draw(trace_ids)
    span_ids = draw(st.lists(hex_of(8), min_size=1, max_size=5, unique=True))
    spans = []
    for i, span_id in enumerate(span_ids):
        start_us = draw(st.integers(0, MAX_START_US))
        status = draw(st.sampled_from(STATUSES))
        spans.append(
            Span(
                trace_id=trace_id,
                span_id=span_id,
                parent_span_id=draw(st.sampled_from(["", *span_ids[:i]])),
                name=draw(names),
                kind=draw(st.sampled_from(KINDS)),
                service=draw(st.text(min_size=1, max_size=8)),
                start_ns=start_us * 1000 + draw(st.integers(0, 999)),
                duration_ns=draw(st.integers(0, 10**13)),
                status=status,
                message=draw(st.text(max_size=8)) if status == "Error" else "",
                attributes=draw(st.dictionaries(keys, values, max_size=4)),
                events=tuple(
                    draw(
                        st.lists(
                            st.tuples(
                                st.integers(0, MAX_START_US * 1000),
                                st.text(min_size=1, max_size=6).filter(lambda n: n != "log"),
                                string_maps,
                            ),
                            max_size=2,
                        )
                    )
                ),
                links=tuple(
                    draw(st.lists(st.tuples(hex_of(16), hex_of(8), st.just(""), string_maps), max_size=2))
                ),
                trace_state=draw(st.sampled_from(["", "a=1", "vendor=x,other=y"])),
                scope=draw(st.tuples(st.text(max_size=6), st.text(max_size=6))),
            )
        )
    return spans


def expected_otlp(span: Span) -> dict[str, Any]:
    return {
        "Timestamp": span.start_ns,
        "TraceId": span.trace_id,
        "SpanId": span.span_id,
        "ParentSpanId": span.parent_span_id,
        "TraceState": span.trace_state,
        "SpanName": span.name,
        "SpanKind": span.kind,
        "ServiceName": span.service,
        "ResourceAttributes": {"service.name": span.service},
        "ScopeName": span.scope[0],
        "ScopeVersion": span.scope[1],
        "SpanAttributes": {k: render(v) for k, v in span.attributes.items()},
        "Duration": span.duration_ns,
        "StatusCode": span.status,
        "StatusMessage": span.message,
        "Events": [(t, n, a) for t, n, a in span.events],
        "Links": [(t, s, ts, a) for t, s, ts, a in span.links],
    }


def in_micros(span: Span) -> Span:
    """What a µs-precision format can carry: times truncated to µs."""
    return replace(
        span,
        start_ns=span.start_ns // 1000 * 1000,
        duration_ns=span.duration_ns // 1000 * 1000,
        events=tuple((t // 1000 * 1000, n, a) for t, n, a in span.events),
    )


def expected_jaeger(span: Span) -> dict[str, Any]:
    row = expected_otlp(in_micros(span))
    row.update(TraceState="", ScopeName=span.scope[0], ScopeVersion=span.scope[1], Links=[])
    return row


# Zipkin v1 core annotations and the span kind they imply (the v1 → v2 conversion's table)
V1_KINDS = {
    "cs": "Client", "cr": "Client", "sr": "Server", "ss": "Server", "ms": "Producer", "mr": "Consumer"
}  # fmt: skip


def expected_zipkin(span: Span) -> dict[str, Any]:
    row = expected_otlp(in_micros(span))
    kind = "Unspecified" if span.kind == "Internal" else span.kind
    if kind == "Unspecified":  # no `kind` written: v1 core annotations (cs, sr, ms, ...) name it
        inferred = {V1_KINDS[n] for _, n, _ in span.events if n in V1_KINDS}
        kind = inferred.pop() if len(inferred) == 1 else kind
    message = "" if span.message.lower() in ("", "true") else span.message
    events = [(t, n, {}) for t, n, _ in row["Events"]]
    row.update(TraceState="", SpanKind=kind, ScopeName="", ScopeVersion="", StatusMessage=message, Links=[])
    row.update(Events=events)
    return row


# ---------------------------------------------------------------------------------- the writers


@dataclass(frozen=True)
class JsonStyle:
    snake: bool
    ids: str  # "hex", "HEX", "base64"
    ints_as_strings: bool
    enum_names: bool
    shape: str  # "document", "lines", "array"


def _id(hex_id: str, style: JsonStyle) -> str:
    if not hex_id:
        return ""
    if style.ids == "base64":
        return base64.b64encode(bytes.fromhex(hex_id)).decode()
    return hex_id.upper() if style.ids == "HEX" else hex_id


def _int(value: int, style: JsonStyle) -> Any:
    return str(value) if style.ints_as_strings else value


def _any_value(value: Any, style: JsonStyle) -> dict[str, Any]:
    if isinstance(value, bool):
        return {"boolValue": value}
    if isinstance(value, int):
        return {"intValue": _int(value, style)}
    if isinstance(value, float):
        return {"doubleValue": value}
    return {"stringValue": value}


def _kvs(attributes: dict[str, Any], style: JsonStyle) -> list[dict[str, Any]]:
    return [{"key": k, "value": _any_value(v, style)} for k, v in attributes.items()]


def otlp_json_span(span: Span, style: JsonStyle) -> dict[str, Any]:
    kind: Any = KINDS.index(span.kind)
    status: Any = STATUSES.index(span.status)
    if style.enum_names:
        kind, status = f"SPAN_KIND_{span.kind.upper()}", f"STATUS_CODE_{span.status.upper()}"
    return {
        "traceId": _id(span.trace_id, style),
        "spanId": _id(span.span_id, style),
        "parentSpanId": _id(span.parent_span_id, style),
        "traceState": span.trace_state,
        "name": span.name,
        "kind": kind,
        "startTimeUnixNano": _int(span.start_ns, style),
        "endTimeUnixNano": _int(span.start_ns + span.duration_ns, style),
        "attributes": _kvs(span.attributes, style),
        "events": [
            {"timeUnixNano": _int(t, style), "name": n, "attributes": _kvs(a, style)}
            for t, n, a in span.events
        ],
        "links": [
            {
                "traceId": _id(t, style),
                "spanId": _id(s, style),
                "traceState": ts,
                "attributes": _kvs(a, style),
            }
            for t, s, ts, a in span.links
        ],
        "status": {"code": status, "message": span.message},
    }


def otlp_json_request(spans: list[Span], style: JsonStyle) -> dict[str, Any]:
    return {
        "resourceSpans": [
            {
                "resource": {"attributes": _kvs({"service.name": span.service}, style)},
                "scopeSpans": [
                    {
                        "scope": {"name": span.scope[0], "version": span.scope[1]},
                        "spans": [otlp_json_span(span, style)],
                    }
                ],
            }
            for span in spans
        ]
    }


_CAMEL = re.compile(r"(?<=[a-z])([A-Z])")


def snake_keys(value: Any) -> Any:
    if isinstance(value, dict):
        return {_CAMEL.sub(r"_\1", k).lower(): snake_keys(v) for k, v in value.items()}
    if isinstance(value, list):
        return [snake_keys(v) for v in value]
    return value


def write_otlp_json(spans: list[Span], style: JsonStyle) -> bytes:
    def shaped(request: dict[str, Any]) -> dict[str, Any]:
        return snake_keys(request) if style.snake else request

    if style.shape == "lines":
        lines = [json.dumps(shaped(otlp_json_request([span], style)), ensure_ascii=False) for span in spans]
        return ("\n".join(lines) + "\n").encode()
    if style.shape == "array":
        return json.dumps([shaped(otlp_json_request([s], style)) for s in spans]).encode()
    return json.dumps(shaped(otlp_json_request(spans, style)), indent=2).encode()


def write_otlp_proto(spans: list[Span]) -> trace_pb2.TracesData:
    def any_value(value: Any) -> common_pb2.AnyValue:
        if isinstance(value, bool):
            return common_pb2.AnyValue(bool_value=value)
        if isinstance(value, int):
            return common_pb2.AnyValue(int_value=value)
        if isinstance(value, float):
            return common_pb2.AnyValue(double_value=value)
        return common_pb2.AnyValue(string_value=value)

    def kvs(attributes: dict[str, Any]) -> list[common_pb2.KeyValue]:
        return [common_pb2.KeyValue(key=k, value=any_value(v)) for k, v in attributes.items()]

    data = trace_pb2.TracesData()
    for span in spans:
        resource_spans = data.resource_spans.add()
        resource_spans.resource.attributes.extend(kvs({"service.name": span.service}))
        scope_spans = resource_spans.scope_spans.add()
        scope_spans.scope.name, scope_spans.scope.version = span.scope
        out = scope_spans.spans.add()
        out.trace_id = bytes.fromhex(span.trace_id)
        out.span_id = bytes.fromhex(span.span_id)
        out.parent_span_id = bytes.fromhex(span.parent_span_id)
        out.trace_state = span.trace_state
        out.name = span.name
        out.kind = KINDS.index(span.kind)
        out.start_time_unix_nano = span.start_ns
        out.end_time_unix_nano = span.start_ns + span.duration_ns
        out.attributes.extend(kvs(span.attributes))
        for t, n, a in span.events:
            out.events.add(time_unix_nano=t, name=n, attributes=kvs(a))
        for t, s, ts, a in span.links:
            out.links.add(
                trace_id=bytes.fromhex(t), span_id=bytes.fromhex(s), trace_state=ts, attributes=kvs(a)
            )
        out.status.code = STATUSES.index(span.status)
        out.status.message = span.message
    return data


JAEGER_TYPES = {bool: "bool", int: "int64", float: "float64", str: "string"}


def write_jaeger(spans: list[Span], wrapped: bool, short_ids: bool) -> bytes:
    def jaeger_id(hex_id: str) -> str:
        return hex_id.lstrip("0") or "0" if short_ids else hex_id

    processes: dict[str, Any] = {}
    out = []
    for span in spans:
        process_id = f"p{len(processes) + 1}"
        processes[process_id] = {"serviceName": span.service, "tags": []}
        tags = [{"key": k, "type": JAEGER_TYPES[type(v)], "value": v} for k, v in span.attributes.items()]
        if span.kind != "Unspecified":
            tags.append({"key": "span.kind", "type": "string", "value": span.kind.lower()})
        if span.status != "Unset":
            tags.append({"key": "otel.status_code", "type": "string", "value": span.status.upper()})
        if span.message:
            tags.append({"key": "otel.status_description", "type": "string", "value": span.message})
        if span.scope[0]:
            tags.append({"key": "otel.scope.name", "type": "string", "value": span.scope[0]})
        if span.scope[1]:
            tags.append({"key": "otel.scope.version", "type": "string", "value": span.scope[1]})
        refs = []
        if span.parent_span_id:
            refs.append(
                {"refType": "CHILD_OF", "traceID": jaeger_id(span.trace_id), "spanID": span.parent_span_id}
            )
        logs = [
            {
                "timestamp": t // 1000,
                "fields": [{"key": "event", "type": "string", "value": n}]
                + [{"key": k, "type": "string", "value": v} for k, v in a.items()],
            }
            for t, n, a in span.events
        ]
        out.append(
            {
                "traceID": jaeger_id(span.trace_id),
                "spanID": jaeger_id(span.span_id),
                "operationName": span.name,
                "references": refs,
                "startTime": span.start_ns // 1000,
                "duration": span.duration_ns // 1000,
                "tags": tags,
                "logs": logs,
                "processID": process_id,
                "warnings": None,
            }
        )
    trace = {"traceID": jaeger_id(spans[0].trace_id), "spans": out, "processes": processes}
    return json.dumps({"data": [trace]} if wrapped else [trace], ensure_ascii=False).encode()


def write_zipkin(spans: list[Span]) -> bytes:
    out = []
    for span in spans:
        tags = {k: render(v) for k, v in span.attributes.items()}
        if span.status == "Error":
            tags["error"] = span.message
        elif span.status == "Ok":
            tags["otel.status_code"] = "OK"
        item: dict[str, Any] = {
            "traceId": span.trace_id,
            "id": span.span_id,
            "name": span.name,
            "timestamp": span.start_ns // 1000,
            "duration": span.duration_ns // 1000,
            "localEndpoint": {"serviceName": span.service},
            "tags": tags,
            "annotations": [{"timestamp": t // 1000, "value": n} for t, n, _ in span.events],
        }
        if span.kind not in ("Unspecified", "Internal"):
            item["kind"] = span.kind.upper()
        if span.parent_span_id:
            item["parentId"] = span.parent_span_id
        out.append(item)
    return json.dumps(out, ensure_ascii=False).encode()
