"""A backlog in front of a server's workers that share one listening socket (a Puma pod, a pre-fork
server): the first worker with a free thread takes the next request, so only some workers' calls are
seen starting as another of theirs ends, and the backlog's threads share the process (an interpreter
lock, the cores), their spans stretched. As in calm stretches, every worker's calls lose the wait
and take a calm call's time."""

from __future__ import annotations

import numpy as np

from tailscope.analysis.whatif.handlers import handlers
from tailscope.analysis.whatif.levers import Inputs
from tailscope.analysis.whatif.queue_levers import handlers_as_calm
from tailscope.analysis.whatif.retime import layout, request_latency, retime
from tests.hand_frames import MS, hand_frame


def _backlog_rows() -> list[tuple]:
    """A proxy (instance 0) forwards to two workers (1 and 2, one thread each), 0.1 ms on the wire.
    Calm: a call every 20 ms, alternating, served in 10 ms. A burst of 60 at 5 s: worker 1 takes its
    30 as its thread frees (each span opens 50 µs after the last ends); worker 2's 30 wait as long
    but open 5 ms after its last ends (it accepted from the shared socket late); the burst's spans
    take 15 ms."""
    rows: list[tuple] = []

    def call(trace: int, sent: float, began: float, worker: int, took: float) -> None:
        rows.append((trace, -1, "proxy", "Server", 0, sent, began - sent + took + 0.1))
        rows.append((trace, len(rows) - 1, "GET /recs", "Server", worker, began, took))

    for k in range(240):
        call(k, 20.0 * k, 20.0 * k + 0.1, 1 + k % 2, 10.0)
    began = [5000.1, 5000.1]
    for k in range(60):
        worker = k % 2
        call(240 + k, 5000.0, began[worker], 1 + worker, 15.0)
        began[worker] += 15.0 + (0.05 if worker == 0 else 5.0)
    return rows


def test_every_worker_of_a_shared_socket_loses_the_backlog_and_its_stretch() -> None:
    f = hand_frame(_backlog_rows(), instances=("proxy", "w1", "w2"))
    h = handlers(f)
    assert h is not None and set(h.slots) == {1}  # only worker 1 is seen queueing calls
    x = Inputs(f, layout(f), f.stage, None, [], 0)
    x.handlers = h
    lever = handlers_as_calm(x)
    assert lever is not None
    before = request_latency(f, f.dur, client_side=False) / MS
    after = request_latency(f, retime(f, lever.edit, x.lay).dur, client_side=False) / MS
    assert np.percentile(before, 99) > 500
    assert np.percentile(after, 99) < 10.5, np.sort(after)[-10:]


def test_a_queue_named_at_a_span_that_is_no_wait_takes_the_requests_of_calm_stretches() -> None:
    """The handler's spans are all the trace shows (the proxy not traced, the backlog's wait only in a
    queue-time attribute): a queueing finding naming the request's root (or a call inside it) has no
    wait span to shorten, so the requests of busy stretches (their spans stretched: the threads share
    the process) take calm requests' times."""
    from tailscope.analysis.whatif.engine import evaluate

    rows = [(k, -1, "RecsController#index", "Server", 0, 20.0 * k, 10.0) for k in range(240)]
    rows += [(240 + k, -1, "RecsController#index", "Server", 0, 5000.0 + 2.0 * k, 18.0) for k in range(60)]
    f = hand_frame(rows)
    finding = {"pattern": "queueing", "confidence": 0.9, "span_name": "RecsController#index",
               "stage": "queue", "evidence": {"stats": {}}}
    result = evaluate(f, [finding])
    calm = [o for o in result.outcomes if o.key.startswith("queue_as_calm")]
    assert result.measured.p99_ms > 17
    assert calm and calm[0].p99_ms < 10.5, [(o.key, o.p99_ms) for o in result.outcomes]


def test_requests_as_calm_composed_with_a_dependency_fix_still_fixes_the_dependency() -> None:
    """A busy stretch stretches every step 1.8x (the threads share the process); a search call is slow
    (60 ms instead of 5) in a third of all requests. Both fixed at once: the busy requests take calm
    ones' times step by step, and their slow searches still take the search's p50 (a calm request's
    whole time drawn would bring its own slow search back)."""
    from tailscope.analysis.whatif.engine import evaluate

    rows: list[tuple] = []
    for k in range(300):
        stretch = 1.8 if k >= 240 else 1.0
        search = (60.0 if k % 3 == 0 else 5.0) * stretch
        t, work = 20.0 * k if k < 240 else 4800.0 + 1.0 * (k - 240), 5.0 * stretch
        root = len(rows)
        rows.append((k, -1, "GET /recs", "Server", 0, t, work + search))
        rows.append((k, root, "search", "Client", 0, t + work, search))
    f = hand_frame(rows)
    findings = [{"pattern": "queueing", "confidence": 0.9, "span_name": "GET /recs", "stage": "queue",
                 "evidence": {"stats": {}}},
                {"pattern": "slow_dependency", "confidence": 0.9, "span_name": "search",
                 "evidence": {"stats": {}}}]
    result = evaluate(f, findings, combine=[("queue_as_calm", "dependency_p50")])
    both = [o for o in result.outcomes if o.key.startswith("queue_as_calm") and "+dependency_p50" in o.key]
    assert both, [o.key for o in result.outcomes]
    assert result.measured.p99_ms > 100
    assert both[0].p99_ms < 20, both[0].p99_ms  # a calm request with a slow search drawn: 65 ms


def test_the_handler_wait_as_calm_composed_with_a_dependency_fix_still_fixes_the_dependency() -> None:
    """The backlog of the first test, each call's handler running a search (60 ms in one call in
    three, else 5 ms; stretched 1.5x in the burst): both fixed at once, a busy call scaled to a calm
    call's time step by step keeps its search for the dependency fix."""
    from tailscope.analysis.whatif.engine import evaluate

    rows: list[tuple] = []

    def call(trace: int, sent: float, began: float, worker: int, stretch: float) -> None:
        search = (60.0 if trace % 3 == 0 else 5.0) * stretch
        took = search + 5.0 * stretch
        rows.append((trace, -1, "proxy", "Server", 0, sent, began - sent + took + 0.1))
        rows.append((trace, len(rows) - 1, "GET /recs", "Server", worker, began, took))
        rows.append((trace, len(rows) - 1, "search", "Client", worker, began + 5.0 * stretch, search))

    for k in range(240):
        call(k, 100.0 * k, 100.0 * k + 0.1, 1 + k % 2, 1.0)
    free = [24000.1, 24000.1]
    for k in range(60):
        w = k % 2
        call(240 + k, 24000.0, free[w], 1 + w, 1.5)
        free[w] = rows[-2][5] + rows[-2][6] + 0.05
    f = hand_frame(rows, instances=("proxy", "w1", "w2"))
    findings = [{"pattern": "queueing", "confidence": 0.9, "span_name": None, "evidence": {"stats": {}}},
                {"pattern": "slow_dependency", "confidence": 0.9, "span_name": "search",
                 "evidence": {"stats": {}}}]
    result = evaluate(f, findings, combine=[("queue_as_calm:handlers", "dependency_p50")])
    both = [o for o in result.outcomes if "+dependency_p50" in o.key]
    assert both, [o.key for o in result.outcomes]
    assert result.measured.p99_ms > 500
    assert both[0].p99_ms < 20, both[0].p99_ms  # a calm call with a slow search drawn whole: 65 ms
