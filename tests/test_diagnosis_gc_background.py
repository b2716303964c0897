"""Background collections under long requests are not a cause (gc_reports.reported_weight).

The mechanism: an orchestrator's runtime reports its minor collections (2-3 ms, about every 250 ms:
1 % of its time). Most requests are short (a cache hit, 10 ms); a third await an LLM's streamed answer
for 0.5-3 s in another process. Those long requests overlap a dozen collections each by chance, and
over the short median latency that read as pauses adding a third of a request; yet a pause while the
request awaits the callee delays it only by its part after the reply came. A runtime paused for 10 %
of its time in longer collections (its own steps stretched) stays a cause."""

from __future__ import annotations

import numpy as np
from mechanism_frames import Pauses, TraceBuilder

from tailscope.analysis.diagnosis import diagnose_frame


def _orchestrator(seed: int, pause_ms: tuple[float, float], every_ms: float, n: int = 3000,
                  traced: bool = True):
    b = TraceBuilder(seed)
    pods = ["orch/0", "orch/1"]
    until = n / 20.0 * 1000.0 + 5000.0
    stops = {p: [] for p in pods}
    gc = []
    for pod in pods:
        at = float(b.rng.uniform(0, every_ms))
        while at < until:
            length = float(b.rng.uniform(*pause_ms))
            stops[pod].append((at, at + length))
            gc.append((pod, at, at + length))
            at += length + float(b.rng.exponential(every_ms))
    pauses = Pauses(stops)
    for t in b.arrivals(n, rps=20.0):
        b.new_trace()
        pod = pods[int(b.rng.integers(2))]
        root = b.span(None, "POST /v1/chat", "Server", pod, t, 0.0)
        end = pauses.run(pod, t + 0.2, float(b.rng.lognormal(np.log(8.0), 0.2)))
        b.span(root, "lookup", "Internal", pod, t + 0.2, end - t - 0.2)
        if b.rng.random() < 0.33:
            answer = float(b.rng.uniform(500.0, 3000.0))
            call = b.span(root, "llm.chat", "Client", pod, end + 0.1, 0.0)
            if traced:  # else a callee with no span of its own (a database, a vendor)
                b.span(call, "generate", "Server", "llm/0", end + 0.5, answer)
            read = pauses.run(pod, end + answer + 1.0, 0.2)
            b.set_end(call, read)
            end = read
        b.set_end(root, pauses.run(pod, end + 0.1, 1.0))
    return diagnose_frame(b.frame(gc=gc))


def _gc(result) -> float:
    return max((f.confidence for f in result.findings if f.pattern == "gc_pause"), default=0.0)


def test_minor_collections_under_long_awaited_requests_are_not_a_cause():
    result = _orchestrator(2, (2.0, 3.0), 250.0)
    assert _gc(result) < 0.5, result.findings


def test_a_runtime_paused_a_tenth_of_its_time_is_a_cause():
    result = _orchestrator(3, (20.0, 40.0), 300.0)
    assert _gc(result) >= 0.5, result.findings


def test_a_pause_while_calls_side_by_side_are_awaited_counts_once():
    """An aggregator awaits three callees at once (10-40 ms) and is paused 20-25 ms: the awaited pause
    time is 5 ms, not once per call (summed per call it would take a real pause's delay away)."""
    from tailscope.analysis.diagnosis.gc_reports import awaited
    from tailscope.analysis.diagnosis.model import Context

    b = TraceBuilder(1)
    for i in range(60):
        b.new_trace()
        t = i * 100.0
        root = b.span(None, "GET /home", "Server", "bff/0", t, 50.0)
        for k in range(3):
            call = b.span(root, f"GET /{k}", "Client", "bff/0", t + 9.0, 32.0)
            b.span(call, f"GET /{k}", "Server", f"svc{k}/0", t + 10.0, 30.0)
    frame = b.frame(gc=[("bff/0", 1020.0, 1025.0), ("bff/0", 2045.0, 2048.0)])
    ctx = Context(frame)
    waited = awaited(ctx, *ctx.reported_pauses)
    assert round(waited[10] / 1e6, 3) == 5.0  # inside the three calls' common window: once
    assert waited[20] == 0  # after the replies came: a delay, not awaited time


def test_minor_collections_under_long_waits_on_an_untraced_callee_are_not_a_cause():
    """The same long waits on a callee that is not traced (a database row held by another
    transaction, a vendor): the caller only awaits the reply, as it does a traced callee's. Before:
    gc_pause 0.9 (only a traced callee's SERVER span counted as awaited)."""
    result = _orchestrator(2, (2.0, 3.0), 250.0, traced=False)
    assert _gc(result) < 0.5, result.findings


def test_a_runtime_paused_a_tenth_of_its_time_is_a_cause_beside_an_untraced_callee():
    result = _orchestrator(3, (20.0, 40.0), 300.0, traced=False)
    assert _gc(result) >= 0.5, result.findings
