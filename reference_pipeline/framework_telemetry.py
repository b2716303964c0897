"""The model stage traced the way Triton Inference Server traces it (its OpenTelemetry trace mode),
instead of the pipeline's own `batch.queue_wait` and `model.forward` spans.

Triton records a request to a model as a *model span* (named after the model, attributes
model_name, model_version, request_id, with events REQUEST_START, QUEUE_START, REQUEST_END) and a
child *compute span* (events COMPUTE_START, COMPUTE_INPUT_END, COMPUTE_OUTPUT_START, COMPUTE_END):
triton-inference-server/server docs/user_guide/trace.md, "OpenTelemetry trace support". No
`tailscope.stage` attribute and no stage names: tailscope's phase rules must find the queue,
input, infer and output phases from the events alone, which is what the end-to-end tests check.
"""

from __future__ import annotations

from typing import Any

from opentelemetry import trace

COMPUTE_SPAN = "compute"


def record_triton_style(
    tracer: trace.Tracer,
    model_name: str,
    request_id: str,
    enqueued_ns: int,
    started_ns: int,
    ended_ns: int,
    marks: dict[str, int],
    attributes: dict[str, Any] | None = None,
) -> None:
    """A model span and its compute span, as children of the current span, with Triton's events.
    `marks`: the model's input_end / output_start (ns); missing marks collapse onto the ends."""
    input_end = marks.get("input_end", started_ns)
    output_start = max(marks.get("output_start", ended_ns), input_end)
    attrs = {"model_name": model_name, "model_version": "1", "request_id": request_id, **(attributes or {})}
    model = tracer.start_span(model_name, start_time=enqueued_ns, attributes=attrs)
    model.add_event("REQUEST_START", timestamp=enqueued_ns)
    model.add_event("QUEUE_START", timestamp=enqueued_ns)
    compute = tracer.start_span(
        COMPUTE_SPAN, context=trace.set_span_in_context(model), start_time=started_ns, attributes=attrs
    )
    compute.add_event("COMPUTE_START", timestamp=started_ns)
    compute.add_event("COMPUTE_INPUT_END", timestamp=input_end)
    compute.add_event("COMPUTE_OUTPUT_START", timestamp=output_start)
    compute.add_event("COMPUTE_END", timestamp=ended_ns)
    compute.end(end_time=ended_ns)
    model.add_event("REQUEST_END", timestamp=ended_ns)
    model.end(end_time=ended_ns)
