"""Light mode's request span made without the SDK span (reference_pipeline.request_span): the same
span as the SDK makes, the same trace context for what runs under it, the same sampling."""

from __future__ import annotations

import orjson
import pytest
from opentelemetry import propagate, trace
from opentelemetry.trace import SpanKind, Status, StatusCode

from reference_pipeline.otlp_json import span_json, span_to_otlp
from reference_pipeline.request_span import RequestSpan, RequestTracer
from reference_pipeline.tracing import make_provider, request_tracer, sampler_of
from tailscope import instrument as ts
from tailscope.instrument import light
from tailscope.instrument.sampling import WEIGHT

MS = 1_000_000
START = 1_700_000_000_000 * MS
PARENT = {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}


def _request(tracer, fail: bool = False) -> None:
    """One request as request_path makes it: remote parent, stages, an attribute, a GC event."""
    with tracer.start_as_current_span(
        "POST /v1/predict",
        context=propagate.extract(PARENT),
        kind=SpanKind.SERVER,
        start_time=START,
        attributes={"tailscope.stage": "ingress", "http.route": "/v1/predict"},
    ) as root:
        with ts.request(root, START) as tally:
            ts.record_span("parsing", "parse_request", START + 1 * MS, START + 2 * MS)
            ts.record_span("queue", "batch.queue_wait", START + 2 * MS, START + 5 * MS)
            tally.span.set_attribute("http.response.status_code", 500 if fail else 200)
        root.add_event("python.gc", {"gc.generation": 0}, timestamp=START + 3 * MS)
        if fail:
            root.set_status(Status(StatusCode.ERROR, "bad input"))
            raise ValueError("bad input")


def _comparable(span) -> dict:
    out = span_to_otlp(span)
    for key in ("spanId", "endTimeUnixNano"):
        out.pop(key)
    for event in out.get("events", []):
        if event["name"] == "exception":
            event["timeUnixNano"] = "-"
            event["attributes"] = [a for a in event["attributes"] if a["key"] != "exception.stacktrace"]
    return out


@pytest.mark.parametrize("fail", [False, True])
def test_the_cheap_request_span_is_the_span_the_sdk_makes(memory_provider, fail: bool) -> None:
    provider, exporter = memory_provider
    ts.set_mode("light")
    for tracer in (provider.get_tracer("tailscope.reference_pipeline"), request_tracer(provider)):
        try:
            _request(tracer, fail)
        except ValueError:
            assert fail
    sdk_span, cheap_span = exporter.get_finished_spans()
    assert _comparable(cheap_span) == _comparable(sdk_span)
    assert cheap_span.context.trace_id == int(PARENT["traceparent"][3:35], 16)
    assert cheap_span.attributes[light.STAGE_US + "queue"] == 3000
    assert orjson.loads(span_json(cheap_span)) == span_to_otlp(cheap_span)


def test_spans_under_it_are_its_children_and_carry_its_trace(memory_provider) -> None:
    provider, exporter = memory_provider
    ts.set_mode("light")
    tracer = request_tracer(provider)
    with tracer.start_as_current_span("POST /x", kind=SpanKind.SERVER) as root, ts.request(root):
        assert isinstance(root, RequestSpan)
        with ts.stage("downstream", "enrich", kind=SpanKind.CLIENT):  # stays a span in light mode
            headers: dict[str, str] = {}
            propagate.inject(headers)
    client, request = exporter.get_finished_spans()
    assert client.parent.span_id == request.context.span_id
    assert headers["traceparent"].split("-")[1] == f"{request.context.trace_id:032x}"
    assert request.parent is None


def test_other_spans_and_other_modes_are_the_sdks(memory_provider) -> None:
    provider, _ = memory_provider
    tracer = request_tracer(provider)
    ts.set_mode("spans")
    with tracer.start_as_current_span("POST /x", kind=SpanKind.SERVER) as root:
        assert not isinstance(root, RequestSpan) and root.is_recording()
    ts.set_mode("light")
    with tracer.start_as_current_span("work") as inner:
        assert not isinstance(inner, RequestSpan)
    unsampled = {"traceparent": PARENT["traceparent"][:-2] + "00"}
    with tracer.start_as_current_span(
        "POST /x", context=propagate.extract(unsampled), kind=SpanKind.SERVER
    ) as root:
        assert not root.is_recording()  # the SDK's sampler follows the parent's decision


def test_sampling_sees_the_cheap_span_as_the_request(tmp_path) -> None:
    provider = make_provider("t", {}, tmp_path / "spans.jsonl", sample_rate=0.5, keep_slower_than_ms=50)
    ts.use(provider)
    ts.set_mode("light")
    try:
        tracer = request_tracer(provider)
        ids = []
        for _ in range(200):
            with tracer.start_as_current_span("POST /x", kind=SpanKind.SERVER) as root:
                ids.append(root.get_span_context().trace_id)
        slow = tracer.start_as_current_span("POST /slow", kind=SpanKind.SERVER, start_time=START)
        with slow as root:
            root.end(START + 60 * MS)
        sampler = sampler_of(provider)
        assert all(sampler.decision(i) is not None for i in ids)
        provider.shutdown()
    finally:
        ts.use(None)
        ts.set_mode("spans")
    lines = (tmp_path / "spans.jsonl").read_bytes().splitlines()
    resources = [r for line in lines for r in orjson.loads(line)["resourceSpans"]]
    spans = [s for r in resources for scope in r["scopeSpans"] for s in scope["spans"]]
    weights = {s["name"]: set() for s in spans}
    for s in spans:
        weights[s["name"]] |= {a["value"]["doubleValue"] for a in s["attributes"] if a["key"] == WEIGHT}
    assert weights == {"POST /x": {2.0}, "POST /slow": {1.0}}
    assert 60 <= sum(s["name"] == "POST /x" for s in spans) <= 140


def test_the_tracer_keeps_the_sdk_tracers_resource_and_processors(memory_provider) -> None:
    provider, _ = memory_provider
    tracer = request_tracer(provider)
    assert isinstance(tracer, RequestTracer) and tracer.resource is provider.resource
    assert isinstance(tracer, trace.Tracer)
