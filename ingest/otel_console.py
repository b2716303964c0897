"""The OpenTelemetry SDK's console JSON (`ConsoleSpanExporter`, `ReadableSpan.to_json()`) → SpanColumns.

What Python services write when they export spans to a file or stdout instead of a collector, and
what Ray Serve's tracing writes to `logs/serve/spans/`: one JSON object per span, pretty-printed and
concatenated (or one per line, or an array of them):

    {"name": ..., "context": {"trace_id": "0x<32 hex>", "span_id": "0x<16 hex>", "trace_state": "[]"},
     "kind": "SpanKind.SERVER", "parent_id": "0x<16 hex>" | null,
     "start_time": "2024-05-28T18:05:04.864137Z", "end_time": ...,
     "status": {"status_code": "OK" | "ERROR" | "UNSET", "description": ...},
     "attributes": {...}, "events": [{"name", "timestamp", "attributes"}],
     "links": [{"context": {...}, "attributes": {...}}],
     "resource": {"attributes": {...}, "schema_url": ""}}

(opentelemetry-python, opentelemetry-sdk `trace/__init__.py`, `ReadableSpan.to_json`.) Times are ISO
8601 with microseconds, so spans keep µs precision. Attribute values are rendered as every other
decoder renders them (ingest.span_json.render_value). A record is one span: in strict mode the first
malformed one raises DecodeError at "span N (line L)"; with `on_bad` it is reported and skipped.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any, BinaryIO

import orjson

from ingest.columns import SpanColumns
from ingest.errors import DecodeError, report
from ingest.span_json import (
    BATCH_SPANS,
    BOM,
    MAX_DOCUMENT_BYTES,
    READ_CHUNK,
    RECORD_ERRORS,
    UNKNOWN_SERVICE,
    BadRecord,
    hex_id,
    record_message,
    render_value,
    type_name,
)

KINDS = {
    "SpanKind.INTERNAL": "Internal",
    "SpanKind.SERVER": "Server",
    "SpanKind.CLIENT": "Client",
    "SpanKind.PRODUCER": "Producer",
    "SpanKind.CONSUMER": "Consumer",
}
STATUS = {"OK": "Ok", "ERROR": "Error", "UNSET": "Unset"}
_NOT_SPACE = re.compile(r"\S")
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def decode(
    stream: BinaryIO, source: str, on_bad: Callable[[DecodeError], None] | None = None
) -> Iterator[SpanColumns]:
    """Decode a console-exporter file into batches of at most BATCH_SPANS spans."""
    batch = SpanColumns()
    for number, (line, raw) in enumerate(_records(_read_text(stream, source), source), 1):
        try:
            _append(batch, raw)
        except RECORD_ERRORS as error:
            report(DecodeError(source, f"span {number} (line {line})", record_message(error)), on_bad)
            continue
        if len(batch) >= BATCH_SPANS:
            yield batch
            batch = SpanColumns()
    if len(batch):
        yield batch


def _read_text(stream: BinaryIO, source: str) -> str:
    data = bytearray()
    while chunk := stream.read(READ_CHUNK):
        data += chunk
        if len(data) > MAX_DOCUMENT_BYTES:
            limit = f"byte {MAX_DOCUMENT_BYTES}"
            raise DecodeError(source, limit, "console span export larger than 512 MiB; export OTLP instead")
    if data.startswith(BOM):
        del data[: len(BOM)]
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise DecodeError(source, f"byte {error.start}", "not UTF-8 text") from None


def _records(text: str, source: str) -> Iterator[tuple[int, Any]]:
    """(line number, parsed object) of each span object: an array of them, or objects one after
    another (pretty-printed or one per line)."""
    start = _NOT_SPACE.search(text)
    if start is None:
        raise DecodeError(source, "byte 0", "empty file (no spans)")
    if text[start.start()] == "[":
        try:
            items = orjson.loads(text)
        except orjson.JSONDecodeError as error:
            raise DecodeError(source, f"line {error.lineno} column {error.colno}", "invalid JSON") from None
        if not isinstance(items, list):
            raise DecodeError(source, "byte 0", "expected an array of spans")
        for item in items:
            yield 0, item
        return
    decoder = json.JSONDecoder()
    position, line, counted = start.start(), 1, 0
    while True:
        line += text.count("\n", counted, position)  # counted from the last record on: linear, not quadratic
        counted = position
        try:
            raw, end = decoder.raw_decode(text, position)
        except json.JSONDecodeError as error:
            raise DecodeError(
                source, f"line {error.lineno} column {error.colno}", f"invalid JSON: {error.msg}"
            ) from None
        yield line, raw
        following = _NOT_SPACE.search(text, end)
        if following is None:
            return
        position = following.start()


def _id(value: Any, width: int, what: str) -> str:
    if not isinstance(value, str):
        raise BadRecord(f"{what} must be a hex string, not {type_name(value)}")
    return hex_id(value[2:] if value[:2] in ("0x", "0X") else value, width, what)


def _time(value: Any, what: str) -> int:
    if not isinstance(value, str):
        raise BadRecord(f"{what} must be an ISO 8601 time, not {type_name(value)}")
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise BadRecord(f"{what} {value[:40]!r} is not an ISO 8601 time") from None
    if moment.tzinfo is None:
        raise BadRecord(f"{what} {value[:40]!r} has no time zone")
    delta = moment - EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000_000 + delta.microseconds * 1000


def _attributes(value: Any, what: str) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise BadRecord(f"{what} must be an object, not {type_name(value)}")
    return {str(k): render_value(v) for k, v in value.items()}


def _append(batch: SpanColumns, raw: Any) -> None:
    if not isinstance(raw, dict):
        raise BadRecord(f"a span must be an object, not {type_name(raw)}")
    context = raw.get("context")
    if not isinstance(context, dict):
        raise BadRecord("no context object (trace_id, span_id)")
    trace_id = _id(context.get("trace_id"), 32, "context.trace_id")
    span_id = _id(context.get("span_id"), 16, "context.span_id")
    parent = raw.get("parent_id")
    start = _time(raw.get("start_time"), "start_time")
    end = _time(raw.get("end_time"), "end_time") if raw.get("end_time") is not None else start
    status = raw.get("status") or {}
    resource = _attributes((raw.get("resource") or {}).get("attributes"), "resource.attributes")
    batch.append(
        timestamp_ns=start,
        trace_id=trace_id,
        span_id=span_id,
        parent_span_id="" if parent is None else _id(parent, 16, "parent_id"),
        span_name=str(raw.get("name") or ""),
        duration_ns=max(end - start, 0),
        service_name=resource.get("service.name") or UNKNOWN_SERVICE,
        trace_state=_trace_state(context.get("trace_state")),
        span_kind=KINDS.get(str(raw.get("kind")), "Unspecified"),
        resource_attributes=resource,
        span_attributes=_attributes(raw.get("attributes"), "attributes"),
        status_code=STATUS.get(str(status.get("status_code", "UNSET")).upper(), "Unset"),
        status_message=str(status.get("description") or ""),
        events=[_event(e, n) for n, e in enumerate(raw.get("events") or [], 1)],
        links=[_link(k, n) for n, k in enumerate(raw.get("links") or [], 1)],
    )


def _trace_state(value: Any) -> str:
    text = "" if value is None else str(value)
    return "" if text in ("[]", "{}") else text


def _event(raw: Any, number: int) -> tuple[int, str, dict[str, str]]:
    if not isinstance(raw, dict):
        raise BadRecord(f"event {number} must be an object, not {type_name(raw)}")
    when = _time(raw.get("timestamp"), f"event {number} timestamp")
    return when, str(raw.get("name") or ""), _attributes(raw.get("attributes"), f"event {number} attributes")


def _link(raw: Any, number: int) -> tuple[str, str, str, dict[str, str]]:
    if not isinstance(raw, dict) or not isinstance(raw.get("context"), dict):
        raise BadRecord(f"link {number} must be an object with a context")
    context = raw["context"]
    return (
        _id(context.get("trace_id"), 32, f"link {number} trace_id"),
        _id(context.get("span_id"), 16, f"link {number} span_id"),
        _trace_state(context.get("trace_state")),
        _attributes(raw.get("attributes"), f"link {number} attributes"),
    )
