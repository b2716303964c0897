"""Triton Inference Server's own trace file (trace mode `triton`, level TIMESTAMPS) → SpanColumns.

The file is one JSON array of records (triton-inference-server/server docs/user_guide/trace.md,
"JSON Trace Output"): a header per traced model request `{"id", "model_name", "model_version",
"request_id"?, "parent_id"?}`, timestamp records `{"id", "timestamps": [{"name", "ns"}]}` (one or
several per record, in any order), and TENSORS records `{"id", "activity", "tensor"}` (ignored).
`parent_id` is the id of the containing ensemble (or BLS model).

Each id becomes one span: named after its model, from its first timestamp to its last, every
timestamp kept as a span event under Triton's own activity name (HTTP_RECV_START, QUEUE_START,
COMPUTE_START, COMPUTE_INPUT_END, ...), so the Triton phase rules (tailscope.analysis.phases) split it
into stages exactly as they split Triton's OpenTelemetry spans. A request without a parent is one
trace's SERVER root; ensemble members are INTERNAL spans under their ensemble.

Decisions:
- Times: Triton writes a steady (monotonic) clock, not wall time, so spans are stored at those
  nanoseconds from 1970-01-01 (time since the server's boot); durations and order are exact.
- A gRPC request's GRPC_WAITREAD_START..END includes waiting for the client to send (Triton's docs:
  "not a useful measure"), so a span starts at GRPC_WAITREAD_END when it has one.
- A file copied while Triton runs lacks the closing `]` (written at shutdown): it is read as closed.
- Ids: Triton's numbers restart with the server, so TraceId/SpanId hash the id together with its
  first timestamp (deterministic: loading the file again adds nothing).
"""

from __future__ import annotations

import hashlib
import io
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, BinaryIO

from ingest.columns import SpanColumns
from ingest.errors import DecodeError, report
from ingest.span_json import (
    BATCH_SPANS,
    INT64_MAX,
    MAX_DOCUMENT_BYTES,
    RECORD_ERRORS,
    BadRecord,
    read_document,
    record_message,
    render_value,
    type_name,
)

SERVICE = "triton-inference-server"  # the service.name Triton's OpenTelemetry mode uses by default
HEADER_KEYS = ("model_name", "model_version", "request_id", "parent_id")


@dataclass
class _Request:
    """One traced model request: its header fields and its named timestamps."""

    header: dict[str, Any] = field(default_factory=dict)
    times: list[tuple[str, int]] = field(default_factory=list)


def decode(
    stream: BinaryIO, source: str, on_bad: Callable[[DecodeError], None] | None = None
) -> Iterator[SpanColumns]:
    """Decode one Triton trace file into batches of at most BATCH_SPANS spans."""
    document = _read(stream, source)
    if not isinstance(document, list):
        raise DecodeError(source, "byte 0", "not a Triton trace file: expected a JSON array of records")
    requests: dict[int, _Request] = {}
    for number, record in enumerate(document, 1):
        try:
            _collect(record, requests)
        except RECORD_ERRORS as error:
            report(DecodeError(source, f"record {number}", record_message(error)), on_bad)
    batch = SpanColumns()
    for request_id in sorted(requests):
        if not requests[request_id].times:
            continue  # a header (or tensors) without timestamps: nothing to time
        _append(batch, request_id, requests)
        if len(batch) >= BATCH_SPANS:
            yield batch
            batch = SpanColumns()
    if len(batch):
        yield batch


def _read(stream: BinaryIO, source: str) -> Any:
    """The file's JSON array. Triton writes the closing bracket only when it shuts down, so a file
    copied while the server runs ends after a record (and maybe a comma): it is closed here."""
    data = stream.read(MAX_DOCUMENT_BYTES + 1)
    try:
        return read_document(io.BytesIO(data), source)
    except DecodeError:
        body = data.rstrip()
        if not body.lstrip().startswith(b"[") or body.endswith(b"]"):
            raise
        try:
            return read_document(io.BytesIO(body.rstrip(b",") + b"]"), source)
        except DecodeError:
            pass
        raise


def _int(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise BadRecord(f"{what} must be an integer, not {type_name(value)}")
    return value


def _collect(record: Any, requests: dict[int, _Request]) -> None:
    if not isinstance(record, dict):
        raise BadRecord(f"a record must be an object, not {type_name(record)}")
    request = requests.setdefault(_int(record.get("id"), "id"), _Request())
    for key in HEADER_KEYS:
        if key in record:
            request.header[key] = record[key]
    stamps = record.get("timestamps")
    if stamps is None:
        return
    if not isinstance(stamps, list):
        raise BadRecord(f"timestamps must be an array, not {type_name(stamps)}")
    for n, stamp in enumerate(stamps, 1):
        if not isinstance(stamp, dict) or not isinstance(stamp.get("name"), str):
            raise BadRecord(f"timestamp {n} must be an object with a name")
        ns = _int(stamp.get("ns"), f"timestamp {n} ns")
        if not 0 <= ns <= INT64_MAX // 2:
            raise BadRecord(f"timestamp {n} ns {ns} is out of range")
        request.times.append((stamp["name"], ns))


def _parent(request_id: int, requests: dict[int, _Request]) -> int | None:
    parent = requests[request_id].header.get("parent_id")
    if not isinstance(parent, int) or isinstance(parent, bool) or parent == request_id:
        return None
    return parent if parent in requests and requests[parent].times else None


def _top(request_id: int, requests: dict[int, _Request]) -> int:
    seen = {request_id}
    while (parent := _parent(request_id, requests)) is not None and parent not in seen:
        seen.add(parent)
        request_id = parent
    return request_id


def _span_start(times: list[tuple[str, int]]) -> int:
    named = dict(times)
    return named.get("GRPC_WAITREAD_END", min(ns for _, ns in times))


def _hex(text: str, size: int) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:size]


def _span_id(request_id: int, requests: dict[int, _Request]) -> str:
    return _hex(f"triton:{request_id}:{_span_start(requests[request_id].times)}", 16)


def _append(batch: SpanColumns, request_id: int, requests: dict[int, _Request]) -> None:
    request = requests[request_id]
    top = _top(request_id, requests)
    parent = _parent(request_id, requests)
    start = _span_start(request.times)
    end = max(ns for _, ns in request.times)
    header = request.header
    model = str(header.get("model_name") or "unknown model")
    attributes = {
        "model_name": model,
        "model_version": render_value(header.get("model_version", "")),
        "triton.trace.id": str(request_id),
        "triton.clock": "steady",
    }
    if header.get("request_id"):
        attributes["request_id"] = render_value(header["request_id"])
    names = {name for name, _ in request.times}
    if names & {"HTTP_RECV_START", "HTTP_SEND_END"}:
        attributes["triton.protocol"] = "http"
    elif any(name.startswith("GRPC_") for name in names):
        attributes["triton.protocol"] = "grpc"
    batch.append(
        timestamp_ns=start,
        trace_id=_hex(f"triton:{top}:{_span_start(requests[top].times)}", 32),
        span_id=_span_id(request_id, requests),
        parent_span_id="" if parent is None else _span_id(parent, requests),
        span_name=model,
        duration_ns=max(end - start, 0),
        service_name=SERVICE,
        span_kind="Server" if parent is None else "Internal",
        resource_attributes={"service.name": SERVICE},
        span_attributes=attributes,
        events=[(ns, name, {}) for name, ns in sorted(request.times, key=lambda t: t[1])],
    )
