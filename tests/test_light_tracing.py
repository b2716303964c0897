"""Light tracing (one span per request, stage times as attributes) and head sampling with weights:
tailscope/instrument/light.py, tailscope/instrument/sampling.py and the "tailscope light" phase rules."""

from __future__ import annotations

import time

import duckdb
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, Status, StatusCode

from tailscope import instrument as ts
from tailscope.instrument import light
from tailscope.instrument.sampling import WEIGHT, SamplingProcessor, head_sampled
from tailscope.vocabulary import ALL_STAGES

MS = 1_000_000


# A request's stages at fixed times (ms from the request's start): every stage written with
# record_span, which takes its times as given, so both modes describe the same request exactly.
STAGES_AT = [
    ("ingress", "http.receive", 0.2, 0.5),
    ("parsing", "parse_request", 0.5, 0.9),
    ("feature_hydration", "feature_hydration", 1.0, 4.0),
    ("preprocessing", "tokenize", 4.0, 4.6),
    ("queue", "batch.queue_wait", 4.7, 9.7),
    ("model_forward", "model.forward", 9.7, 21.7),
    ("postprocessing", "postprocess", 21.8, 23.0),
    ("serialization", "serialize_response", 23.1, 23.3),
]
TOTAL_MS = 24.0


def one_request(tracer, start_ns: int, trace_no: int) -> None:
    with (
        tracer.start_as_current_span(
            "POST /v1/predict", kind=SpanKind.SERVER, start_time=start_ns, end_on_exit=False
        ) as root,
        ts.request(root, start_ns),
    ):
        for stage, name, a, b in STAGES_AT:
            ts.record_span(stage, name, start_ns + int(a * MS), start_ns + int(b * MS))
        root.set_attribute("trace.no", trace_no)
    root.end(end_time=start_ns + int(TOTAL_MS * MS))


def test_light_mode_puts_stage_times_on_the_request_span(memory_provider) -> None:
    tp, exporter = memory_provider
    ts.set_mode("light")
    one_request(tp.get_tracer("t"), 1_000 * MS, 1)
    (span,) = exporter.get_finished_spans()
    assert span.attributes[light.STAGE_US + "queue"] == 5000
    assert span.attributes[light.STAGE_END_US + "model_forward"] == 21700


def test_the_request_handle_sends_attributes_through_the_tally_in_light_mode(memory_provider) -> None:
    tp, exporter = memory_provider
    tracer = tp.get_tracer("t")
    for mode in ("light", "spans"):
        ts.set_mode(mode)
        with tracer.start_as_current_span("POST /x", kind=SpanKind.SERVER) as root, ts.request(root) as r:
            assert (r.span is root) == (mode == "spans")
            assert r.span.get_span_context() == root.get_span_context()
            r.span.set_attribute("http.response.status_code", 200)
            with ts.stage("parsing"):
                time.sleep(0.001)
    light_span, spans_root = [s for s in exporter.get_finished_spans() if s.name == "POST /x"]
    assert light_span.attributes["http.response.status_code"] == 200
    assert light_span.attributes[light.STAGE_US + "parsing"] >= 1000
    assert spans_root.attributes["http.response.status_code"] == 200


def test_tally_only_records_intervals_in_light_mode_and_nothing_elsewhere(memory_provider) -> None:
    tp, exporter = memory_provider
    tracer = tp.get_tracer("t")
    start = 1_000 * MS
    assert not light.tally_only(("queue", start, start + MS))  # no request open
    for mode in ("spans", "both", "light"):
        ts.set_mode(mode)
        with tracer.start_as_current_span("POST /x", start_time=start, end_on_exit=False) as root:
            with ts.request(root, start):
                kept = light.tally_only(
                    ("queue", start, start + 2 * MS), ("model_forward", start + 2 * MS, start + 5 * MS)
                )
            root.end(end_time=start + 6 * MS)
        assert kept == (mode == "light"), mode  # "both" makes the spans too: the caller must
    light_span = exporter.get_finished_spans()[-1]
    assert light_span.attributes[light.STAGE_US + "queue"] == 2000
    assert light_span.attributes[light.STAGE_END_US + "model_forward"] == 5000
    assert len(exporter.get_finished_spans()) == 3


def test_nested_stage_of_another_stage_leaves_the_outer_its_own_time(memory_provider) -> None:
    tp, exporter = memory_provider
    ts.set_mode("light")
    tracer = tp.get_tracer("t")
    with (
        tracer.start_as_current_span("req", kind=SpanKind.SERVER) as root,
        ts.request(root),
        ts.stage("postprocessing") as outer,
    ):
        outer.set_attribute("cache.hit", False)  # lands on the request's span
        with ts.stage("downstream"):
            sum(range(20000))
    (span,) = exporter.get_finished_spans()  # no stage span made
    own = {k[len(light.STAGE_US) :]: v for k, v in span.attributes.items() if k.startswith(light.STAGE_US)}
    assert set(own) == {"postprocessing", "downstream"} and own["downstream"] > 0
    assert span.attributes["cache.hit"] is False
    assert own["postprocessing"] + own["downstream"] <= (span.end_time - span.start_time) / 1000


def test_a_wait_inside_a_stage_of_its_stage_is_counted_once(memory_provider) -> None:
    """A traced lock's wait inside postprocessing (stage None: the enclosing one's), as in the
    reference pipeline: the stage's time is its interval, not its interval plus the wait."""
    import threading

    tp, exporter = memory_provider
    ts.set_mode("light")
    inner = threading.Lock()
    lock = ts.traced_lock(inner, "scores")
    inner.acquire()  # another holder: the request waits ~30 ms for it
    threading.Timer(0.03, inner.release).start()
    with (
        tp.get_tracer("t").start_as_current_span("req", kind=SpanKind.SERVER) as root,
        ts.request(root),
    ):
        started = time.time_ns()
        with ts.stage("postprocessing"), lock:
            pass
        took_us = (time.time_ns() - started) / 1000
    assert took_us > 20_000
    (span,) = exporter.get_finished_spans()
    assert span.attributes[light.STAGE_US + "postprocessing"] == pytest.approx(took_us, rel=0.05)


def test_a_propagating_client_stage_stays_a_span_and_an_untraced_call_is_tallied(memory_provider) -> None:
    tp, exporter = memory_provider
    ts.set_mode("light")
    with (
        tp.get_tracer("t").start_as_current_span("req", kind=SpanKind.SERVER) as root,
        ts.request(root),
    ):
        with (
            ts.stage("feature_hydration"),
            ts.stage("feature_hydration", kind=SpanKind.CLIENT, current=False),
        ):
            pass  # a store read: nothing traced behind it
        with ts.stage("downstream", "enrich", kind=SpanKind.CLIENT):
            pass  # a call that propagates its context: the callee's spans hang under this one
    names = sorted(s.name for s in exporter.get_finished_spans())
    assert names == ["enrich", "req"]
    (req,) = [s for s in exporter.get_finished_spans() if s.name == "req"]
    assert light.STAGE_US + "downstream" not in req.attributes


def test_spans_mode_is_untouched_by_request_blocks(memory_provider) -> None:
    tp, exporter = memory_provider
    one_request(tp.get_tracer("t"), 1_000 * MS, 1)
    assert len(exporter.get_finished_spans()) == 1 + len(STAGES_AT)


def _write_and_load(tmp_path, spans, run: str) -> None:
    import orjson

    from ingest.loader import load_paths
    from reference_pipeline.otlp_json import encode_request

    path = tmp_path / f"{run}.jsonl"
    path.write_bytes(orjson.dumps(encode_request(spans)) + b"\n")
    loaded = load_paths([path], tmp_path / "store.duckdb", run)
    assert not [f.error for f in loaded.files if f.error]


def _stage_means(db, run: str) -> dict[str, float]:
    cols = ", ".join(f"avg({c}_ns) / 1e6" for c in ALL_STAGES)
    with duckdb.connect(str(db), read_only=True) as conn:
        row = conn.execute(f"SELECT {cols} FROM requests WHERE RunLabel = ?", [run]).fetchone()
    return dict(zip(ALL_STAGES, row, strict=True))


def test_light_mode_round_trips_into_the_same_stages(memory_provider, tmp_path) -> None:
    tp, exporter = memory_provider
    tracer = tp.get_tracer("t")
    for mode in ("spans", "light"):
        ts.set_mode(mode)
        exporter.clear()
        for i in range(5):
            one_request(tracer, (1_000 + 100 * i) * MS, i)
        _write_and_load(tmp_path, exporter.get_finished_spans(), mode)
    db = tmp_path / "store.duckdb"
    spans, lite = _stage_means(db, "spans"), _stage_means(db, "light")
    assert spans["queue"] == pytest.approx(5.0, abs=1e-3)
    for stage in ALL_STAGES:
        assert lite[stage] == pytest.approx(spans[stage], abs=1e-3), stage


def _processor(rate: float, slow_ms: float | None = None):
    exporter = InMemorySpanExporter()
    sampler = SamplingProcessor(SimpleSpanProcessor(exporter), rate, slow_ms)
    tp = TracerProvider()
    tp.add_span_processor(sampler)
    return tp.get_tracer("t"), sampler, exporter


def test_head_sampling_keeps_the_rate_and_weights_by_its_inverse() -> None:
    tracer, _, exporter = _processor(0.25)
    for _ in range(4000):
        with (
            tracer.start_as_current_span("req", kind=SpanKind.SERVER),
            tracer.start_as_current_span("child"),
        ):
            pass
    roots = [s for s in exporter.get_finished_spans() if s.name == "req"]
    children = [s for s in exporter.get_finished_spans() if s.name == "child"]
    assert 850 < len(roots) < 1150 and len(children) == len(roots)
    assert {s.attributes[WEIGHT] for s in roots} == {4.0}
    assert all(head_sampled(s.context.trace_id, 0.25) for s in roots)


def test_slow_and_failed_requests_are_kept_with_weight_one() -> None:
    tracer, _, exporter = _processor(0.2, slow_ms=50)
    kept_ids = []
    for i in range(3000):
        start = 1_000 * MS
        span = tracer.start_span("req", kind=SpanKind.SERVER, start_time=start)
        slow, failed = i % 10 == 0, i % 10 == 1
        if failed:
            span.set_status(Status(StatusCode.ERROR, "boom"))
        span.end(end_time=start + (80 if slow else 5) * MS)
        if slow or failed:
            kept_ids.append(span.get_span_context().trace_id)
    roots = {s.context.trace_id: s for s in exporter.get_finished_spans() if s.name == "req"}
    assert set(kept_ids) <= set(roots)
    assert all(roots[t].attributes[WEIGHT] == 1.0 for t in kept_ids)
    assert {s.attributes[WEIGHT] for t, s in roots.items() if t not in kept_ids} == {5.0}
    # the weights' sum estimates the number of requests (2,400 fast ones drawn at 0.2: sd ~100)
    assert 2700 < sum(s.attributes[WEIGHT] for s in roots.values()) < 3300


def test_spans_from_another_process_wait_for_the_keep_decision() -> None:
    from opentelemetry import trace
    from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

    tracer, sampler, exporter = _processor(1e-9)
    trace_id = (1 << 100) | ((1 << 64) - 5)  # low bits near the top: never head-sampled
    parent = SpanContext(trace_id, 0x1234, is_remote=True, trace_flags=TraceFlags(1))
    ctx = trace.set_span_in_context(NonRecordingSpan(parent))
    tracer.start_span("model.forward", context=ctx).end()
    assert exporter.get_finished_spans() == ()
    sampler.keep(trace_id)
    assert [s.name for s in exporter.get_finished_spans()] == ["model.forward"]
    tracer.start_span("batch.queue_wait", context=ctx).end()  # after the decision: passes at once
    assert len(exporter.get_finished_spans()) == 2
