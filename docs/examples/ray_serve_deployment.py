"""A Ray Serve deployment with dynamic batching, instrumented for tailscope: copy what you need.

    pip install "ray[serve]" tailscope opentelemetry-exporter-otlp-proto-http
    tailscope collect --host 0.0.0.0 &                 # where the replicas send their spans
    OTEL_EXPORTER_OTLP_ENDPOINT=http://COLLECT_HOST:4318 serve run ray_serve_deployment:app

Each replica is its own process, so each sets up its OpenTelemetry provider in `__init__`. Ray Serve
queues requests for `@serve.batch` without a span of its own: the request records when it entered
the queue and the batch records when it started, so the wait becomes a `queue` span and the forward
pass a `model_forward` span in every request of the batch. The model is a stand-in: replace
`score_batch` with yours.
"""

from __future__ import annotations

import math
import os
import time

from opentelemetry import propagate
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.trace import SpanKind
from ray import serve
from starlette.requests import Request

from tailscope import instrument as ts


def score_batch(texts: list[str]) -> list[float]:
    """Stand-in model: one score per text."""
    return [1 / (1 + math.exp(-len(t.split()) / 10)) for t in texts]


@serve.deployment(max_ongoing_requests=64)
class Scorer:
    def __init__(self) -> None:
        instance = f"replica-{os.getpid()}"
        resource = Resource.create({"service.name": "scorer", "service.instance.id": instance})
        self.provider = TracerProvider(resource=resource)
        self.provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
        self.tracer = self.provider.get_tracer("scorer")
        ts.use(self.provider)  # a provider of the replica's own, not the global one
        ts.install()

    @serve.batch(max_batch_size=16, batch_wait_timeout_s=0.005)
    async def forward(self, items: list[tuple[int, str]]) -> list[tuple[int, int, int, float]]:
        started = time.time_ns()
        scores = score_batch([text for _, text in items])
        ended = time.time_ns()
        return [(enqueued, started, ended, score) for (enqueued, _), score in zip(items, scores, strict=True)]

    async def __call__(self, request: Request) -> dict[str, float]:
        parent = propagate.extract(dict(request.headers))  # the caller's trace, if it sent one
        with self.tracer.start_as_current_span("POST /score", context=parent, kind=SpanKind.SERVER) as root:
            started = time.time_ns()
            with ts.stage("parsing", "read_body"):
                text = (await request.json())["text"]
            enqueued, batch_started, batch_ended, score = await self.forward((time.time_ns(), text))
            ts.record_queue_wait(enqueued, batch_started, span_name="serve.batch.wait")
            ts.record_span("model_forward", "score_batch", batch_started, batch_ended)
            with ts.stage("serialization", "respond"):
                body = {"score": round(score, 6)}
            ts.attach_gc_pauses(root, started)  # pauses in this request, on its own span
        return body

    def __del__(self) -> None:
        self.provider.shutdown()


app = Scorer.bind()
