"""OTLP/JSON: files (one document, JSON lines, an array, wrapped responses) and request bodies.

Accepted shapes, detected by content:
- one ExportTraceServiceRequest / TracesData object, pretty-printed or not;
- JSON lines, one such object per line (the Collector file exporter's format);
- a JSON array of such objects; `{"result": …}` and `{"batches": [ResourceSpans…]}` wrappers;
- legacy `instrumentationLibrarySpans` / `instrumentationLibrary`; camelCase or snake_case keys.

Ids: hex of any case or protojson's base64 (told apart by length); an empty trace id becomes one
synthetic trace id per file and an empty span id a synthetic one from the span's position (see
`anyvalue.synthetic_id` and ARCHITECTURE.md). A resource without service.name is "unknown_service".
A span that ends before it starts is rejected (a record error), never clamped.

JSON lines are streamed (at most `MAX_LINE_BYTES` per line); a single document or array is read
whole and may be at most `MAX_DOCUMENT_BYTES`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from typing import Any, BinaryIO

import orjson

from ingest import anyvalue as av
from ingest.columns import SpanColumns
from ingest.errors import DecodeError, report

MAX_LINE_BYTES = 64 << 20
MAX_DOCUMENT_BYTES = 256 << 20
BATCH_SPANS = 50_000
UNKNOWN_SERVICE = "unknown_service"
BOM = b"\xef\xbb\xbf"

OnBad = Callable[[DecodeError], None] | None


def _get(obj: dict, camel: str, snake: str) -> Any:
    value = obj.get(camel)
    return obj.get(snake) if value is None else value


def _list(obj: dict, camel: str, snake: str, what: str) -> list:
    value = _get(obj, camel, snake)
    if value is None:
        return []
    if not isinstance(value, list):
        raise ValueError(f"{what} is not a list")
    return value


def resource_spans_of(record: Any) -> list:
    """The ResourceSpans list of one decoded JSON value (request, TracesData, wrapper, array)."""
    if isinstance(record, list):
        return [rs for item in record for rs in resource_spans_of(item)]
    if not isinstance(record, dict):
        raise ValueError(f"expected an OTLP/JSON object, got {type(record).__name__}")
    if "result" in record and isinstance(record["result"], (dict, list)):
        return resource_spans_of(record["result"])
    if "batches" in record:
        batches = record["batches"]
        if not isinstance(batches, list):
            raise ValueError("batches is not a list")
        return batches
    return _list(record, "resourceSpans", "resource_spans", "resourceSpans")


class DecodeContext:
    """Where the decoder is: names positions in errors and seeds synthetic ids."""

    __slots__ = ("id_seed", "position", "record", "source", "synthetic_trace")

    def __init__(self, source: str) -> None:
        self.source = source
        self.id_seed = os.path.basename(source)
        self.synthetic_trace = av.synthetic_id(self.id_seed, 16, "trace")
        self.position = "line 1"
        self.record = 0

    def error(self, message: str) -> DecodeError:
        return DecodeError(self.source, self.position, message)


def _span(out: SpanColumns, span: Any, resource: tuple, scope: tuple, where: str, ctx: DecodeContext) -> None:
    if not isinstance(span, dict):
        raise ValueError("span is not an object")
    name = av.json_string(span.get("name"), "span name")
    start = av.unix_nano(_get(span, "startTimeUnixNano", "start_time_unix_nano"), "startTimeUnixNano")
    end = av.unix_nano(_get(span, "endTimeUnixNano", "end_time_unix_nano"), "endTimeUnixNano")
    if end < start:
        raise ValueError(f"span {name!r} ends before it starts ({end} < {start})")
    trace_id = av.normalize_id(_get(span, "traceId", "trace_id"), 16, "traceId") or ctx.synthetic_trace
    span_id = av.normalize_id(_get(span, "spanId", "span_id"), 8, "spanId") or av.synthetic_id(
        ctx.id_seed, 8, "span", ctx.record, where, name, start
    )
    parent = av.normalize_id(_get(span, "parentSpanId", "parent_span_id"), 8, "parentSpanId")
    status = span.get("status") or {}
    if not isinstance(status, dict):
        raise ValueError("status is not an object")
    events = []
    for event in _list(span, "events", "events", "events"):
        if not isinstance(event, dict):
            raise ValueError("event is not an object")
        events.append(
            (
                av.unix_nano(_get(event, "timeUnixNano", "time_unix_nano"), "event timeUnixNano"),
                av.json_string(event.get("name"), "event name"),
                av.json_attributes(event.get("attributes")),
            )
        )
    links = []
    for link in _list(span, "links", "links", "links"):
        if not isinstance(link, dict):
            raise ValueError("link is not an object")
        links.append(
            (
                av.normalize_id(_get(link, "traceId", "trace_id"), 16, "link traceId"),
                av.normalize_id(_get(link, "spanId", "span_id"), 8, "link spanId"),
                av.json_string(_get(link, "traceState", "trace_state"), "link traceState"),
                av.json_attributes(link.get("attributes")),
            )
        )
    out.append(
        timestamp_ns=start,
        trace_id=trace_id,
        span_id=span_id,
        parent_span_id=parent,
        trace_state=av.json_string(_get(span, "traceState", "trace_state"), "traceState"),
        span_name=name,
        span_kind=av.span_kind(span.get("kind")),
        service_name=resource[1],
        resource_attributes=resource[0],
        scope_name=scope[0],
        scope_version=scope[1],
        span_attributes=av.json_attributes(span.get("attributes")),
        duration_ns=end - start,
        status_code=av.status_code(status.get("code")),
        status_message=av.json_string(status.get("message"), "status message"),
        events=events,
        links=links,
    )


def decode_record(record: Any, out: SpanColumns, ctx: DecodeContext, on_bad: OnBad) -> None:
    """Append every span of one decoded JSON value to `out`; a bad span goes to `on_bad` or raises."""

    def bad(where: str, error: ValueError) -> None:
        report(ctx.error(f"{where}: {error}" if where else str(error)), on_bad)

    try:
        all_resource_spans = resource_spans_of(record)
    except ValueError as error:
        bad("", error)
        return
    for r, rs in enumerate(all_resource_spans):
        try:
            if not isinstance(rs, dict):
                raise ValueError("not an object")
            resource = rs.get("resource") or {}
            attributes = av.json_attributes(resource.get("attributes"))
            service = attributes.get("service.name") or UNKNOWN_SERVICE
            scope_spans = _list(rs, "scopeSpans", "scope_spans", "scopeSpans") or _list(
                rs, "instrumentationLibrarySpans", "instrumentation_library_spans", "scopeSpans"
            )
        except (ValueError, AttributeError) as error:
            bad(f"resourceSpans[{r}]", ValueError(str(error)))
            continue
        for s, ss in enumerate(scope_spans):
            try:
                if not isinstance(ss, dict):
                    raise ValueError("not an object")
                scope = _get(ss, "scope", "scope") or _get(
                    ss, "instrumentationLibrary", "instrumentation_library"
                ) or {}
                if not isinstance(scope, dict):
                    raise ValueError("scope is not an object")
                scope_key = (
                    av.json_string(scope.get("name"), "scope name"),
                    av.json_string(scope.get("version"), "scope version"),
                )
                spans = _list(ss, "spans", "spans", "spans")
            except (ValueError, AttributeError) as error:
                bad(f"resourceSpans[{r}].scopeSpans[{s}]", ValueError(str(error)))
                continue
            for i, span in enumerate(spans):
                where = f"resourceSpans[{r}].scopeSpans[{s}].spans[{i}]"
                try:
                    _span(out, span, (attributes, service), scope_key, where, ctx)
                except (ValueError, TypeError, AttributeError) as error:
                    bad(where, ValueError(str(error)))


def _parse(data: bytes, ctx: DecodeContext) -> Any:
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError as error:
        raise ctx.error(f"invalid JSON: {error}") from None


def decode(stream: BinaryIO, source: str, on_bad: OnBad = None, batch_spans: int = BATCH_SPANS) -> Iterator[
    SpanColumns
]:
    """Decode an OTLP/JSON file into batches of spans (JSON lines streamed, a document read whole)."""
    ctx = DecodeContext(source)
    first = stream.readline(MAX_LINE_BYTES + 1)
    if first.startswith(BOM):
        first = first[len(BOM) :]
    while first and not first.strip():
        first = stream.readline(MAX_LINE_BYTES + 1)
    if not first:
        return
    if len(first) > MAX_LINE_BYTES:
        raise DecodeError(source, "line 1", f"line longer than {MAX_LINE_BYTES >> 20} MiB")
    out = SpanColumns()
    first_error = None
    try:
        record = orjson.loads(first)
    except orjson.JSONDecodeError as error:
        record = None
        if first.rstrip().endswith((b"}", b"]")):  # a complete but malformed first JSON line
            first_error = error
    if record is None and first_error is None:  # a pretty-printed document or array: read it whole
        ctx.position = "document"
        rest = stream.read(MAX_DOCUMENT_BYTES + 1 - len(first))
        data = first + rest
        if len(data) > MAX_DOCUMENT_BYTES:
            raise ctx.error(f"a single JSON document larger than {MAX_DOCUMENT_BYTES >> 20} MiB "
                            "(write JSON lines instead)")
        try:
            document = orjson.loads(data)
        except orjson.JSONDecodeError as error:
            ctx.position = f"line {error.lineno}"
            raise ctx.error(f"invalid JSON: {error.msg} (column {error.colno})") from None
        decode_record(document, out, ctx, on_bad)
        if len(out):
            yield out
        return
    line_no = 1
    if first_error is not None:
        report(DecodeError(source, "line 1", f"invalid JSON: {first_error}"), on_bad)
    while True:
        ctx.position = f"line {line_no}"
        ctx.record = line_no
        if record is not None:
            decode_record(record, out, ctx, on_bad)
            if len(out) >= batch_spans:
                yield out
                out = SpanColumns()
        line = stream.readline(MAX_LINE_BYTES + 1)
        if not line:
            break
        line_no += 1
        record = None
        if len(line) > MAX_LINE_BYTES:
            raise DecodeError(source, f"line {line_no}", f"line longer than {MAX_LINE_BYTES >> 20} MiB")
        if not line.strip():
            continue
        try:
            record = orjson.loads(line)
        except orjson.JSONDecodeError as error:
            report(DecodeError(source, f"line {line_no}", f"invalid JSON: {error}"), on_bad)
    if len(out):
        yield out


def decode_request(body: bytes, source: str) -> SpanColumns:
    """One OTLP/HTTP JSON request body → its spans (strict: any bad span raises DecodeError)."""
    ctx = DecodeContext(source)
    ctx.position = "body"
    out = SpanColumns()
    decode_record(_parse(body, ctx), out, ctx, None)
    return out
