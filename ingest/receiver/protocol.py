"""The OTLP/HTTP wire details: content types, decoding dispatch, and the bodies the spec prescribes.

Success is 200 with an ExportTraceServiceResponse (its `partial_success` filled in when some spans
were rejected); failures carry a google.rpc.Status. Both are encoded like the request: protobuf for
`application/x-protobuf`, JSON (lowerCamelCase, int64 as a string) for `application/json`.
"""

from __future__ import annotations

import json

import orjson
from google.protobuf.message import DecodeError as ProtoDecodeError
from opentelemetry.proto.trace.v1 import trace_pb2

from ingest.arrow_batch import ArrowSpans
from ingest.columns import SpanColumns
from ingest.errors import DecodeError

PROTOBUF = "application/x-protobuf"
JSON = "application/json"
# media type → the one we answer in
MEDIA_TYPES = {PROTOBUF: PROTOBUF, "application/protobuf": PROTOBUF, JSON: JSON}

# google.rpc.Code values used in Status bodies
INVALID_ARGUMENT = 3
RESOURCE_EXHAUSTED = 8
INTERNAL = 13
UNAVAILABLE = 14
UNAUTHENTICATED = 16


def media_type(content_type: str | None) -> str | None:
    """The response media type for a request's Content-Type, or None when unsupported."""
    if not content_type:
        return None
    return MEDIA_TYPES.get(content_type.split(";", 1)[0].strip().lower())


def decode(body: bytes, media: str, source: str) -> tuple[SpanColumns | ArrowSpans, list[DecodeError]]:
    """One ExportTraceServiceRequest body → (its good spans, one DecodeError per rejected span).

    A body that does not parse at all raises DecodeError (the caller answers 400); a span the
    decoders refuse (an end before its start, a malformed id or attribute) is rejected on its own
    and reported in partial_success, and the rest of the request is stored. Protobuf bodies go
    through the file ingest's fast path first (upb straight into Arrow); a body it does not take
    as-is goes through the reference decoder, which names what is wrong.
    """
    from ingest import otlp_json, otlp_proto, otlp_proto_fast

    if media == PROTOBUF:
        fast = otlp_proto_fast.decode_request(body)
        if fast is not None:
            return fast, []

    ctx = otlp_json.DecodeContext(source)
    ctx.position = "body"
    out = SpanColumns()
    rejected: list[DecodeError] = []
    if media == PROTOBUF:
        # ExportTraceServiceRequest and TracesData share one wire format (1: repeated ResourceSpans).
        message = trace_pb2.TracesData()
        try:
            message.ParseFromString(body)
        except (ProtoDecodeError, RuntimeError, ValueError) as error:
            raise ctx.error(f"invalid protobuf ExportTraceServiceRequest: {error}") from None
        otlp_proto.decode_message(message, out, ctx, rejected.append)
    else:
        try:
            record = orjson.loads(body)
        except orjson.JSONDecodeError as error:
            raise ctx.error(f"invalid JSON: {error}") from None
        if not isinstance(record, dict):
            raise ctx.error("expected an ExportTraceServiceRequest JSON object")
        otlp_json.decode_record(record, out, ctx, rejected.append)
    return out, rejected


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def export_response(media: str, rejected_spans: int = 0, error_message: str = "") -> bytes:
    """An ExportTraceServiceResponse; empty (all accepted) unless spans were rejected."""
    if media == JSON:
        if not rejected_spans and not error_message:
            return b"{}"
        partial = {"rejectedSpans": str(rejected_spans), "errorMessage": error_message}
        return json.dumps({"partialSuccess": partial}).encode()
    if not rejected_spans and not error_message:
        return b""
    # ExportTracePartialSuccess: 1 rejected_spans int64, 2 error_message string
    message = error_message.encode()
    partial = b"\x08" + _varint(rejected_spans) + b"\x12" + _varint(len(message)) + message
    # ExportTraceServiceResponse: 1 partial_success
    return b"\x0a" + _varint(len(partial)) + partial


def status_body(media: str, code: int, message: str) -> bytes:
    """A google.rpc.Status (code, message; no details)."""
    if media == JSON:
        return json.dumps({"code": code, "message": message}).encode()
    encoded = message.encode()
    return b"\x08" + _varint(code) + b"\x12" + _varint(len(encoded)) + encoded
