"""`tailscope collect`: the real OTel SDK exporter end to end, and every answer the spec prescribes."""

from __future__ import annotations

import gzip
import json
import re
import threading
import time
import zlib
from contextlib import ExitStack
from pathlib import Path

import httpx
import pytest
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
from receiver_support import STOPPED, Collector, json_request, proto_request, spans_of

from ingest.receiver import protocol
from ingest.receiver.limits import BadEncoding, TooLarge, decompress
from tailscope.store.duckdb.connection import connect_reader

PROTOBUF = "application/x-protobuf"
JSON = "application/json"
ACCEPTED = re.compile(r"spans stored .*?, ([\d,]+) requests,")


def stored(db_path: Path, run: str) -> int:
    with connect_reader(db_path) as conn:
        return conn.execute("SELECT count(*) FROM otel_traces WHERE RunLabel = ?", [run]).fetchone()[0]


@pytest.fixture(scope="module")
def collector(tmp_path_factory: pytest.TempPathFactory):
    db_path = tmp_path_factory.mktemp("collect") / "store.duckdb"
    # --ack committed: a 200 means the spans are readable, which these tests check right after.
    options = ("--max-request-bytes", "200000", "--flush-interval-ms", "20", "--ack", "committed")
    running = Collector(db_path, "live", *options)
    yield running
    assert running.stop() == STOPPED, running.output()


# -- the real OpenTelemetry SDK exporter -------------------------------------------------------------


def test_real_otel_sdk_exporter_spans_arrive_with_ids_parents_attributes(tmp_path: Path) -> None:
    import requests
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    collector = Collector(tmp_path / "store.duckdb", "sdk")
    try:
        statuses: list[int] = []
        session = requests.Session()
        session.hooks["response"].append(lambda response, *a, **k: statuses.append(response.status_code))
        provider = TracerProvider(
            resource=Resource.create({"service.name": "checkout", "host.name": "box-1"})
        )
        provider.add_span_processor(
            BatchSpanProcessor(
                OTLPSpanExporter(endpoint=collector.url, timeout=30, session=session),
                max_export_batch_size=64,
                schedule_delay_millis=50,
            )
        )
        tracer = provider.get_tracer("tests.collect", "1.0")
        expected: dict[str, tuple[str, str, dict[str, str]]] = {}
        for request in range(40):
            with tracer.start_as_current_span("handle", attributes={"request.id": request}) as root:
                for step, name in enumerate(("tokenize", "infer", "respond")):
                    attrs = {
                        "step": step,
                        "cached": step == 0,
                        "ratio": 0.5,
                        "tags": ("a", "b"),
                        "who": "x'y",
                    }
                    with tracer.start_as_current_span(name, attributes=attrs) as child:
                        ctx = child.get_span_context()
                    rendered = {"step": str(step), "cached": "true" if step == 0 else "false"}
                    rendered |= {"ratio": "0.5", "tags": '["a","b"]', "who": "x'y"}
                    parent = f"{root.get_span_context().span_id:016x}"
                    expected[f"{ctx.span_id:016x}"] = (f"{ctx.trace_id:032x}", parent, rendered)
            ctx = root.get_span_context()
            expected[f"{ctx.span_id:016x}"] = (f"{ctx.trace_id:032x}", "", {"request.id": str(request)})
        assert provider.force_flush(30_000)
        provider.shutdown()
    finally:
        code = collector.stop()  # acknowledged (queued) requests are stored before it exits
    assert code == STOPPED, collector.output()
    assert "collect: stopped" in collector.output()
    with connect_reader(collector.db_path) as conn:
        rows = conn.execute(
            "SELECT SpanId, TraceId, ParentSpanId, SpanAttributes, ServiceName, ScopeName,"
            " ResourceAttributes->>'host.name' FROM otel_traces WHERE RunLabel = 'sdk'"
        ).fetchall()
    assert statuses and set(statuses) == {200}
    assert len(rows) == len(expected) == 160
    for span_id, trace_id, parent, attributes, service, scope, host in rows:
        want_trace, want_parent, want_attrs = expected[span_id]
        assert (trace_id, parent) == (want_trace, want_parent)
        assert {k: v for k, v in json.loads(attributes).items() if k in want_attrs} == want_attrs
        assert (service, scope, host) == ("checkout", "tests.collect", "box-1")


# -- requests by hand ----------------------------------------------------------------------------------


def test_json_request_is_answered_in_json_and_stored(collector: Collector) -> None:
    before = stored(collector.db_path, "live")
    response = collector.post(json_request("svc", spans_of(1, 5)), JSON)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith(JSON)
    assert response.json() == {}
    assert stored(collector.db_path, "live") == before + 5


def test_gzip_protobuf_request_and_deflate(collector: Collector) -> None:
    before = stored(collector.db_path, "live")
    response = collector.post(
        gzip.compress(proto_request("svc", spans_of(2, 7))), PROTOBUF, **{"content-encoding": "gzip"}
    )
    assert response.status_code == 200
    assert response.headers["content-type"] == PROTOBUF
    assert response.content == b""  # an empty ExportTraceServiceResponse: everything accepted
    body = zlib.compress(json_request("svc", spans_of(3, 2)))
    assert collector.post(body, JSON, **{"content-encoding": "deflate"}).status_code == 200
    assert stored(collector.db_path, "live") == before + 9


def test_retried_request_is_stored_once(collector: Collector) -> None:
    body = proto_request("svc", spans_of(4, 3))
    before = stored(collector.db_path, "live")
    for _ in range(3):
        assert collector.post(body, PROTOBUF).status_code == 200
    assert stored(collector.db_path, "live") == before + 3


def test_partial_success_names_rejected_spans(collector: Collector) -> None:
    spans = spans_of(5, 4)
    t, s, n, a, _ = spans[2]
    spans[2] = (t, s, n, a, a - 10)  # ends before it starts
    response = collector.post(json_request("svc", spans), JSON)
    assert response.status_code == 200
    partial = response.json()["partialSuccess"]
    assert partial["rejectedSpans"] == "1"
    assert "ends before it starts" in partial["errorMessage"]

    response = collector.post(proto_request("svc", spans), PROTOBUF)
    assert response.status_code == 200
    decoded = trace_service_pb2.ExportTraceServiceResponse.FromString(response.content)
    assert decoded.partial_success.rejected_spans == 1
    with connect_reader(collector.db_path) as conn:
        names = conn.execute("SELECT SpanName FROM otel_traces WHERE TraceId = ? ORDER BY 1", [t]).fetchall()
    assert [n for (n,) in names] == ["op0", "op1", "op3"]


def _status(response: httpx.Response) -> tuple[int, str]:
    if response.headers["content-type"].startswith(JSON):
        body = response.json()
        return body["code"], body["message"]
    from google.rpc import status_pb2

    status = status_pb2.Status.FromString(response.content)
    return status.code, status.message


def test_undecodable_bodies_get_400_with_a_status(collector: Collector) -> None:
    response = collector.post(b"\x0a\xff\xff\xff", PROTOBUF)
    assert response.status_code == 400
    code, message = _status(response)
    assert code == protocol.INVALID_ARGUMENT and "protobuf" in message

    response = collector.post(b'{"resourceSpans": [', JSON)
    assert response.status_code == 400
    assert "invalid JSON" in _status(response)[1]

    response = collector.post(b"not gzip at all", JSON, **{"content-encoding": "gzip"})
    assert response.status_code == 400
    assert "gzip" in _status(response)[1]


def test_too_large_bodies_and_bombs_get_413(collector: Collector) -> None:
    big = json_request("svc", spans_of(6, 1), {"pad": "x" * 250_000})
    assert collector.post(big, JSON).status_code == 413
    bomb = gzip.compress(b"{" + b" " * 50_000_000 + b"}")  # 50 MB of JSON in ~50 KB
    assert len(bomb) < 200_000
    response = collector.post(bomb, JSON, **{"content-encoding": "gzip"})
    assert response.status_code == 413
    assert "inflates" in _status(response)[1]


def test_unsupported_media_type_encoding_and_method(collector: Collector) -> None:
    assert collector.post(b"{}", "text/plain").status_code == 415
    assert collector.post(b"{}", JSON, **{"content-encoding": "br"}).status_code == 415
    assert collector.post(b"{}", "application/json; charset=utf-8").status_code == 200
    response = httpx.get(collector.url)
    assert response.status_code == 405 and response.headers["allow"] == "POST"
    assert httpx.post(collector.url.replace("/v1/traces", "/v1/metrics"), content=b"").status_code == 404


# -- backpressure, acknowledgement, shutdown -----------------------------------------------------------


def _hold_store(db_path: Path) -> ExitStack:
    """Open the store read-only and keep it open: the collector's writer cannot get in meanwhile."""
    stack = ExitStack()
    stack.enter_context(connect_reader(db_path))
    return stack


def test_full_queue_answers_429_with_retry_after_and_retries_succeed(tmp_path: Path) -> None:
    collector = Collector(
        tmp_path / "store.duckdb", "busy", "--queue-requests", "2", "--flush-interval-ms", "10"
    )
    try:
        holder = _hold_store(collector.db_path)
        results: dict[int, httpx.Response] = {}

        def send(n: int) -> None:
            results[n] = collector.post(proto_request("svc", spans_of(100 + n, 10)), PROTOBUF)

        threads = [threading.Thread(target=send, args=(n,)) for n in range(8)]
        for thread in threads:
            thread.start()
            time.sleep(0.05)
        deadline = time.monotonic() + 10
        while sum(r.status_code == 429 for r in results.values()) < 4 and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.3)
        # One request is with the writer (waiting for the store), two fill the queue, five are refused.
        throttled = [n for n, r in results.items() if r.status_code == 429]
        assert len(throttled) >= 4, {n: r.status_code for n, r in results.items()}
        for n in throttled:
            assert int(results[n].headers["retry-after"]) >= 1
            assert _status(results[n])[0] == protocol.RESOURCE_EXHAUSTED
        holder.close()  # the writer gets in and drains the queue
        for thread in threads:
            thread.join(30)
        throttled = [n for n, r in results.items() if r.status_code == 429]
        codes = sorted(r.status_code for r in results.values())
        assert codes == [200] * (8 - len(throttled)) + [429] * len(throttled)
        for n in throttled:  # what an exporter does: wait Retry-After, send again
            body = proto_request("svc", spans_of(100 + n, 10))
            assert collector.post_until_accepted(body, PROTOBUF).status_code == 200
    finally:
        assert collector.stop() == STOPPED, collector.output()
    assert stored(collector.db_path, "busy") == 80


def accepted_requests(collector: Collector) -> int:
    """Requests the collector has accepted, from its latest status line (`--stats-interval 0.5`)."""
    counts = [int(m.group(1).replace(",", "")) for m in map(ACCEPTED.search, collector.lines) if m]
    return counts[-1] if counts else 0


@pytest.mark.parametrize("ack", ["queued", "committed"])
def test_graceful_shutdown_flushes_everything_accepted(tmp_path: Path, ack: str) -> None:
    collector = Collector(tmp_path / "store.duckdb", "shutdown", "--flush-interval-ms", "10", "--ack", ack)
    holder = _hold_store(collector.db_path)  # the writer cannot store anything meanwhile
    results: dict[int, int] = {}

    def send(n: int) -> None:
        results[n] = collector.post(json_request("svc", spans_of(200 + n, 25)), JSON).status_code

    threads = [threading.Thread(target=send, args=(n,)) for n in range(5)]
    for thread in threads:
        thread.start()
    # All five accepted: answered already (queued) or waiting for the commit (committed), which only the
    # collector's status line tells (`5 requests`, every 0.5 s); a fixed 3 s wait stood in for it.
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and not (
        accepted_requests(collector) == 5 and (ack == "committed" or len(results) == 5)
    ):
        time.sleep(0.05)
    assert accepted_requests(collector) == 5, collector.output()
    assert results == ({} if ack == "committed" else dict.fromkeys(range(5), 200))
    assert stored(collector.db_path, "shutdown") == 0
    collector.process.send_signal(15)
    time.sleep(0.5)
    with pytest.raises(httpx.ConnectError):  # no longer accepting
        collector.post(json_request("svc", spans_of(299, 1)), JSON)
    holder.close()
    for thread in threads:
        thread.join(30)
    assert collector.process.wait(30) == STOPPED, collector.output()
    assert results == dict.fromkeys(range(5), 200)
    assert stored(collector.db_path, "shutdown") == 125


def test_ack_committed_survives_kill_9(tmp_path: Path) -> None:
    options = ("--flush-interval-ms", "1000", "--ack", "committed")
    collector = Collector(tmp_path / "store.duckdb", "kill9", *options)
    response = collector.post(proto_request("svc", spans_of(300, 12)), PROTOBUF)
    assert response.status_code == 200
    collector.kill()  # SIGKILL: no flush, no cleanup
    assert stored(collector.db_path, "kill9") == 12


# -- units ---------------------------------------------------------------------------------------------


def test_decompress_is_bounded() -> None:
    payload = b"a" * 10_000
    assert decompress(gzip.compress(payload), "gzip", 10_000) == payload
    assert decompress(gzip.compress(payload) + gzip.compress(b"b"), "gzip", 10_001) == payload + b"b"
    with pytest.raises(TooLarge):
        decompress(gzip.compress(payload), "gzip", 9_999)
    with pytest.raises(BadEncoding):
        decompress(gzip.compress(payload)[:-12], "gzip", 20_000)
    assert decompress(payload, "identity", 1) == payload  # the raw body limit is checked before


def test_response_bodies_match_the_proto_definitions() -> None:
    raw = protocol.export_response(protocol.PROTOBUF, 3, "three bad")
    decoded = trace_service_pb2.ExportTraceServiceResponse.FromString(raw)
    assert (decoded.partial_success.rejected_spans, decoded.partial_success.error_message) == (3, "three bad")
    assert protocol.export_response(protocol.PROTOBUF) == b""
    assert json.loads(protocol.export_response(protocol.JSON, 300, "m")) == {
        "partialSuccess": {"rejectedSpans": "300", "errorMessage": "m"}
    }
    from google.rpc import status_pb2

    status = status_pb2.Status.FromString(protocol.status_body(protocol.PROTOBUF, 8, "é" * 200))
    assert (status.code, status.message) == (8, "é" * 200)


def test_protobuf_bodies_take_the_fast_path_and_bad_ones_the_reference_decoder() -> None:
    from ingest.arrow_batch import ArrowSpans
    from ingest.columns import SpanColumns

    spans = spans_of(9, 3)
    fast, rejected = protocol.decode(proto_request("svc", spans), PROTOBUF, "req")
    assert isinstance(fast, ArrowSpans) and len(fast) == 3 and rejected == []
    reference, _ = protocol.decode(json_request("svc", spans), JSON, "req")
    assert fast.to_arrow().column("SpanId").to_pylist() == reference.to_arrow().column("SpanId").to_pylist()
    t, s, n, a, _ = spans[1]
    spans[1] = (t, s, n, a, a - 10)  # ends before it starts: only the reference decoder names it
    slow, rejected = protocol.decode(proto_request("svc", spans), PROTOBUF, "req")
    assert isinstance(slow, SpanColumns) and len(slow) == 2
    assert len(rejected) == 1 and "ends before it starts" in rejected[0].message
