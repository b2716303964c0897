"""Unit tests of the reference pipeline's parts: cache, batcher, GC log, OTLP encoding, sockets."""

from __future__ import annotations

import asyncio
import gc
import random
import threading
import time

import duckdb
import orjson
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Link, SpanKind

from reference_pipeline import span_model as sm
from reference_pipeline.batcher import DynamicBatcher
from reference_pipeline.features import FeatureCache, SqliteFeatureStore, entity_id
from reference_pipeline.loadgen import arrival_times, make_payloads
from reference_pipeline.otlp_json import encode_request
from reference_pipeline.postprocess import calibrate, decide
from reference_pipeline.scenarios import LoadShape, ServiceConfig, configure
from reference_pipeline.tracing import OtlpJsonLinesExporter, make_provider
from tailscope import instrument as ts
from tailscope.instrument import gc_pauses
from tailscope.instrument.gc_pauses import GcPauseLog


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_cache_evicts_least_recently_used() -> None:
    cache = FeatureCache(capacity=2, ttl_s=10, clock=FakeClock())
    cache.put("a", [1.0])
    cache.put("b", [2.0])
    assert cache.get("a") == [1.0]  # a is now the most recent
    cache.put("c", [3.0])
    assert cache.get("b") is None and cache.get("a") == [1.0] and cache.get("c") == [3.0]
    assert cache.evictions == 1


def test_cache_entries_expire_after_their_ttl() -> None:
    clock = FakeClock()
    cache = FeatureCache(capacity=10, ttl_s=5, jitter=0.2, clock=clock)
    cache.put("a", [1.0])
    clock.now = 3.9
    assert cache.get("a") == [1.0]
    clock.now = 6.1
    assert cache.get("a") is None and cache.expirations == 1


def test_fill_without_jitter_makes_every_key_expire_together(tmp_path) -> None:
    clock = FakeClock()
    store = SqliteFeatureStore(tmp_path / "f.sqlite", n_entities=50, events_per_entity=4)
    cache = FeatureCache(capacity=100, ttl_s=2, jitter=0.0, clock=clock)
    cache.fill(store, [entity_id(i) for i in range(50)])
    clock.now = 1.99
    assert all(cache.get(entity_id(i)) is not None for i in range(50))
    clock.now = 2.01
    assert all(cache.get(entity_id(i)) is None for i in range(50))


def test_feature_store_returns_sixteen_features_and_none_for_unknown(tmp_path) -> None:
    store = SqliteFeatureStore(tmp_path / "f.sqlite", n_entities=20, events_per_entity=4)
    features = store.get(entity_id(3))
    assert features is not None and len(features) == 16
    assert store.get("nobody") is None


def _run_batcher(batcher: DynamicBatcher, n: int, gap_s: float = 0.0):
    async def go():
        futures = []
        for i in range(n):
            futures.append(batcher.submit(i, tag=f"t{i}"))
            if gap_s:
                await asyncio.sleep(gap_s)
        return await asyncio.gather(*futures)

    try:
        return asyncio.run(go())
    finally:
        batcher.close()


def test_batcher_fills_batches_up_to_max_batch() -> None:
    sizes = []

    def run_batch(payloads, marks):
        sizes.append(len(payloads))
        marks["output_start"] = time.time_ns()
        return [p * 10 for p in payloads]

    results = _run_batcher(DynamicBatcher(run_batch, max_batch=4, max_wait_ms=200), 8)
    assert [r.output for r in results] == [i * 10 for i in range(8)]
    assert sizes == [4, 4]
    assert results[5].first_tag == "t4" and results[5].batch_size == 4
    assert all(r.enqueued_ns <= r.started_ns <= r.marks["output_start"] <= r.ended_ns for r in results)


def test_batcher_sends_a_partial_batch_after_max_wait() -> None:
    started = time.monotonic()
    results = _run_batcher(DynamicBatcher(lambda p, marks: p, max_batch=64, max_wait_ms=30), 3)
    assert len(results) == 3 and results[0].batch_size == 3
    assert 0.02 < time.monotonic() - started < 2.0
    assert (results[0].started_ns - results[0].enqueued_ns) / 1e6 >= 25


def test_batcher_failure_reaches_the_requests_and_the_worker_survives() -> None:
    calls = []

    def run_batch(payloads, marks):
        calls.append(payloads)
        if len(calls) == 1:
            raise RuntimeError("boom")
        return payloads

    batcher = DynamicBatcher(run_batch, max_batch=1, max_wait_ms=0)

    async def go():
        with pytest.raises(RuntimeError, match="boom"):
            await batcher.submit(1)
        return await batcher.submit(2)

    try:
        assert asyncio.run(go()).output == 2
    finally:
        batcher.close()


def test_gc_pause_log_records_collections_and_finds_overlaps() -> None:
    log = GcPauseLog()
    log.install()
    try:
        before = time.time_ns()
        gc.collect(2)
        after = time.time_ns()
    finally:
        log.uninstall()
    assert any(p[2] == 2 and before <= p[0] <= p[1] <= after for p in log.pauses)
    assert log.overlapping(before, after)
    assert not log.overlapping(after + 1, after + 2)


def test_gc_pause_log_keeps_full_collections_and_long_young_ones_only() -> None:
    log = GcPauseLog()
    log._callback("start", {"generation": 0})
    log._callback("stop", {"generation": 0, "collected": 3})  # microseconds: not kept
    log._start = time.time_ns() - 2_000_000
    log._callback("stop", {"generation": 0, "collected": 4})  # a 2 ms young collection: kept
    log._callback("start", {"generation": 1})
    log._callback("stop", {"generation": 1, "collected": 5})  # older generations: always kept
    assert [(p[2], p[3]) for p in log.pauses] == [(0, 4), (1, 5)]


def _memory_provider():
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider, exporter


def test_gc_events_are_attached_to_the_request_root() -> None:
    provider, exporter = _memory_provider()
    log = ts.install()
    try:
        now = time.time_ns()
        log.pauses.append((now, now + 5_000_000, 2, 7))
        root = provider.get_tracer("t").start_span(sm.ROOT_SPAN)
        assert ts.attach_gc_pauses(root, time.time_ns() - 1_000_000) == 1
        assert ts.attach_gc_pauses(root, time.time_ns() - 1_000_000) == 0  # once per span
        root.end()
    finally:
        gc_pauses.uninstall()
    (event,) = exporter.get_finished_spans()[0].events
    assert event.name == sm.GC_EVENT
    assert dict(event.attributes) == {"gc.generation": 2, "gc.duration_ns": 5_000_000, "gc.collected": 7}


def test_otlp_json_lines_exporter_writes_collector_shaped_requests(tmp_path) -> None:
    path = tmp_path / "spans.jsonl"
    provider = make_provider(
        sm.SERVICE_NAME, {"tailscope.scenario": "steady", "tailscope.gpu.name": None}, path
    )
    tracer = provider.get_tracer("tailscope.reference_pipeline")
    with tracer.start_as_current_span(sm.ROOT_SPAN, kind=SpanKind.SERVER) as root:
        root.add_event(sm.GC_EVENT, {"gc.generation": 1})
        with tracer.start_as_current_span(
            sm.PARSE, attributes={"tailscope.stage": "parsing", "n": 3, "ok": True, "x": 1.5, "l": [1, 2]}
        ):
            pass
        tracer.start_span(sm.FORWARD, links=[Link(root.get_span_context())]).end()
    provider.shutdown()
    (line,) = path.read_bytes().splitlines()
    request = orjson.loads(line)
    (resource_spans,) = request["resourceSpans"]
    resource = {a["key"]: a["value"] for a in resource_spans["resource"]["attributes"]}
    assert resource["service.name"] == {"stringValue": sm.SERVICE_NAME}
    assert {"host.name", "service.instance.id", "process.pid", "tailscope.scenario"} <= resource.keys()
    assert "tailscope.gpu.name" not in resource  # None-valued attributes are left out
    spans = {s["name"]: s for s in resource_spans["scopeSpans"][0]["spans"]}
    root_json = spans[sm.ROOT_SPAN]
    assert len(root_json["traceId"]) == 32 and len(root_json["spanId"]) == 16
    assert root_json["kind"] == 2 and "parentSpanId" not in root_json
    assert isinstance(root_json["startTimeUnixNano"], str)
    assert root_json["events"][0]["name"] == sm.GC_EVENT
    parse = spans[sm.PARSE]
    assert parse["parentSpanId"] == root_json["spanId"]
    attrs = {a["key"]: a["value"] for a in parse["attributes"]}
    assert attrs["n"] == {"intValue": "3"} and attrs["ok"] == {"boolValue": True}
    assert attrs["x"] == {"doubleValue": 1.5}
    assert attrs["l"] == {"arrayValue": {"values": [{"intValue": "1"}, {"intValue": "2"}]}}
    assert spans[sm.FORWARD]["links"][0]["spanId"] == root_json["spanId"]


def test_exported_file_loads_into_the_store(tmp_path) -> None:
    loader = pytest.importorskip("ingest.loader")
    path = tmp_path / "spans.jsonl"
    exporter = OtlpJsonLinesExporter(path)
    provider, memory = _memory_provider()
    tracer = provider.get_tracer("t")
    with (
        tracer.start_as_current_span(sm.ROOT_SPAN, kind=SpanKind.SERVER),
        tracer.start_as_current_span(sm.TOKENIZE, attributes={"tailscope.stage": "preprocessing"}),
    ):
        pass
    exporter.export(memory.get_finished_spans())
    exporter.shutdown()
    summary = loader.load_paths([path], tmp_path / "store.duckdb", "unit")
    assert summary.traces == 1 and not [f.error for f in summary.files if f.error]
    with duckdb.connect(str(tmp_path / "store.duckdb"), read_only=True) as conn:
        rows = conn.execute("SELECT SpanName, SpanId, ParentSpanId, SpanKind FROM otel_traces").fetchall()
    by_name = {name: (span_id, parent, kind) for name, span_id, parent, kind in rows}
    assert by_name[sm.TOKENIZE][1] == by_name[sm.ROOT_SPAN][0]
    assert by_name[sm.ROOT_SPAN][2] == "Server"


def test_encode_request_groups_by_resource() -> None:
    provider, memory = _memory_provider()
    other, other_memory = _memory_provider()
    provider.get_tracer("a").start_span("x").end()
    other.get_tracer("b").start_span("y").end()
    request = encode_request([*memory.get_finished_spans(), *other_memory.get_finished_spans()])
    assert len(request["resourceSpans"]) == 2


def test_arrival_times_follow_the_rate_and_the_burst() -> None:
    shape = LoadShape(rps=50, duration_s=20, bursts=[(10, 4, 5.0)])
    times = arrival_times(shape, random.Random(4))
    assert all(0 <= t < 20 for t in times) and times == sorted(times)
    outside = sum(1 for t in times if not 10 <= t < 14) / 16
    inside = sum(1 for t in times if 10 <= t < 14) / 4
    assert 40 < outside < 60
    assert 200 < inside < 300


def test_payloads_have_varied_texts_and_skewed_entities() -> None:
    payloads = [orjson.loads(p) for p in make_payloads(400, random.Random(2), n_entities=1000)]
    lengths = [len(p["text"].split()) for p in payloads]
    assert min(lengths) >= 3 and max(lengths) > 3 * min(lengths)
    counts: dict[str, int] = {}
    for p in payloads:
        counts[p["entity_id"]] = counts.get(p["entity_id"], 0) + 1
    top = sorted(counts.values(), reverse=True)
    assert top[0] >= 20  # the most popular entity takes several percent of the traffic
    assert len(counts) > 100  # and a long tail of others


def test_child_reads_the_port_and_the_facts_it_announces(tmp_path, monkeypatch) -> None:
    from reference_pipeline.runner import Child

    (tmp_path / "announcer.py").write_text(
        "import time\nprint('LISTENING 4321 capacity_rps=57.5 x=y', flush=True)\ntime.sleep(30)\n"
    )
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))  # Child runs `python -m announcer`
    child = Child("announcer", ["announcer"], tmp_path / "announcer.log")
    try:
        assert child.wait_ready(20) == 4321
        assert child.announced == {"capacity_rps": "57.5", "x": "y"}
    finally:
        child.proc.kill()
        child.proc.wait()


def test_calibration_is_monotone_and_thresholds_split_three_ways() -> None:
    scores = [calibrate([0.0, x]) for x in (-5.0, -1.0, 0.0, 1.0, 5.0)]
    assert scores == sorted(scores) and 0 < scores[0] < scores[-1] < 1
    assert {decide(s) for s in (0.1, 0.5, 0.9)} == {"approve", "review", "reject"}


def test_service_config_round_trips_through_json() -> None:
    cfg = ServiceConfig(scenario="burst", max_batch=16, tracing=False)
    assert ServiceConfig.from_json(cfg.to_json()) == cfg
    attrs = cfg.resource_attributes("random-init", None, "2.x")
    assert set(attrs) == set(sm.RESOURCE_KEYS)


def test_lock_wait_span_is_a_child_of_the_callers_span(tmp_path) -> None:
    from reference_pipeline.postprocess import Postprocessor, ScoreMonitor

    provider, exporter = _memory_provider()
    tracer = provider.get_tracer("t")
    ts.use(provider)
    monitor = ScoreMonitor(tmp_path / "audit.sqlite", heavy=False, window=1000)
    post = Postprocessor(monitor, None)
    monitor.lock.acquire()
    releaser = threading.Timer(0.05, monitor.lock.release)
    releaser.start()
    try:
        with tracer.start_as_current_span(sm.POSTPROCESS) as parent:
            outcome = post.run("ent-000001", [0.1, 0.4], [0.0] * 16)
    finally:
        ts.use(None)
        monitor.close()
    assert outcome["decision"] in {"approve", "review", "reject"}
    lock_wait = next(s for s in exporter.get_finished_spans() if s.name == sm.LOCK_WAIT)
    assert lock_wait.parent.span_id == parent.get_span_context().span_id
    assert lock_wait.attributes["tailscope.stage"] == "postprocessing"
    assert (lock_wait.end_time - lock_wait.start_time) / 1e6 >= 30


def test_otlp_endpoint_gets_an_http_exporter_on_the_traces_path() -> None:
    pytest.importorskip("opentelemetry.exporter.otlp.proto.http")
    provider = make_provider(sm.SERVICE_NAME, {}, None, "http://127.0.0.1:4318")
    processors = provider._active_span_processor._span_processors
    (processor,) = processors
    assert processor.span_exporter._endpoint == "http://127.0.0.1:4318/v1/traces"
    provider.shutdown()


def test_remote_store_latency_only_where_the_scenario_makes_the_store_remote() -> None:
    from reference_pipeline.features import RemoteLatency

    expected = {"steady": False, "cold-start": False, "cold-cache": True, "key-expiry": True}
    for scenario, remote in expected.items():
        cfg = ServiceConfig()
        configure(scenario, cfg, LoadShape(rps=10, duration_s=10))
        assert (cfg.store_rtt_ms > 0) == remote, scenario
    latency = RemoteLatency(8.0, seed=1)
    draws = sorted(latency.draw() for _ in range(2000))
    assert 0.007 < draws[1000] < 0.009 and draws[-20] > 2 * draws[1000] and draws[0] > 0


def test_listening_sockets_disable_nagle() -> None:
    import socket

    from reference_pipeline.serving import bind_free_port

    sock = bind_free_port()
    try:
        assert sock.proto == socket.IPPROTO_TCP  # asyncio sets TCP_NODELAY only on such sockets
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
        client = socket.create_connection(sock.getsockname())
        conn, _ = sock.accept()
        assert conn.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)  # inherited on accept
        conn.close()
        client.close()
    finally:
        sock.close()
