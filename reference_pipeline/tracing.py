"""Tracing for the pipeline's processes: OTel SDK providers, an OTLP/JSON-lines file exporter, GC pauses.

`OtlpJsonLinesExporter` writes each export call as one `ExportTraceServiceRequest` in OTLP/JSON on
one line, the shape the Collector's file exporter writes: camelCase fields, hex trace/span ids,
integer enums, 64-bit integers as decimal strings. It serialises ReadableSpans directly (no
protobuf round trip) because the exporter runs in the traced process, where its cost is overhead.

`GcPauseLog` times every collection through `gc.callbacks` and keeps the pauses that can matter to
a latency tail: every generation-1 and -2 collection, and a generation-0 one only when it took at
least `MIN_YOUNG_PAUSE_NS` (1 ms). A young collection takes ~60 µs and runs ~70 times a second under
load, so recording each on every request in flight cost more than the rest of the tracing together:
an overloaded run carried ~110 events per request, and the spans that held them lengthened the full
collections they were meant to report. The callback only appends a tuple: touching spans from
inside a collection could deadlock on a span's lock held by the interrupted code. Instead
`attach_gc_events(root)` runs just before a request root span ends and adds one `python.gc` event
per pause that overlapped the request, which is the same as recording the pause on every root span
in flight at that moment.
"""

from __future__ import annotations

import gc
import os
import socket
import threading
import time
import uuid
from collections.abc import Sequence
from pathlib import Path

import orjson
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.trace import Status, StatusCode

from reference_pipeline import span_model
from reference_pipeline.otlp_values import key_values

SCOPE = "tailscope.reference_pipeline"
_KIND = {"INTERNAL": 1, "SERVER": 2, "CLIENT": 3, "PRODUCER": 4, "CONSUMER": 5}
_STATUS = {"UNSET": 0, "OK": 1, "ERROR": 2}


def span_to_otlp(span: ReadableSpan) -> dict:
    # each ReadableSpan property builds a fresh proxy or tuple: read each once
    ctx, parent, attributes = span.context, span.parent, span.attributes
    events, links = span.events, span.links
    out: dict = {
        "traceId": f"{ctx.trace_id:032x}",
        "spanId": f"{ctx.span_id:016x}",
        "name": span.name,
        "kind": _KIND[span.kind.name],
        "startTimeUnixNano": str(span.start_time),
        "endTimeUnixNano": str(span.end_time),
    }
    if parent is not None:
        out["parentSpanId"] = f"{parent.span_id:016x}"
    if attributes:
        out["attributes"] = key_values(attributes)
    if events:
        out["events"] = [
            {"timeUnixNano": str(e.timestamp), "name": e.name, "attributes": key_values(e.attributes)}
            for e in events
        ]
    if links:
        out["links"] = [
            {
                "traceId": f"{link.context.trace_id:032x}",
                "spanId": f"{link.context.span_id:016x}",
                "attributes": key_values(link.attributes),
            }
            for link in links
        ]
    status = span.status
    if status.status_code is not StatusCode.UNSET:
        out["status"] = {
            "code": _STATUS[status.status_code.name],
            **({"message": status.description} if status.description else {}),
        }
    return out


def encode_request(spans: Sequence[ReadableSpan]) -> dict:
    """An ExportTraceServiceRequest (OTLP/JSON) grouping spans by resource, then by scope."""
    by_resource: dict[int, tuple[Resource, dict]] = {}
    for span in spans:
        _, scopes = by_resource.setdefault(id(span.resource), (span.resource, {}))
        scope = span.instrumentation_scope
        key = (scope.name, scope.version) if scope else ("", None)
        scopes.setdefault(key, []).append(span_to_otlp(span))
    return {
        "resourceSpans": [
            {
                "resource": {"attributes": key_values(resource.attributes)},
                "scopeSpans": [
                    {"scope": {"name": name, **({"version": version} if version else {})}, "spans": items}
                    for (name, version), items in scopes.items()
                ],
            }
            for resource, scopes in by_resource.values()
        ]
    }


class OtlpJsonLinesExporter(SpanExporter):
    """Appends one OTLP/JSON ExportTraceServiceRequest per export call to a file."""

    def __init__(self, path: Path) -> None:
        self._file = open(path, "ab")  # noqa: SIM115 - closed in shutdown()
        self._lock = threading.Lock()

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        line = orjson.dumps(encode_request(spans)) + b"\n"
        with self._lock:
            if self._file.closed:
                return SpanExportResult.FAILURE
            self._file.write(line)
            self._file.flush()
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        with self._lock:
            self._file.close()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True


# Export small batches often: a span waiting in the processor's queue survives young collections
# and is traversed again by every generation-1 one (and generation-2, once promoted). With the
# SDK's defaults for a file (2,048 spans or 5 s), a saturated service spent 20-56 ms per 4 s in
# generation-1 collections while traced against 2-3 ms untraced; at 512 spans or 250 ms, 11-16 ms.
EXPORT_BATCH_SPANS = 512
EXPORT_EVERY_MS = 250


def make_provider(
    service_name: str, attributes: dict, out: Path | None, otlp_endpoint: str | None = None
) -> TracerProvider:
    """A TracerProvider with the resource attributes span_model asks for and the requested exporters."""
    resource = Resource.create(
        {
            "service.name": service_name,
            "host.name": socket.gethostname(),
            "service.instance.id": str(uuid.uuid4()),
            "process.pid": os.getpid(),
            **{k: v for k, v in attributes.items() if v is not None},
        }
    )
    provider = TracerProvider(resource=resource)
    if out is not None:
        provider.add_span_processor(
            BatchSpanProcessor(
                OtlpJsonLinesExporter(out),
                max_queue_size=65536,
                max_export_batch_size=EXPORT_BATCH_SPANS,
                schedule_delay_millis=EXPORT_EVERY_MS,
            )
        )
    if otlp_endpoint:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        endpoint = otlp_endpoint.rstrip("/")
        if not endpoint.endswith("/v1/traces"):
            endpoint += "/v1/traces"
        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint)))
    return provider


def stage_attrs(name: str, **extra) -> dict:
    return {"tailscope.stage": span_model.STAGE_OF[name], **extra}


class StageSpan:
    """`with StageSpan(tracer, name, attributes) as span:` starts a span on entry and ends it on exit,
    recording an exception that escapes the block as `start_as_current_span` does (an exception
    event and an ERROR status). It is a plain class rather than the SDK's two nested generator
    context managers, and it makes the span current only when asked (`current=True`: spans with
    children, or whose context is propagated); a leaf is parented on the current span without
    becoming it. Both save a few microseconds per span on the request path."""

    __slots__ = ("_attributes", "_current", "_kind", "_name", "_span", "_token", "_tracer")

    def __init__(
        self,
        tracer: trace.Tracer,
        name: str,
        attributes: dict,
        kind: trace.SpanKind = trace.SpanKind.INTERNAL,
        current: bool = False,
    ) -> None:
        self._tracer, self._name, self._kind, self._attributes = tracer, name, kind, attributes
        self._current = current
        self._token: object | None = None

    def __enter__(self) -> trace.Span:
        self._span = span = self._tracer.start_span(self._name, kind=self._kind, attributes=self._attributes)
        if self._current:
            self._token = otel_context.attach(trace.set_span_in_context(span))
        return span

    def __exit__(self, exc_type, exc, tb) -> None:
        span = self._span
        if self._token is not None:
            otel_context.detach(self._token)
        if isinstance(exc, Exception) and span.is_recording():
            span.record_exception(exc)
            span.set_status(Status(StatusCode.ERROR, f"{type(exc).__name__}: {exc}"))
        span.end()


MIN_YOUNG_PAUSE_NS = 1_000_000


class GcPauseLog:
    """Times garbage collections via gc.callbacks; pauses are (start_ns, end_ns, generation, collected).
    Generation-0 collections shorter than MIN_YOUNG_PAUSE_NS are timed but not kept."""

    def __init__(self, keep: int = 20000) -> None:
        # A plain list: append is atomic under the GIL and readers index from the end, so a pause
        # recorded by another thread mid-read never breaks an iteration (a deque would raise).
        self.pauses: list[tuple[int, int, int, int]] = []
        self._keep = keep
        self._start = 0
        self.total_ns = [0, 0, 0]  # time in collections by generation, kept or not (for benchmarks)

    def _callback(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._start = time.time_ns()
        else:
            end, generation = time.time_ns(), info["generation"]
            self.total_ns[generation] += end - self._start
            if generation or end - self._start >= MIN_YOUNG_PAUSE_NS:
                self.pauses.append((self._start, end, generation, info["collected"]))

    def install(self) -> None:
        gc.callbacks.append(self._callback)

    def uninstall(self) -> None:
        if self._callback in gc.callbacks:
            gc.callbacks.remove(self._callback)

    def overlapping(self, start_ns: int, end_ns: int) -> list[tuple[int, int, int, int]]:
        if len(self.pauses) > 2 * self._keep:
            del self.pauses[: self._keep]
        found = []
        i = len(self.pauses) - 1
        while i >= 0:  # newest first; stop once pauses end before the request started
            pause = self.pauses[i]
            if pause[1] < start_ns:
                break
            if pause[0] <= end_ns:
                found.append(pause)
            i -= 1
        return found[::-1]

    def attach_gc_events(self, root: trace.Span, start_ns: int) -> int:
        pauses = self.overlapping(start_ns, time.time_ns())
        for begin, end, generation, collected in pauses:
            root.add_event(
                span_model.GC_EVENT,
                {"gc.generation": generation, "gc.duration_ns": end - begin, "gc.collected": collected},
                timestamp=begin,
            )
        return len(pauses)
