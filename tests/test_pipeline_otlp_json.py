"""The file exporter's cheap OTLP/JSON encoding parses into the reference encoding, span for span."""

from __future__ import annotations

import orjson
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Link, SpanKind, Status, StatusCode

from reference_pipeline.otlp_json import encode_request, request_line, span_json, span_to_otlp
from reference_pipeline.tracing import OtlpJsonLinesExporter
from tailscope.instrument.sampling import with_attribute


def _provider(name: str):
    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": name, "process.pid": 7}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider, exporter


def _varied_spans():
    provider, memory = _provider('svc "one"')
    other, other_memory = _provider("svc-two")
    tracer = provider.get_tracer("scope.a", "1.2")
    every_kind = {
        "int": 12345678901234,
        "negative": -3,
        "str": 'quote " backslash \\ newline \n é ✓',
        "bool": True,
        "float": 0.25,
        "ints": [1, 2],
        "strs": ["a", "b"],
        'key "quoted" é': "v",
    }
    with tracer.start_as_current_span("root ✓", kind=SpanKind.SERVER, attributes=every_kind) as root:
        root.add_event("python.gc", {"gc.generation": 2, "gc.pause_ns": 1500})
        root.set_status(Status(StatusCode.ERROR, 'boom "x"'))
        child = tracer.start_span("child", links=[Link(root.get_span_context(), {"link.kind": "batch"})])
        child.set_status(Status(StatusCode.OK))
        child.end()
    provider.get_tracer("scope.b").start_span("bare", kind=SpanKind.CLIENT).end()
    other.get_tracer("scope.a").start_span("elsewhere", attributes={"n": 0}).end()
    spans = [*memory.get_finished_spans(), *other_memory.get_finished_spans()]
    return [*spans, with_attribute(spans[0], "tailscope.sample.weight", 10.0)]


def test_the_cheap_encoding_parses_into_the_reference_one() -> None:
    spans = _varied_spans()
    for span in spans:
        assert orjson.loads(span_json(span)) == span_to_otlp(span)
    assert orjson.loads(request_line(spans)) == encode_request(spans)
    assert len(orjson.loads(request_line(spans))["resourceSpans"]) == 2


def test_the_exporter_writes_one_line_per_export(tmp_path) -> None:
    spans = _varied_spans()
    exporter = OtlpJsonLinesExporter(tmp_path / "spans.jsonl")
    exporter.export(spans[:2])
    exporter.export(spans[2:])
    exporter.shutdown()
    lines = (tmp_path / "spans.jsonl").read_bytes().splitlines()
    assert [orjson.loads(line) for line in lines] == [encode_request(spans[:2]), encode_request(spans[2:])]
