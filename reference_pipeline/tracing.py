"""Tracing for the pipeline's processes: OTel SDK providers, an OTLP/JSON-lines file exporter, GC pauses.

`OtlpJsonLinesExporter` writes each export call as one `ExportTraceServiceRequest` in OTLP/JSON on
one line, the shape the Collector's file exporter writes: camelCase fields, hex trace/span ids,
integer enums, 64-bit integers as decimal strings. It serialises ReadableSpans directly (no
protobuf round trip) because the exporter runs in the traced process, where its cost is overhead.

Stage spans, GC pause events, lock and queue waits come from `tailscope.instrument`, the module users
add to their own services: one implementation, so what the pipeline measures about its cost (bench/
RESULTS.md) holds for theirs.
"""

from __future__ import annotations

import os
import socket
import threading
import uuid
import weakref
from collections.abc import Callable, Sequence
from pathlib import Path

import orjson
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.trace import StatusCode

from reference_pipeline.otlp_values import key_values
from tailscope.instrument.sampling import SamplingProcessor

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


_SAMPLERS: weakref.WeakKeyDictionary[TracerProvider, SamplingProcessor] = weakref.WeakKeyDictionary()


def sampler_of(provider: TracerProvider | None) -> SamplingProcessor | None:
    """The SamplingProcessor make_provider put in front of the exporters, if it did."""
    return _SAMPLERS.get(provider) if provider is not None else None


def make_provider(
    service_name: str,
    attributes: dict,
    out: Path | None,
    otlp_endpoint: str | None = None,
    *,
    sample_rate: float = 1.0,
    keep_slower_than_ms: float | None = None,
    on_late_keep: Callable[[int], None] | None = None,
) -> TracerProvider:
    """A TracerProvider with the resource attributes span_model asks for and the requested exporters.
    With sample_rate < 1 or a keep_slower_than_ms rule, every exporter sits behind one
    SamplingProcessor (tailscope.instrument.sampling; `sampler_of(provider)` finds it)."""
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
    sampling = sample_rate < 1.0 or keep_slower_than_ms is not None

    def add(processor: SpanProcessor) -> None:
        if sampling:
            sampler = SamplingProcessor(processor, sample_rate, keep_slower_than_ms, on_late_keep)
            _SAMPLERS.setdefault(provider, sampler)
            processor = sampler
        provider.add_span_processor(processor)

    if out is not None:
        add(
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
        add(BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint)))
    return provider


def traced_provider(cfg, resource: dict, args, on_late_keep: Callable[[int], None] | None = None):
    """A service process's TracerProvider for its config's tracing mode and sampling (cfg: a
    scenarios.ServiceConfig; args: --trace-out, --otlp-endpoint), set for tailscope.instrument."""
    from reference_pipeline import span_model as sm
    from tailscope import instrument as ts

    provider = make_provider(
        sm.SERVICE_NAME,
        resource,
        args.trace_out,
        args.otlp_endpoint,
        sample_rate=cfg.sample_rate,
        keep_slower_than_ms=cfg.keep_slower_than_ms,
        on_late_keep=on_late_keep,
    )
    ts.use(provider)  # stage spans, waits and GC events go through the same provider
    ts.set_mode(cfg.tracing_mode)
    return provider
