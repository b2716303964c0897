"""Unit tests of the reference pipeline's load generator: closed loops, the tracing switch, load spread
over processes."""

from __future__ import annotations

import asyncio
import threading
import time

import httpx
import orjson
import pytest
from opentelemetry.sdk.trace import TracerProvider

from reference_pipeline.loadgen import run_load
from reference_pipeline.scenarios import LoadShape
from tailscope import instrument as ts


def test_closed_loop_keeps_exactly_n_requests_in_flight_for_the_duration() -> None:
    from opentelemetry import trace

    in_flight, peak, served = 0, 0, 0

    async def handler(request: httpx.Request) -> httpx.Response:  # a test double of the service
        nonlocal in_flight, peak, served
        in_flight += 1
        peak = max(peak, in_flight)
        await asyncio.sleep(0.01)
        in_flight -= 1
        served += 1
        return httpx.Response(200, json={"ok": True})

    shape = LoadShape(rps=1, duration_s=0.5, concurrency=4)
    result = asyncio.run(
        run_load("http://svc/v1/predict", shape, trace.NoOpTracer(), transport=httpx.MockTransport(handler))
    )
    assert peak == 4
    assert result.sent == served == len(result.latencies_ms) and result.errors == 0
    # 4 clients x ~10 ms per request for 0.5 s: far more than the rps=1 an open loop would send
    assert 60 <= served <= 4 * 0.5 / 0.01 + 4
    assert 0.5 <= result.wall_s < 1.0


def test_tracing_switch_books_each_mode_and_swaps_the_tracers(tmp_path) -> None:
    from types import SimpleNamespace

    from opentelemetry import trace

    from reference_pipeline.tracing_switch import TracingSwitch

    provider = TracerProvider()
    sdk_tracer = provider.get_tracer("t")
    pipeline = SimpleNamespace(tracer=sdk_tracer)
    flushes: list[bool] = []
    ts.use(provider)
    switch = TracingSwitch(
        pipeline, sdk_tracer, flush=lambda: flushes.append(pipeline.tracer is sdk_tracer), provider=provider
    )
    switch.completed()  # before the first signal: warm-up, not booked
    switch.toggle()  # starts the books, traced first
    switch.completed()
    switch.completed()
    switch.toggle()  # now no-op: the root's tracer and the stage spans' provider alike
    assert isinstance(pipeline.tracer, trace.NoOpTracer)
    with ts.stage("parsing") as span:
        assert not span.is_recording()
    assert flushes == [True]  # flushed while the traced window was still open
    switch.completed()
    switch.toggle()
    assert pipeline.tracer is sdk_tracer
    with ts.stage("parsing") as span:
        assert span.is_recording()
    ts.use(None)
    switch.stop()
    switch.completed()  # after the books closed: not booked
    switch.report(tmp_path / "ab.json")
    books = orjson.loads((tmp_path / "ab.json").read_bytes())
    assert books["traced"]["requests"] == 2 and books["no-op"]["requests"] == 1
    assert books["traced"]["windows"] == 2 and books["no-op"]["windows"] == 1
    assert flushes == [True, True]  # and when the books closed in the traced mode
    assert all(books[m]["seconds"] >= 0 and books[m]["cpu_seconds"] >= 0 for m in ("traced", "no-op"))
    windows = books["windows"]
    assert [(w["mode"], w["requests"]) for w in windows] == [("traced", 2), ("no-op", 1), ("traced", 0)]
    assert sum(w["seconds"] for w in windows) == pytest.approx(
        books["traced"]["seconds"] + books["no-op"]["seconds"]
    )


def test_load_split_over_processes_keeps_the_shape() -> None:
    from reference_pipeline.loadgen import LoadResult
    from reference_pipeline.loadgen_pool import merge_results, split_shape

    closed = split_shape(LoadShape(rps=1, duration_s=5, concurrency=10), 3)
    assert [s.concurrency for s in closed] == [4, 3, 3] and {s.duration_s for s in closed} == {5}
    bursty = LoadShape(rps=90, duration_s=5, bursts=[(1.0, 2.0, 6.0)])
    shares = split_shape(bursty, 3)
    assert [s.rps for s in shares] == [30, 30, 30] and all(s.bursts == bursty.bursts for s in shares)
    with pytest.raises(ValueError, match="2 closed-loop clients cannot be split over 3"):
        split_shape(LoadShape(rps=1, duration_s=5, concurrency=2), 3)
    merged = merge_results(
        [LoadResult([5.0], [200], 1, 0, 2.0, 0.5), LoadResult([7.0, 9.0], [200, 503], 3, 2, 2.5, 0.7)]
    )
    assert sorted(merged.latencies_ms) == [5.0, 7.0, 9.0] and merged.statuses.count(503) == 1
    assert (merged.sent, merged.errors, merged.wall_s) == (4, 2, 2.5)
    assert merged.cpu_s == pytest.approx(1.2)


def test_load_in_several_processes_reaches_the_server_and_writes_one_trace_file(tmp_path) -> None:
    import json
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from reference_pipeline.loadgen_pool import drive_in_processes

    served: list[str] = []

    class Handler(BaseHTTPRequestHandler):  # a test double of the service
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers["content-length"]))
            served.append(self.headers.get("traceparent", ""))
            body = b'{"ok": true}'
            self.send_response(200)
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    part = tmp_path / "loadgen.jsonl"
    try:
        result = drive_in_processes(
            f"http://127.0.0.1:{server.server_port}/v1/predict",
            LoadShape(rps=1, duration_s=1.0, concurrency=4),
            2,
            setup={},
            part=part,
            otlp_endpoint=None,
            n_entities=50,
            seed=1,
        )
    finally:
        server.shutdown()
    assert result.sent == len(served) == len(result.latencies_ms) > 20 and result.errors == 0
    assert result.cpu_s > 0 and all(served)  # each request carried its client span's context
    assert sorted(p.name for p in tmp_path.iterdir()) == ["loadgen.jsonl"]  # the share files merged
    spans, pids = 0, set()
    for line in part.read_bytes().splitlines():
        for resource_spans in json.loads(line)["resourceSpans"]:
            attrs = {a["key"]: a["value"] for a in resource_spans["resource"]["attributes"]}
            pids.add(attrs["process.pid"]["intValue"])
            spans += sum(len(s["spans"]) for s in resource_spans["scopeSpans"])
    assert spans == result.sent and len(pids) == 2


def test_a_failing_load_process_is_reported_not_waited_for(tmp_path) -> None:
    from reference_pipeline.loadgen_pool import drive_in_processes

    shape = LoadShape(rps=1, duration_s=30.0, concurrency=2)
    started = time.monotonic()
    with pytest.raises(RuntimeError, match=r"load process \d exited with 1:\n(.|\n)*Error"):
        # no entities to draw payloads from: each worker fails before sending anything
        drive_in_processes(
            "http://127.0.0.1:9/v1/predict", shape, 2, setup={}, part=tmp_path / "l.jsonl",
            otlp_endpoint=None, n_entities=0, seed=1,
        )  # fmt: skip
    assert time.monotonic() - started < 25  # not the load's 30 s
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # nothing left behind
