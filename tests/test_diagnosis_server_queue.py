"""A server's wait for its capacity is queueing, not lock_contention (server_queue.py).

The mechanism: a model server runs one generation at a time (its scheduler has one slot); calls that
arrive while it is busy wait in the scheduler's queue, first come first served. Each call's time at the
server is its wait plus its own work, so it rises with the calls already there, one service time per
call ahead: what lock_contention's crowd test reads as a mutex. Where the server names that wait (a
queue-stage child span) or reports the call as one span, the wait is for the server's capacity.
Where the wait is spent in a step inside the server's work (a span with no queue stage), a lock
stays the reading."""

from __future__ import annotations

import numpy as np
from mechanism_frames import TraceBuilder

from tailscope.analysis.diagnosis import diagnose_frame


def _server(report: str, seed: int = 3, n: int = 2500):
    """An orchestrator (embed call, 10 ms of its own, then the model call) in front of one model server
    with a single generation slot; `report`: how the server's side shows: 'queue' (a scheduler.wait
    span, then the work), 'single' (one span) or 'step' (the wait inside a step of its work)."""
    b = TraceBuilder(seed)
    b.stages.update({"scheduler.wait": "queue", "generate": "postprocessing", "POST /embed": "ingress"})
    free = 0.0
    for t in b.arrivals(n, rps=32.0):
        b.new_trace()
        orch = f"orchestrator/{b.trace % 2}"
        root = b.span(None, "POST /ask", "Server", orch, t, 0.0)
        embed = b.span(root, "embed", "Client", orch, t + 0.5, 5.0)
        server = b.span(embed, "POST /embed", "Server", "embedder/0", t + 0.7, 4.6)
        b.span(server, "encode", "Internal", "embedder/0", t + 0.8, 4.4)
        b.span(root, "prepare", "Internal", orch, t + 6.0, 10.0)
        arrive = t + 16.5
        work = float(b.rng.lognormal(np.log(18.0), 0.3))
        begin = max(arrive, free)
        free = begin + work
        call = b.span(root, "chat", "Client", orch, t + 16.0, free - t - 16.0 + 0.5)
        srv = b.span(call, "POST /generate", "Server", "model/0", arrive, free - arrive)
        if report == "queue":
            b.span(srv, "scheduler.wait", "Internal", "model/0", arrive, begin - arrive)
            b.span(srv, "generate", "Internal", "model/0", begin, work)
        elif report == "step":
            b.span(srv, "tokenize", "Internal", "model/0", arrive, 0.3)
            b.span(srv, "generate", "Internal", "model/0", arrive + 0.3, free - arrive - 0.3)
        b.set_end(root, free + 1.0)
    return diagnose_frame(b.frame())


def _top(result, pattern: str):
    found = [f for f in result.findings if f.pattern == pattern]
    return found[0] if found else None


def test_a_wait_in_the_servers_named_queue_is_queueing():
    result = _server("queue")
    queue, lock = _top(result, "queueing"), _top(result, "lock_contention")
    assert queue is not None and queue.confidence >= 0.8, result.findings
    assert queue.span_name == "scheduler.wait" and queue.stage == "queue"
    assert "model" in str(queue.evidence["stats"].get("service")), queue.evidence["stats"]
    assert lock is None or lock.confidence < 0.5, lock


def test_a_server_reported_as_one_span_is_queueing_held_below_certainty():
    result = _server("single")
    queue, lock = _top(result, "queueing"), _top(result, "lock_contention")
    assert queue is not None and 0.5 <= queue.confidence <= 0.7, result.findings
    assert queue.span_name == "POST /generate"
    assert "lock inside it is not ruled out" in queue.evidence["summary"]
    assert lock is None or lock.confidence < 0.5, lock


def test_a_wait_inside_a_step_of_the_servers_work_stays_a_lock():
    result = _server("step")
    lock = _top(result, "lock_contention")
    assert lock is not None and lock.confidence >= 0.5, result.findings
    assert lock.span_name == "generate"
