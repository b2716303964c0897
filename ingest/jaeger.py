"""Jaeger UI JSON ("Download JSON" / the query API's /api/traces) → SpanColumns.

Shapes: `{"data": [trace, ...]}`, a bare array of traces, one trace object, or a bare array of UI
spans each carrying its own `process` (what Jaeger's anonymizer writes). A trace is
`{traceID, spans: [...], processes: {id: {serviceName, tags}}}`; unknown keys (`_comment`, `warnings`)
are ignored. Normalisation follows the Collector's Jaeger translator:

- times are µs in the file, ns in the store; ids are hex, left-padded (trace 32, span 16), lowercase
- parent: the first CHILD_OF reference to the same trace, else the first CHILD_OF, else the first
  reference; every other reference, and every FOLLOWS_FROM one, becomes a Link carrying
  `opentracing.ref_type` = `child_of` / `follows_from`
- tags become SpanAttributes, except those the translator turns into span fields: `span.kind`,
  `otel.status_code` / `otel.status_description`, `error` (true → StatusCode Error), `w3c.tracestate`,
  `otel.scope.name` / `otel.scope.version` (and the older `otel.library.*`)
- the span's process gives ServiceName and ResourceAttributes (its tags plus `service.name`)
- logs become Events named by their `event` field, or "log"

A record is one span (or a trace whose shape is wrong): in strict mode the first malformed one raises
DecodeError at "trace T span S" (1-based; "span S" in a bare array of spans); with `on_bad` it is
reported and skipped. Spans that repeat an id are kept as they are (Jaeger's own UI fixture has
such a pair; the loader drops only exact repeats). A span whose processID is missing from
`processes` is malformed: Jaeger always writes it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, BinaryIO

from ingest.columns import SpanColumns
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

SPAN_KINDS = {
    "client": "Client",
    "server": "Server",
    "producer": "Producer",
    "consumer": "Consumer",
    "internal": "Internal",
}
STATUS_CODES = {"ok": "Ok", "error": "Error", "unset": "Unset"}
REF_TYPES = {"CHILD_OF": "child_of", "FOLLOWS_FROM": "follows_from"}


def decode(
    stream: BinaryIO, source: str, on_bad: Callable[[DecodeError], None] | None = None
) -> Iterator[SpanColumns]:
    """Decode one Jaeger UI JSON document into batches of at most BATCH_SPANS spans (the cyclic
    collector paused while the document is parsed and each batch made, span_json.collector_paused)."""
    with collector_paused():
        traces = _traces(read_document(stream, source), source)
        spans = _bare_spans(traces) if _is_span_array(traces) else _trace_spans(traces, source, on_bad)
    while True:
        with collector_paused():
            batch = _next_batch(spans, source, on_bad)
        if len(batch):
            yield batch
        if len(batch) < BATCH_SPANS:
            return


def _next_batch(
    spans: Iterator[Located], source: str, on_bad: Callable[[DecodeError], None] | None
) -> SpanColumns:
    """The next spans, up to BATCH_SPANS of them (fewer: the document's last)."""
    batch = SpanColumns()
    for position, span, processes, trace_id in spans:
        try:
            _append_span(batch, span, processes, trace_id)
        except RECORD_ERRORS as error:
            report(DecodeError(source, position, record_message(error)), on_bad)
            continue
        if len(batch) >= BATCH_SPANS:
            break
    return batch


Located = tuple[str, Any, dict[str, Any], str]  # (position for errors, span, processes, trace id)


def _trace_spans(
    traces: list[Any], source: str, on_bad: Callable[[DecodeError], None] | None
) -> Iterator[Located]:
    for trace_number, trace in enumerate(traces, 1):
        try:
            spans, processes, trace_id = _trace_parts(trace)
        except RECORD_ERRORS as error:
            report(DecodeError(source, f"trace {trace_number}", record_message(error)), on_bad)
            continue
        for span_number, span in enumerate(spans, 1):
            yield f"trace {trace_number} span {span_number}", span, processes, trace_id


def _bare_spans(spans: list[Any]) -> Iterator[Located]:
    """A bare array of spans, each with its own traceID and `process` object."""
    for span_number, span in enumerate(spans, 1):
        yield f"span {span_number}", span, {}, ""


def _is_span_array(items: list[Any]) -> bool:
    """A bare array of UI spans (the anonymizer's output): its first object is a span, not a trace."""
    first = next((item for item in items if isinstance(item, dict)), None)
    return first is not None and "spans" not in first and ("spanID" in first or "operationName" in first)


def _traces(document: Any, source: str) -> list[Any]:
    """The list of trace objects in any of the three shapes; DecodeError for anything else."""
    if isinstance(document, list):
        return document
    if isinstance(document, dict):
        if "data" in document:
            data = document["data"]
            if isinstance(data, list):
                return data
            errors = document.get("errors")
            if data is None and errors:
                raise DecodeError(source, "data", f"Jaeger API error response: {render_value(errors)[:300]}")
            if data is None:
                return []
            raise DecodeError(source, "data", f"'data' must be an array of traces, not {type_name(data)}")
        if "spans" in document:
            return [document]
    raise DecodeError(
        source,
        "byte 0",
        'not a Jaeger UI JSON export: expected {"data": [traces]}, an array of traces or spans, or one trace',
    )


def _trace_parts(trace: Any) -> tuple[list[Any], dict[str, tuple[str, dict[str, str]]], str]:
    """A trace's spans, its processes as (service name, resource attributes), and its trace id."""
    if not isinstance(trace, dict):
        raise BadRecord(f"a trace must be an object, not {type_name(trace)}")
    spans = trace.get("spans")
    if not isinstance(spans, list):
        raise BadRecord(f"trace 'spans' must be an array, not {type_name(spans)}")
    raw_processes = trace.get("processes")
    processes: dict[str, tuple[str, dict[str, str]]] = {}
    if raw_processes is not None:
        if not isinstance(raw_processes, dict):
            raise BadRecord(f"trace 'processes' must be an object, not {type_name(raw_processes)}")
        for key, process in raw_processes.items():
            processes[key] = _process(process, f"process {key!r}")
    trace_id = trace.get("traceID")
    return spans, processes, trace_id if isinstance(trace_id, str) and trace_id else ""


def _process(process: Any, what: str) -> tuple[str, dict[str, str]]:
    if not isinstance(process, dict):
        raise BadRecord(f"{what} must be an object, not {type_name(process)}")
    service = process.get("serviceName")
    if service is not None and not isinstance(service, str):
        raise BadRecord(f"{what} serviceName must be a string, not {type_name(service)}")
    service = service or UNKNOWN_SERVICE
    attributes = _key_values(process.get("tags"), f"{what} tags")
    attributes["service.name"] = service
    return service, attributes


def _key_values(items: Any, what: str) -> dict[str, str]:
    """Jaeger tags/fields `[{key, type, value}]` as a string map (values rendered by their JSON type)."""
    if items is None:
        return {}
    if not isinstance(items, list):
        raise BadRecord(f"{what} must be an array, not {type_name(items)}")
    out: dict[str, str] = {}
    for item in items:
        if not isinstance(item, dict):
            raise BadRecord(f"{what}: each entry must be an object, not {type_name(item)}")
        key = item.get("key")
        if not isinstance(key, str):
            raise BadRecord(f"{what}: 'key' must be a string, not {type_name(key)}")
        out[key] = render_value(item.get("value"))
    return out


def _append_span(
    batch: SpanColumns, span: Any, processes: dict[str, tuple[str, dict[str, str]]], trace_trace_id: str
) -> None:
    """Validate and normalise one span, then append it (nothing is appended if it is malformed)."""
    if not isinstance(span, dict):
        raise BadRecord(f"a span must be an object, not {type_name(span)}")
    try:
        trace_id = hex_id(span.get("traceID") or trace_trace_id or None, 32, "traceID")
        span_id = hex_id(span.get("spanID"), 16, "spanID")
        start_ns = micros(span.get("startTime"), "startTime")
        duration_ns = micros(span.get("duration"), "duration")
    except ValueError as error:
        raise BadRecord(str(error)) from None
    if start_ns + duration_ns > INT64_MAX:
        raise BadRecord("startTime + duration is out of range (after year 2262)")
    name = span.get("operationName")
    if name is None:
        name = ""
    if not isinstance(name, str):
        raise BadRecord(f"operationName must be a string, not {type_name(name)}")

    if isinstance(span.get("process"), dict):
        service, resource = _process(span["process"], "span process")
    else:
        process_id = span.get("processID")
        if process_id not in processes:
            if process_id is None:
                raise BadRecord("span has no processID (and no process), so no service name")
            raise BadRecord(f"processID {render_value(process_id)[:40]!r} is not in the trace's processes")
        service, resource = processes[process_id]

    parent_span_id, links = _references(span, trace_id)

    attributes = _key_values(span.get("tags"), "tags")
    span_kind = "Unspecified"
    kind = attributes.pop("span.kind", None)
    if kind is not None:
        span_kind = SPAN_KINDS.get(kind.lower(), "Unspecified")
    status_code, status_message = "Unset", ""
    otel_status = attributes.pop("otel.status_code", None)
    description = attributes.pop("otel.status_description", None)
    if otel_status is not None and otel_status.lower() in STATUS_CODES:
        status_code = STATUS_CODES[otel_status.lower()]
        status_message = description or ""
    elif attributes.get("error") == "true":
        del attributes["error"]
        status_code, status_message = "Error", description or ""
    elif description is not None:
        attributes["otel.status_description"] = description
    trace_state = attributes.pop("w3c.tracestate", "")
    scope_name, scope_version = scope_of(attributes)

    events = _events(span.get("logs"), start_ns)

    batch.timestamp_ns.append(start_ns)
    batch.trace_id.append(trace_id)
    batch.span_id.append(span_id)
    batch.parent_span_id.append(parent_span_id)
    batch.trace_state.append(trace_state)
    batch.span_name.append(name)
    batch.span_kind.append(span_kind)
    batch.service_name.append(service)
    batch.resource_attributes.append(resource)
    batch.scope_name.append(scope_name)
    batch.scope_version.append(scope_version)
    batch.span_attributes.append(attributes)
    batch.duration_ns.append(duration_ns)
    batch.status_code.append(status_code)
    batch.status_message.append(status_message)
    batch.events.append(events)
    batch.links.append(links)


def _references(
    span: dict[str, Any], trace_id: str
) -> tuple[str, list[tuple[str, str, str, dict[str, str]]]]:
    """(parent span id, links) from the span's references (or the legacy parentSpanID field)."""
    raw = span.get("references")
    if raw is None:
        raw = []
    if not isinstance(raw, list):
        raise BadRecord(f"references must be an array, not {type_name(raw)}")
    refs: list[tuple[str, str, str]] = []
    for ref in raw:
        if not isinstance(ref, dict):
            raise BadRecord(f"a reference must be an object, not {type_name(ref)}")
        ref_type = ref.get("refType", "CHILD_OF")
        if ref_type not in REF_TYPES:
            raise BadRecord(
                f"reference refType {render_value(ref_type)[:40]!r} is not CHILD_OF or FOLLOWS_FROM"
            )
        try:
            ref_trace = hex_id(ref.get("traceID") or trace_id, 32, "reference traceID")
            ref_span = hex_id(ref.get("spanID"), 16, "reference spanID")
        except ValueError as error:
            raise BadRecord(str(error)) from None
        refs.append((REF_TYPES[ref_type], ref_trace, ref_span))

    if not refs:
        legacy = span.get("parentSpanID")
        if legacy in (None, "", "0", "0000000000000000"):
            return "", []
        try:
            return hex_id(legacy, 16, "parentSpanID"), []
        except ValueError as error:
            raise BadRecord(str(error)) from None

    if len(refs) == 1 and refs[0][0] == "child_of":  # the usual case: one parent, no links
        return refs[0][2], []
    parent = next((i for i, r in enumerate(refs) if r[0] == "child_of" and r[1] == trace_id), None)
    if parent is None:
        parent = next((i for i, r in enumerate(refs) if r[0] == "child_of"), 0)
    links = [
        (ref_trace, ref_span, "", {"opentracing.ref_type": ref_type})
        for i, (ref_type, ref_trace, ref_span) in enumerate(refs)
        if i != parent or ref_type == "follows_from"
    ]
    return refs[parent][2], links


def _events(logs: Any, start_ns: int) -> list[tuple[int, str, dict[str, str]]]:
    if logs is None:
        return []
    if not isinstance(logs, list):
        raise BadRecord(f"logs must be an array, not {type_name(logs)}")
    events = []
    for log in logs:
        if not isinstance(log, dict):
            raise BadRecord(f"a log must be an object, not {type_name(log)}")
        timestamp = log.get("timestamp")
        try:
            timestamp_ns = start_ns if timestamp is None else micros(timestamp, "log timestamp")
        except ValueError as error:
            raise BadRecord(str(error)) from None
        fields = _key_values(log.get("fields"), "log fields")
        name = fields.pop("event", None) or "log"
        events.append((timestamp_ns, name, fields))
    return events
