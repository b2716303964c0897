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

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

from reference_pipeline.otlp_json import request_line
from reference_pipeline.request_span import RequestTracer
from tailscope.instrument.sampling import SamplingProcessor

SCOPE = "tailscope.reference_pipeline"


class OtlpJsonLinesExporter(SpanExporter):
    """Appends one OTLP/JSON ExportTraceServiceRequest per export call to a file."""

    def __init__(self, path: Path) -> None:
        self._file = open(path, "ab")  # noqa: SIM115 - closed in shutdown()
        self._lock = threading.Lock()

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        line = request_line(spans) + b"\n"
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


def request_tracer(provider: TracerProvider, scope_name: str = SCOPE) -> RequestTracer:
    """The pipeline's tracer: the provider's, with light mode's request spans made the cheap way
    (reference_pipeline.request_span)."""
    return RequestTracer(provider.get_tracer(scope_name), scope_name)


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
