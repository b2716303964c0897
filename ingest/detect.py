"""Which format a trace file is, from its content (never its name), and the decoder that reads it.

Whole-file compression is undone first (see `compression`); then the first `HEAD_BYTES` decide:
- JSON mentioning resourceSpans / scopeSpans / instrumentationLibrarySpans (any key case) → OTLP/JSON
- JSON with Jaeger's `traceID` / `spanID` / `operationName` keys → Jaeger UI JSON (ingest.jaeger)
- JSON with Zipkin v2's `traceId` and `id` keys → Zipkin v2 JSON (ingest.zipkin)
- JSON objects with `"trace_id": "0x…"` and `"kind": "SpanKind.…"` → the OpenTelemetry SDK's console
  exporter JSON (ingest.otel_console; what Ray Serve's tracing writes)
- a JSON array of records with `"timestamps": [{"name", "ns"}]` or `"model_name"` → Triton's own
  trace file (ingest.triton_trace)
- text with TorchServe's per-request metric lines (`HandlerTime.ms:12.9|#…requestID:…`) → its
  metrics log (ingest.torchserve_log)
- binary starting with field 1 of TracesData (0x0A), or a 4-byte length prefix → OTLP protobuf
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable, Iterator
from typing import BinaryIO, Protocol

from ingest.columns import SpanColumns
from ingest.errors import DecodeError
from ingest.otlp_proto import is_length_prefixed

HEAD_BYTES = 64 << 10

FORMATS: dict[str, str] = {
    "otlp_json": "ingest.otlp_json",
    "otlp_proto": "ingest.otlp_proto",
    "jaeger": "ingest.jaeger",
    "zipkin": "ingest.zipkin",
    "otel_console": "ingest.otel_console",
    "triton_trace": "ingest.triton_trace",
    "torchserve_log": "ingest.torchserve_log",
}

_OTLP_KEYS = re.compile(
    rb'"(resourceSpans|resource_spans|scopeSpans|scope_spans|instrumentationLibrarySpans'
    rb'|instrumentation_library_spans)"'
)
_JAEGER_KEYS = re.compile(rb'"(traceID|spanID|operationName)"')
_ZIPKIN_ID = re.compile(rb'"id"\s*:')
_ZIPKIN_TRACE = re.compile(rb'"traceId"\s*:')
_BOM = b"\xef\xbb\xbf"
# the SDK console exporter's span objects: "context" with snake_case "trace_id", "kind": "SpanKind.X"
_CONSOLE_KEYS = re.compile(rb'"trace_id"\s*:\s*"0x[0-9a-fA-F]+"')
_CONSOLE_KIND = re.compile(rb'"kind"\s*:\s*"SpanKind\.')
# Triton's trace file: records with "timestamps": [{"name": ..., "ns": ...}] or a "model_name" header
_TORCHSERVE_METRIC = re.compile(rb"\w+\.(ms|Milliseconds):[-+0-9.eE]+\|#[^\n]*requestID:")
# TorchServe's other logs: frontend metrics without request ids (ts_metrics.log), the access log
_TORCHSERVE_LOG_LINE = re.compile(
    rb"^\d{4}-\d\d-\d\dT[\d:,.]+ - (\w+\.\w+:[-+0-9.eE]+\|#|/\S+ \"[A-Z]+ \S+ HTTP/[\d.]+\" \d{3} \d+)",
    re.MULTILINE,
)
_TRITON_KEYS = re.compile(rb'"(timestamps"\s*:\s*\[\s*\{\s*"name"|model_name")')


class Decoder(Protocol):
    def __call__(
        self, stream: BinaryIO, source: str, on_bad: Callable[[DecodeError], None] | None
    ) -> Iterator[SpanColumns]: ...


def detect(head: bytes, source: str = "<input>") -> str | None:
    """The format name of a (decompressed) file from its first bytes; None for an empty file."""
    text = head[len(_BOM) :] if head.startswith(_BOM) else head
    stripped = text.lstrip()
    if not stripped:
        return None
    if stripped[:1] in (b"{", b"["):
        if _OTLP_KEYS.search(text):
            return "otlp_json"
        if _JAEGER_KEYS.search(text):
            return "jaeger"
        if _ZIPKIN_TRACE.search(text) and _ZIPKIN_ID.search(text):
            return "zipkin"
        if _CONSOLE_KEYS.search(text) and _CONSOLE_KIND.search(text):
            return "otel_console"
        if stripped[:1] == b"[" and _TRITON_KEYS.search(text):
            return "triton_trace"
        if re.search(rb'"(batches|result)"\s*:', text):
            return "otlp_json"
        if _protobuf_that_looks_like_json(head):
            return "otlp_proto"
        raise DecodeError(
            source, "byte 0", "JSON, but not OTLP, Jaeger, Zipkin, OpenTelemetry console or Triton trace data"
        )
    if _TORCHSERVE_METRIC.search(text):
        return "torchserve_log"
    if head[:1] == b"\x0a" or is_length_prefixed(head):
        return "otlp_proto"
    if _TORCHSERVE_LOG_LINE.search(text):
        raise DecodeError(
            source,
            "byte 0",
            "not a recognised trace format: a TorchServe metrics or access log with no request ids; "
            "ingest the same server's model_metrics.log (per-batch times with requestID)",
        )
    known = "OTLP JSON/protobuf, Jaeger, Zipkin, TorchServe model_metrics"
    raise DecodeError(source, "byte 0", f"not a recognised trace format ({known})")


def _protobuf_that_looks_like_json(head: bytes) -> bool:
    """A TracesData message whose first ResourceSpans is 91 or 123 bytes long starts with 0x0A then
    that length: "\n[" or "\n{", which reads as JSON. It is protobuf when those bytes parse as a
    ResourceSpans message (checked only after no JSON trace format matched)."""
    if head[:1] != b"\x0a" or len(head) < 2 + head[1]:
        return False
    from google.protobuf.message import DecodeError as ProtobufError
    from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans

    try:
        ResourceSpans.FromString(head[2 : 2 + head[1]])
    except ProtobufError:
        return False
    return True


def decoder_for(fmt: str, source: str = "<input>") -> Decoder:
    """The `decode` function of a format's module, imported on first use."""
    try:
        module = importlib.import_module(FORMATS[fmt])
    except ModuleNotFoundError as error:
        if error.name != FORMATS[fmt]:
            raise
        raise DecodeError(source, "byte 0", f"{fmt} files are not supported yet") from None
    return module.decode
