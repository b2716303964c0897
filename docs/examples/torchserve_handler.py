"""A TorchServe handler instrumented for tailscope: copy what you need.

    pip install torchserve torch-model-archiver tailscope opentelemetry-exporter-otlp-proto-http
    torch-model-archiver --model-name scorer --version 1.0 --serialized-file model.pt \
        --handler torchserve_handler.py
    OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4318 torchserve --start --model-store . \
        --models scorer=scorer.mar
    tailscope collect &

TorchServe hands the handler a batch of requests (`batch_size` / `max_batch_delay` in the model's
config); its own metrics give QueueTime and HandlerTime per batch, not per request. Here every
request of the batch gets its own SERVER span (parented on the caller's `traceparent` header when
there is one), with preprocessing per request and the batch's forward pass recorded in each, so
the waterfall and the diagnosis see per-request stages.
"""

from __future__ import annotations

import json
import time

import torch
from opentelemetry import propagate, trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.trace import SpanKind
from ts.torch_handler.base_handler import BaseHandler

from tailscope import instrument as ts

TRACE_HEADERS = ("traceparent", "tracestate")


class TracedHandler(BaseHandler):
    def initialize(self, context) -> None:
        super().initialize(context)  # loads the model from the archive
        model_name = context.manifest["model"]["modelName"]
        provider = TracerProvider(resource=Resource.create({"service.name": f"torchserve-{model_name}"}))
        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
        trace.set_tracer_provider(provider)
        self.tracer = provider.get_tracer("torchserve")
        ts.install()
        ts.freeze_after_startup()

    def _parent(self, context, idx: int):
        carrier = {}
        for name in TRACE_HEADERS:
            value = context.get_request_header(idx, name)
            if value:
                carrier[name] = value.decode() if isinstance(value, bytes) else value
        return propagate.extract(carrier)

    def handle(self, data: list[dict], context) -> list[str]:
        received = time.time_ns()
        roots = [
            self.tracer.start_span("predictions", context=self._parent(context, i), kind=SpanKind.SERVER,
                                   start_time=received)
            for i in range(len(data))
        ]  # fmt: skip
        tensors = []
        for root, row in zip(roots, data, strict=True):
            with trace.use_span(root), ts.stage("preprocessing", "preprocess"):
                body = row.get("data") or row.get("body")
                text = body.decode() if isinstance(body, bytes | bytearray) else str(body)
                tensors.append(torch.tensor([float(len(text))]))
        started = time.time_ns()
        with torch.inference_mode():
            output = self.model(torch.stack(tensors).to(self.device))
        ended = time.time_ns()
        replies = []
        for i, root in enumerate(roots):
            with trace.use_span(root, end_on_exit=False):
                ts.record_span("model_forward", "inference", started, ended, {"batch.size": len(data)})
                with ts.stage("postprocessing", "postprocess"):
                    replies.append(json.dumps({"score": output[i].tolist()}))
            ts.attach_gc_pauses(root, received)
            root.end()
        return replies
