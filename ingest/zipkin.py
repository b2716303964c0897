"""Zipkin v2 JSON (an array of spans, as POSTed to /api/v2/spans) → SpanColumns.

Also read: the query API's array of traces (`[[span, ...], ...]`) and the v1-style fields some
exporters still write beside v2 ones (`binaryAnnotations`, core annotations with endpoints).
Normalisation follows the Collector's Zipkin receiver:

- ids are hex, left-padded (trace 32, span 16), lowercase; an all-zero or absent parentId is a root
- times are µs in the file, ns in the store
- ServiceName and ResourceAttributes (`service.name`, `net.host.ip`, `net.host.port`) come from
  localEndpoint; remoteEndpoint becomes `peer.service`, `net.peer.ip`, `net.peer.port`
- tags (and v1 binaryAnnotations) become SpanAttributes; annotations become Events
- `error` tag → StatusCode Error (its value, unless "true" or empty, is the StatusMessage);
  `otel.status_code` / `otel.status_description` tags, when present, decide instead
- kind CLIENT/SERVER/PRODUCER/CONSUMER → SpanKind; absent → Unspecified, or inferred from v1 core
  annotations (cs/cr → Client, sr/ss → Server, ms → Producer, mr → Consumer)

Decisions:

- Missing timestamp or duration: the span is kept. Its timestamp is the earliest annotation's and its
  duration runs to the latest annotation (so v1-style sr/ss spans get their real extent); with no
  annotations the missing value is 0.
- `shared: true` SERVER spans reuse the client's span id for the server half of the same RPC. Both
  halves are real spans and both are kept: the server half gets a fresh deterministic id (the first
  16 hex chars of sha256(trace id + span id + "shared")) and the client half as its parent. Spans
  whose parentId is the shared id and that run in the server half's service are
  re-parented to the server half, since that is where they ran.
- Spans that repeat an id (without `shared`) are kept as they are; the loader drops exact repeats.
- A span without localEndpoint.serviceName takes its annotations' endpoint service, else
  "unknown_service" (as the OpenTelemetry SDKs and ingest.otlp_json name a nameless service).

A record is one span: in strict mode the first malformed one raises DecodeError at "span N" (or
"trace T span S" in the array-of-traces form), 1-based; with `on_bad` it is reported and skipped.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator
from typing import Any, BinaryIO

from ingest.columns import COLUMNS, SpanColumns
from ingest.errors import DecodeError, report
from ingest.span_json import (
    BATCH_SPANS,
    INT64_MAX,
    RECORD_ERRORS,
    UNKNOWN_SERVICE,
    BadRecord,
    collector_paused,
    hex_id,
    micros,
    read_document,
    record_message,
    render_value,
    scope_of,
    type_name,
)

SPAN_KINDS = {"CLIENT": "Client", "SERVER": "Server", "PRODUCER": "Producer", "CONSUMER": "Consumer"}
V1_KINDS = {
    "cs": "Client",
    "cr": "Client",
    "sr": "Server",
    "ss": "Server",
    "ms": "Producer",
    "mr": "Consumer",
}
STATUS_CODES = {"ok": "Ok", "error": "Error", "unset": "Unset"}
NO_PARENT = {None, "", "0000000000000000"}
REMOTE_ATTRIBUTES = (
    ("serviceName", "peer.service"),
    ("ipv4", "net.peer.ip"),
    ("ipv6", "net.peer.ip"),
    ("port", "net.peer.port"),
)
# Positions in a row (COLUMNS order) that the shared-span pass reads or rewrites.
TRACE_ID, SPAN_ID, PARENT_ID, SERVICE = 1, 2, 3, 7


def shared_server_id(trace_id: str, span_id: str) -> str:
    """The fresh, deterministic span id given to the server half of a `shared: true` span."""
    return hashlib.sha256(f"{trace_id}{span_id}shared".encode()).hexdigest()[:16]


def decode(
    stream: BinaryIO, source: str, on_bad: Callable[[DecodeError], None] | None = None
) -> Iterator[SpanColumns]:
    """Decode one Zipkin v2 JSON document into batches of at most BATCH_SPANS spans (the cyclic
    collector paused while the document is parsed and its spans normalised,
    span_json.collector_paused)."""
    with collector_paused():
        rows, shared = _rows(read_document(stream, source), source, on_bad)

    batch = SpanColumns()
    columns = [getattr(batch, name) for name, _, _ in COLUMNS]
    for row in rows:
        if shared:
            server = shared.get((row[TRACE_ID], row[PARENT_ID]))
            if server is not None and server[1] == row[SERVICE] and row[SPAN_ID] != server[0]:
                row[PARENT_ID] = server[0]
        for column, value in zip(columns, row, strict=True):
            column.append(value)
        if len(batch) >= BATCH_SPANS:
            yield batch
            batch = SpanColumns()
            columns = [getattr(batch, name) for name, _, _ in COLUMNS]
    if len(batch):
        yield batch


def _rows(
    document: Any, source: str, on_bad: Callable[[DecodeError], None] | None
) -> tuple[list[list[Any]], dict[tuple[str, str], tuple[str, str]]]:
    """The document's spans as rows of column values (COLUMNS order), and the shared server halves:
    (trace, client id) → (server id, service)."""
    rows: list[list[Any]] = []
    shared: dict[tuple[str, str], tuple[str, str]] = {}
    resources: dict[tuple[str, ...], dict[str, str]] = {}  # one shared dict per distinct endpoint
    for position, raw in _positions(document, source):
        try:
            row, original_id = _normalise(raw, resources)
        except RECORD_ERRORS as error:
            report(DecodeError(source, position, record_message(error)), on_bad)
            continue
        rows.append(row)
        if original_id is not None:
            shared[row[TRACE_ID], original_id] = (row[SPAN_ID], row[SERVICE])
    return rows, shared


def _positions(document: Any, source: str) -> Iterator[tuple[str, Any]]:
    """(position, raw span) for each span, in file order, in the flat or array-of-traces shape."""
    if isinstance(document, dict) and "traceId" in document:
        document = [document]
    if not isinstance(document, list):
        raise DecodeError(source, "byte 0", "not a Zipkin v2 JSON export: expected an array of spans")
    if document and all(isinstance(item, list) for item in document):
        for trace_number, trace in enumerate(document, 1):
            for span_number, span in enumerate(trace, 1):
                yield f"trace {trace_number} span {span_number}", span
        return
    for number, span in enumerate(document, 1):
        yield f"span {number}", span


def _endpoint(value: Any, what: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise BadRecord(f"{what} must be an object, not {type_name(value)}")
    return value


def _string(value: Any, what: str) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise BadRecord(f"{what} must be a string, not {type_name(value)}")
    return value


def _normalise(raw: Any, resources: dict[tuple[str, ...], dict[str, str]]) -> tuple[list[Any], str | None]:
    """One Zipkin span as a row of column values, and its original id if it is a shared server half."""
    if not isinstance(raw, dict):
        raise BadRecord(f"a span must be an object, not {type_name(raw)}")
    try:
        trace_id = hex_id(raw.get("traceId"), 32, "traceId")
        span_id = hex_id(raw.get("id"), 16, "id")
        parent = raw.get("parentId")
        parent_span_id = "" if parent in NO_PARENT else hex_id(parent, 16, "parentId")
        annotations = _annotations(raw.get("annotations"))
        start = raw.get("timestamp")
        start_ns = (
            micros(start, "timestamp") if start is not None else min((a[0] for a in annotations), default=0)
        )
        duration = raw.get("duration")
        if duration is not None:
            duration_ns = micros(duration, "duration")
        else:
            end_ns = max((a[0] for a in annotations), default=start_ns)
            duration_ns = max(0, end_ns - start_ns)
    except ValueError as error:
        raise BadRecord(str(error)) from None
    if start_ns + duration_ns > INT64_MAX:
        raise BadRecord("timestamp + duration is out of range (after year 2262)")
    name = _string(raw.get("name"), "name")

    local = _endpoint(raw.get("localEndpoint"), "localEndpoint")
    remote = _endpoint(raw.get("remoteEndpoint"), "remoteEndpoint")
    service = _string(local.get("serviceName"), "localEndpoint serviceName")
    if not service:
        service = next((a[2] for a in annotations if a[2]), UNKNOWN_SERVICE)

    kind = raw.get("kind")
    if kind is None:
        inferred = {V1_KINDS[a[1]] for a in annotations if a[1] in V1_KINDS}
        span_kind = inferred.pop() if len(inferred) == 1 else "Unspecified"
    elif kind in SPAN_KINDS:
        span_kind = SPAN_KINDS[kind]
    else:
        raise BadRecord(f"kind {render_value(kind)[:40]!r} is not CLIENT, SERVER, PRODUCER or CONSUMER")

    attributes = _tags(raw)
    if remote:
        for key, attribute in REMOTE_ATTRIBUTES:
            if remote.get(key) and attribute not in attributes:
                attributes[attribute] = render_value(remote[key])
    host = render_value(local.get("ipv4") or local.get("ipv6") or "")
    port = render_value(local.get("port") or "")
    resource = resources.get((service, host, port))
    if resource is None:
        resource = {"service.name": service}
        if host:
            resource["net.host.ip"] = host
        if port:
            resource["net.host.port"] = port
        resources[service, host, port] = resource

    status_code, status_message = "Unset", ""
    otel_status = attributes.pop("otel.status_code", None)
    description = attributes.pop("otel.status_description", None)
    if otel_status is not None and otel_status.lower() in STATUS_CODES:
        status_code = STATUS_CODES[otel_status.lower()]
        status_message = description or ""
    elif "error" in attributes:
        message = attributes.pop("error")
        status_code = "Error"
        status_message = description or ("" if message.lower() in ("", "true") else message)
    elif description is not None:
        attributes["otel.status_description"] = description
    scope_name, scope_version = scope_of(attributes)

    original_id = None
    if raw.get("shared") is True and span_kind == "Server":
        original_id = span_id
        parent_span_id = span_id
        span_id = shared_server_id(trace_id, span_id)

    events = [(ts, value, {}) for ts, value, _ in annotations] if annotations else []
    row = [
        start_ns, trace_id, span_id, parent_span_id, "", name, span_kind, service, resource, scope_name,
        scope_version, attributes, duration_ns, status_code, status_message, events, [],
    ]  # fmt: skip
    return row, original_id


def _annotations(raw: Any) -> list[tuple[int, str, str]]:
    """Annotations as (timestamp ns, value, endpoint service name), in file order."""
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise BadRecord(f"annotations must be an array, not {type_name(raw)}")
    out = []
    for annotation in raw:
        if not isinstance(annotation, dict):
            raise BadRecord(f"an annotation must be an object, not {type_name(annotation)}")
        timestamp_ns = micros(annotation.get("timestamp"), "annotation timestamp")
        value = _string(annotation.get("value"), "annotation value")
        endpoint = _endpoint(annotation.get("endpoint"), "annotation endpoint")
        out.append((timestamp_ns, value, _string(endpoint.get("serviceName"), "endpoint serviceName")))
    return out


def _tags(raw: dict[str, Any]) -> dict[str, str]:
    tags = raw.get("tags")
    if tags is None:
        tags = {}
    if not isinstance(tags, dict):
        raise BadRecord(f"tags must be an object, not {type_name(tags)}")
    attributes = {
        key: value if value.__class__ is str else render_value(value) for key, value in tags.items()
    }
    binary = raw.get("binaryAnnotations")
    if binary is not None:
        if not isinstance(binary, list):
            raise BadRecord(f"binaryAnnotations must be an array, not {type_name(binary)}")
        for item in binary:
            if not isinstance(item, dict) or not isinstance(item.get("key"), str):
                raise BadRecord("each binaryAnnotation must be an object with a string 'key'")
            attributes.setdefault(item["key"], render_value(item.get("value")))
    return attributes
