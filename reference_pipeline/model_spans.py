"""The model stage's spans of one request, from its batch's timings: `batch.queue_wait` and
`model.forward` (light mode: into the request's tally). Written by the request path where the model
runs in-process and by the model process for a front end's request (reference_pipeline.handoff)."""

from __future__ import annotations

from opentelemetry.trace import Link, SpanContext

from reference_pipeline import span_model as sm
from reference_pipeline.batcher import BatchResult
from reference_pipeline.scenarios import ServiceConfig
from tailscope import instrument as ts
from tailscope.instrument.light import tally_only


def record_model_spans(cfg: ServiceConfig, parent: SpanContext, result: BatchResult) -> None:
    """Record the queue wait and the forward pass under the current span, whose context is `parent`;
    the forward links to the batch's first request where that is another request. In light mode
    the two intervals go straight into the request's tally (no link: there is no span to carry it)."""
    enqueued, started, ended = result.enqueued_ns, result.started_ns, result.ended_ns
    if tally_only(("queue", enqueued, started), ("model_forward", started, ended)):
        return
    ts.record_queue_wait(
        result.enqueued_ns,
        result.started_ns,
        span_name=sm.QUEUE_WAIT,
        batch_size=result.batch_size,
        queue_depth=result.queue_depth,
    )
    links = [] if result.first_tag == parent else [Link(result.first_tag)]
    attrs = {
        "device": cfg.device,
        "dtype": cfg.dtype,
        "batch.size": result.batch_size,
        "batch.queue_depth": result.queue_depth,
    }
    ts.record_span("model_forward", sm.FORWARD, result.started_ns, result.ended_ns, attrs, links)
