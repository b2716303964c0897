"""OTLP protobuf: one raw TracesData / ExportTraceServiceRequest, or the Collector file exporter's
stream of messages each prefixed by its 4-byte big-endian length (optionally each zstd-compressed).

Both request types share one wire format (field 1: repeated ResourceSpans), so every message is
parsed as `TracesData` with the upb-backed `opentelemetry-proto` classes. A length-prefixed stream is
read one message at a time; a raw message is read whole (at most `MAX_MESSAGE_BYTES`). A message
that is JSON (starts with '{') after per-message decompression goes to the OTLP/JSON decoder.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any, BinaryIO

from google.protobuf.message import DecodeError as ProtoDecodeError
from opentelemetry.proto.trace.v1 import trace_pb2

from ingest import anyvalue as av
from ingest import otlp_json
from ingest.columns import SpanColumns
from ingest.compression import ZSTD_MAGIC, decompress_message
from ingest.errors import DecodeError, report

MAX_MESSAGE_BYTES = 256 << 20
BATCH_SPANS = otlp_json.BATCH_SPANS
_PAYLOAD_STARTS = (0x0A, ZSTD_MAGIC[0], ord("{"))


def is_length_prefixed(head: bytes) -> bool:
    """True when the first bytes look like <4-byte big-endian length><message>."""
    if len(head) < 5 or head[0] == 0x0A:
        return False
    length = int.from_bytes(head[:4], "big")
    return 0 < length <= MAX_MESSAGE_BYTES and head[4] in _PAYLOAD_STARTS


def _parse(data: bytes, ctx: otlp_json.DecodeContext) -> Any:
    message = trace_pb2.TracesData()
    try:
        message.ParseFromString(data)
    except (ProtoDecodeError, RuntimeError, ValueError) as error:
        raise ctx.error(f"invalid protobuf TracesData: {error}") from None
    return message


def _span(out: SpanColumns, span: Any, resource: tuple, scope: tuple, where: str, ctx: Any) -> None:
    name = span.name
    start = span.start_time_unix_nano
    end = span.end_time_unix_nano
    if end < start:
        raise ValueError(f"span {name!r} ends before it starts ({end} < {start})")
    if end > av.INT64_MAX:
        raise ValueError(f"span {name!r} end time {end} is out of range")
    trace_id = av.id_from_bytes(span.trace_id, 16, "trace_id") or ctx.synthetic_trace
    span_id = av.id_from_bytes(span.span_id, 8, "span_id") or av.synthetic_id(
        ctx.id_seed, 8, "span", ctx.record, where, name, start
    )
    events = [
        (event.time_unix_nano, event.name, av.proto_attributes(event.attributes)) for event in span.events
    ]
    for event in events:
        if event[0] > av.INT64_MAX:
            raise ValueError(f"event time {event[0]} is out of range")
    links = [
        (
            av.id_from_bytes(link.trace_id, 16, "link trace_id"),
            av.id_from_bytes(link.span_id, 8, "link span_id"),
            link.trace_state,
            av.proto_attributes(link.attributes),
        )
        for link in span.links
    ]
    status = span.status
    out.append(
        timestamp_ns=start,
        trace_id=trace_id,
        span_id=span_id,
        parent_span_id=av.id_from_bytes(span.parent_span_id, 8, "parent_span_id"),
        trace_state=span.trace_state,
        span_name=name,
        span_kind=av.span_kind(span.kind),
        service_name=resource[1],
        resource_attributes=resource[0],
        scope_name=scope[0],
        scope_version=scope[1],
        span_attributes=av.proto_attributes(span.attributes),
        duration_ns=end - start,
        status_code=av.status_code(status.code),
        status_message=status.message,
        events=events,
        links=links,
    )


def decode_message(message: Any, out: SpanColumns, ctx: Any, on_bad: otlp_json.OnBad) -> None:
    """Append every span of one parsed TracesData to `out`; a bad span goes to `on_bad` or raises."""
    for r, rs in enumerate(message.resource_spans):
        try:
            attributes = av.proto_attributes(rs.resource.attributes)
        except ValueError as error:
            report(ctx.error(f"resource_spans[{r}]: {error}"), on_bad)
            continue
        resource = (attributes, attributes.get("service.name") or otlp_json.UNKNOWN_SERVICE)
        for s, ss in enumerate(rs.scope_spans):
            scope = (ss.scope.name, ss.scope.version)
            for i, span in enumerate(ss.spans):
                where = f"resource_spans[{r}].scope_spans[{s}].spans[{i}]"
                try:
                    _span(out, span, resource, scope, where, ctx)
                except ValueError as error:
                    report(ctx.error(f"{where}: {error}"), on_bad)


def _payload(data: bytes, out: SpanColumns, ctx: Any, on_bad: otlp_json.OnBad) -> None:
    if data[:4] == ZSTD_MAGIC:
        data = decompress_message(data, ctx.source, ctx.position, MAX_MESSAGE_BYTES)
    if data[:1] == b"{":
        otlp_json.decode_record(otlp_json._parse(data, ctx), out, ctx, on_bad)
    else:
        decode_message(_parse(data, ctx), out, ctx, on_bad)


def read_messages(stream: BinaryIO, source: str, head: bytes = b"") -> Iterator[tuple[int, int, bytes]]:
    """(message number, byte offset, payload) of a length-prefixed stream whose first bytes, already
    read, are `head`; a bad prefix or a truncated message raises DecodeError."""
    offset = number = 0
    pending = head
    while True:
        prefix = pending[:4] + stream.read(max(0, 4 - len(pending)))
        pending = pending[4:]
        if not prefix:
            return
        number += 1
        position = f"message {number} at byte {offset}"
        if len(prefix) < 4:
            raise DecodeError(source, position, "truncated length prefix")
        length = int.from_bytes(prefix, "big")
        if length > MAX_MESSAGE_BYTES:
            raise DecodeError(
                source, position, f"message length {length} exceeds {MAX_MESSAGE_BYTES >> 20} MiB"
            )
        payload = pending[:length] + stream.read(max(0, length - len(pending)))
        pending = pending[length:]
        if len(payload) < length:
            raise DecodeError(source, position, f"truncated message: {len(payload)} of {length} bytes")
        yield number, offset, payload
        offset += 4 + length


def decode_payloads(
    messages: Iterable[tuple[int, int, bytes]],
    source: str,
    on_bad: otlp_json.OnBad,
    batch_spans: int = BATCH_SPANS,
) -> Iterator[SpanColumns]:
    """The reference decoding of numbered messages (protobuf, or JSON after per-message zstd)."""
    ctx = otlp_json.DecodeContext(source)
    out = SpanColumns()
    for number, offset, payload in messages:
        ctx.record = number
        ctx.position = f"message {number} at byte {offset}"
        try:
            _payload(payload, out, ctx, on_bad)
        except DecodeError as error:
            report(error, on_bad)
        if len(out) >= batch_spans:
            yield out
            out = SpanColumns()
    if len(out):
        yield out


def decode(
    stream: BinaryIO, source: str, on_bad: otlp_json.OnBad = None, batch_spans: int = BATCH_SPANS
) -> Iterator[SpanColumns]:
    """Decode a protobuf file (raw message or length-prefixed stream) into batches of spans."""
    head = stream.read(5)
    if is_length_prefixed(head):
        yield from decode_payloads(read_messages(stream, source, head), source, on_bad, batch_spans)
        return
    ctx = otlp_json.DecodeContext(source)
    ctx.position = "message 1 at byte 0"
    data = head + stream.read(MAX_MESSAGE_BYTES + 1 - len(head))
    if len(data) > MAX_MESSAGE_BYTES:
        raise ctx.error(f"a single protobuf message larger than {MAX_MESSAGE_BYTES >> 20} MiB")
    out = SpanColumns()
    if data:
        decode_message(_parse(data, ctx), out, ctx, on_bad)
    if len(out):
        yield out


def decode_request(body: bytes, source: str) -> SpanColumns:
    """One OTLP/HTTP protobuf request body → its spans (strict: any bad span raises DecodeError)."""
    ctx = otlp_json.DecodeContext(source)
    ctx.position = "body"
    out = SpanColumns()
    decode_message(_parse(body, ctx), out, ctx, None)
    return out
