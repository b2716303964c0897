"""A wait a server reports as a number on its span, not as a span (reported_waits.py): a scheduler's
queue time carrying the slow requests' extra time is queueing; the same number named as a pool's or a
lock's wait, a wait that grows with the request's own size, and an execution time are not."""

from __future__ import annotations

import heapq

import numpy as np

from tailscope.analysis.diagnosis import diagnose_frame, reported_waits
from tailscope.analysis.diagnosis.model import Context
from tests.mechanism_frames import TraceBuilder, by_pattern, lognormal

N, RPS, SLOTS = 2400, 40.0, 2


def _engine(seed: int, wait_key: str = "engine.pending_time", own_size: bool = False,
            heavy_exec: bool = False) -> TraceBuilder:
    """A front service calls an engine (one instance, SLOTS requests served at a time, first come
    first served) that reports each request's times as attributes in seconds, with no child span:
    `wait_key` (before service) and `engine.busy_time` (its service). From 40 % to 60 % of the run a
    tenth of the requests are ten times heavier: the others queue behind them. `own_size`: the
    reported wait is instead the request's own loading time, growing with its `engine.input_items`.
    `heavy_exec`: the heavy requests' extra time is in their own service only, at a rate the slots
    absorb (no queue builds)."""
    b = TraceBuilder(seed)
    free = [0.0] * SLOTS
    for i, t in enumerate(b.arrivals(N, RPS)):
        b.new_trace()
        items = int(b.rng.integers(10, 400))
        episode = 0.4 * N <= i < 0.6 * N
        heavy = episode and b.rng.random() < 0.1
        work = lognormal(b.rng, 12.0, 0.3) * (40.0 if heavy and not heavy_exec else 1.0)
        if heavy_exec and episode:
            work += 3.0 * lognormal(b.rng, 150.0, 0.3) * (b.rng.random() < 0.1)
        root = b.span(None, "POST /answer", "Server", "front/0", float(t), 0.0)
        call_at = float(t) + lognormal(b.rng, 1.0, 0.2)
        arrive = call_at + 0.3
        if heavy_exec:
            begin = arrive
        else:
            begin = max(arrive, heapq.heappop(free))
            heapq.heappush(free, begin + work)
        wait = begin - arrive
        if own_size:
            wait = 0.2 * items * (10.0 if episode else 1.0) * lognormal(b.rng, 1.0, 0.1)
            begin = arrive + wait
        end = begin + work
        call = b.span(root, "POST", "Client", "front/0", call_at, end + 0.3 - call_at)
        b.span(call, "generate", "Server", "engine/0", arrive, end - arrive,
               **{wait_key: round(wait / 1e3, 5), "engine.busy_time": round(work / 1e3, 5),
                  "engine.input_items": items})
        b.set_end(root, end + 0.3 + lognormal(b.rng, 0.8, 0.2))
    return b


def _reported(frame) -> float:
    found = reported_waits.detect(Context(frame))
    return found[0].confidence if found else 0.0


def test_a_queue_time_reported_on_the_server_span_is_queueing():
    frame = _engine(1).frame()
    assert _reported(frame) >= 0.8
    findings = diagnose_frame(frame).findings
    assert findings[0].pattern == "queueing" and findings[0].confidence >= 0.5, by_pattern(findings)
    assert findings[0].span_name == "generate"
    assert findings[0].evidence["stats"]["attribute"] == "engine.pending_time"
    assert by_pattern(findings).get("slow_dependency", 0.0) < 0.5  # the callee queued, its work no slower


def test_the_same_number_as_a_pools_wait_is_not_a_server_queue():
    frame = _engine(1, wait_key="engine.pool.wait_time").frame()
    assert _reported(frame) == 0.0


def test_a_wait_growing_with_the_requests_own_size_is_its_own_work():
    frame = _engine(1, own_size=True).frame()
    assert _reported(frame) < 0.5


def test_extra_time_in_the_servers_own_work_is_no_queue():
    frame = _engine(1, heavy_exec=True).frame()
    assert _reported(frame) < 0.5


def test_components_read_their_unit_by_suffix_or_in_seconds():
    b = TraceBuilder(2)
    for t in b.arrivals(300, 50.0):
        b.new_trace()
        d = lognormal(b.rng, 40.0, 0.5)
        part = d * b.rng.uniform(0.1, 0.9)
        b.span(None, "op", "Server", "svc/0", float(t), d, **{
            "svc.queue_ms": round(part, 3), "svc.queue": round(part / 1e3, 6),
            "svc.wait_us": round(part * 1e3),
            "svc.max_wait_ms": 500.0, "svc.items": int(b.rng.integers(1, 50))})
    frame = b.frame()
    ctx = Context(frame)
    parts = reported_waits.components(ctx, frame.names.index("op"))
    assert set(parts) == {"svc.queue_ms", "svc.wait_us"}  # "svc.queue" says no time; max_wait is a setting
    a, b_ = parts["svc.queue_ms"][1], parts["svc.wait_us"][1]
    assert np.allclose(a, b_, rtol=1e-3, atol=2e3)
    assert reported_waits.unit_of("pendingTimeMillis") == 1e6
    assert reported_waits.is_time("gen_ai.latency.time_in_queue")
    assert reported_waits.is_wait("time_in_queue") and not reported_waits.is_wait("db.pool.wait_time")


def _as_model_server(**kwargs) -> list:
    """_engine's server span mapped to the model's forward (a model server that exports one span per
    request, its batch queue time as an attribute: TF Serving), diagnosed (diag37, feast-redis class 3)."""
    b = _engine(1, **kwargs)
    b.stages["generate"] = "model_forward"
    return diagnose_frame(b.frame()).findings


def test_a_model_servers_reported_queue_is_no_forward():
    findings = _as_model_server()  # compute_bound 0.99 on top over queueing 0.90 before
    assert findings[0].pattern == "queueing" and findings[0].confidence >= 0.8, by_pattern(findings)
    forward = [fd for fd in findings if fd.pattern == "compute_bound"]
    assert all(fd.evidence["stats"].get("part_of") == "queueing" for fd in forward), forward


def test_a_model_servers_longer_work_stays_compute():
    findings = _as_model_server(heavy_exec=True)
    assert findings[0].pattern == "compute_bound" and findings[0].confidence >= 0.5, by_pattern(findings)
    assert "part_of" not in findings[0].evidence["stats"]
