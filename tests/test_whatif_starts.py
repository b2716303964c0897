"""Instances started for the requests and callees that outlast their callers' spans, on hand-built
traces: an init span only a few requests run, a callee that started far later than its caller's call
(an environment started for it, no span of the init), and a remote callee's span that ends after its
caller's (a proxy's call ends at the response headers while the server sends the body)."""

from __future__ import annotations

import numpy as np
import pytest

from tailscope.analysis.whatif.cold_levers import prewarmed
from tailscope.analysis.whatif.levers import Inputs
from tailscope.analysis.whatif.retime import Edit, layout, request_latency, retime
from tests.hand_frames import MS, hand_frame


def _inputs(rows: list[tuple], instances: tuple[str, ...] = ("a", "b")) -> Inputs:
    f = hand_frame(rows, instances=instances)
    return Inputs(f, layout(f), f.stage, None, [], 0)


def test_an_init_span_that_few_requests_run_is_gone_when_prewarmed() -> None:
    """Five of forty requests start an environment first (a 1 s `init` span, then their work at 30 ms:
    lazy imports); the environments are not told apart (one instance): pre-warmed, no request runs
    the init and every one's work takes a warm request's 10 ms."""
    rows: list[tuple] = []
    for k in range(40):
        t, cold = 100.0 * k, k % 8 == 0
        root = len(rows)
        rows.append((k, -1, "handler", "Server", 0, t, 1030.0 if cold else 10.0))
        if cold:
            rows.append((k, root, "init", "Internal", 0, t, 1000.0))
        rows.append((k, root, "work", "Internal", 0, t + (1000.0 if cold else 0.0), 30.0 if cold else 10.0))
    x = _inputs(rows)
    lever = prewarmed(x, {"pattern": "cold_start", "span_name": "init", "evidence": {"stats": {}}})
    assert lever is not None
    new = request_latency(x.frame, retime(x.frame, lever.edit, x.lay).dur, client_side=False) / MS
    assert new.round(3).tolist() == [10.0] * 40


def test_a_callee_that_started_late_after_its_callers_call_starts_as_soon_as_a_warm_one() -> None:
    """The caller's call reaches a started handler in about 5 ms; four of sixty waited 1.2 s for an
    environment to start (no span of it: the gap before the handler's span): pre-warmed, they take
    a warm call's gap, and the handler's own work is unchanged."""
    rows: list[tuple] = []
    for k in range(60):
        t, gap = 50.0 * k, (1200.0 if k % 15 == 3 else 5.0 + 0.1 * (k % 3))
        rows.append((k, -1, "call", "Client", 0, t, gap + 20.0 + 0.5))
        rows.append((k, len(rows) - 1, "handler", "Server", 1, t + gap, 20.0))
    x = _inputs(rows)
    lever = prewarmed(x, {"pattern": "cold_start", "span_name": "handler", "evidence": {"stats": {}}})
    assert lever is not None
    new = request_latency(x.frame, retime(x.frame, lever.edit, x.lay).dur, client_side=True) / MS
    assert new.max() < 26.0
    assert sorted(np.unique(new.round(1)).tolist()) == [25.5, 25.6, 25.7]


def test_a_remote_callee_ending_after_its_callers_span_was_awaited() -> None:
    """A proxy's call (instance a) ends at the response headers, 5 ms before the server's span
    (instance b) ends with the body: a query 80 ms shorter makes the call 80 ms shorter, not held
    where it was (a callee outlasting its caller's span is fire and forget only on its own instance:
    test_whatif.py)."""
    rows = [
        (0, -1, "POST", "Client", 0, 0.0, 100.0),
        (0, 0, "quote", "Server", 1, 0.5, 104.5),
        (0, 1, "db", "Client", 1, 1.0, 90.0),
    ]
    x = _inputs(rows)
    edit = Edit.none(3)
    edit.dur[2] = 10 * MS
    dur = retime(x.frame, edit, x.lay).dur / MS
    assert dur.round(3).tolist() == [20.0, 24.5, 10.0]


def test_environments_told_apart_lose_their_start_wait_and_their_slow_first_calls() -> None:
    """Six environments (instances told apart) take ten calls each; each one's first call waited
    1.2 s for it to start, and its first three ran at 40 ms (lazy imports), the rest 5 ms and 20 ms.
    Pre-warmed: the slow first calls (from the instance's own spans) and the wait to start (from the
    gaps) both go."""
    rows: list[tuple] = []
    for k in range(60):
        env, nth = 1 + k % 6, k // 6
        gap = 1200.0 if nth == 0 else 5.0 + 0.1 * (k % 3)
        took = 40.0 if nth < 3 else 20.0
        rows.append((k, -1, "call", "Client", 0, 50.0 * k, gap + took + 0.5))
        rows.append((k, len(rows) - 1, "handler", "Server", env, 50.0 * k + gap, took))
    x = _inputs(rows, instances=tuple(f"i{j}" for j in range(7)))
    lever = prewarmed(x, {"pattern": "cold_start", "span_name": "handler", "evidence": {"stats": {}}})
    assert lever is not None
    new = request_latency(x.frame, retime(x.frame, lever.edit, x.lay).dur, client_side=True) / MS
    assert new.max() < 26.0


def test_a_dependency_with_half_its_calls_on_a_slow_backend_is_fixed_to_the_fast_calls() -> None:
    """Half the calls go to a backend that got 9x slower (90 ms against 10): the median call is on
    the border, not a healthy one; fixed, every call takes a fast call's time (the request 12 ms)."""
    from tailscope.analysis.whatif.levers import dependency_p50

    rows: list[tuple] = []
    for k in range(200):
        took = (90.0 if k % 2 else 10.0) + 0.1 * (k % 5)
        root = len(rows)
        rows.append((k, -1, "POST /score", "Server", 0, 100.0 * k, took + 2.0))
        rows.append((k, root, "InvokeEndpoint", "Client", 0, 100.0 * k + 1.0, took))
    x = _inputs(rows)
    lever = dependency_p50(x, {"pattern": "slow_dependency", "span_name": "InvokeEndpoint"})
    assert lever is not None
    new = request_latency(x.frame, retime(x.frame, lever.edit, x.lay).dur, client_side=False) / MS
    assert new.max() <= 12.5


def test_a_queue_no_span_shows_is_absorbed_by_the_requests_of_calm_stretches() -> None:
    """A thread pool starved for a tenth of the run: every request then takes 300-800 ms (its
    awaits' completions queue for a thread: no span of the queue, no handler seen waiting); a
    queueing finding without a span gets the requests of those stretches as calm ones' (10-12 ms)."""
    from tailscope.analysis.whatif.engine import evaluate

    rows: list[tuple] = []
    for k in range(2000):
        starved = 900 <= k < 1100
        took = (300.0 + 2.5 * (k - 900) if starved else 10.0 + 0.5 * (k % 5))
        rows.append((k, -1, "POST /quote", "Server", 0, 10.0 * k, took))
    f = hand_frame(rows)
    result = evaluate(f, [{"pattern": "queueing", "confidence": 0.9, "span_name": None}])
    fix = [o for o in result.outcomes if o.key == "queue_as_calm:POST /quote"]
    assert fix and fix[0].p99_ms <= 12.0 + 1e-6


def test_a_long_warm_up_whose_slow_calls_thin_out_is_read_to_its_end() -> None:
    """Two instances start cold together; for each one's first hundred requests two calls in three
    take 400 ms (the JIT's tiers, a cache filling), the third 30 ms; then 30 ms. No warm instance to
    compare with in the first 80 and no window of fast calls settles before the hundredth: pre-warmed,
    every request takes a warm one's 32 ms or so."""
    rows: list[tuple] = []
    for k in range(600):
        inst, j = k % 2, k // 2
        took = 400.0 if j < 100 and j % 3 != 0 else 30.0 + 0.2 * (k % 5)
        root = len(rows)
        rows.append((k, -1, "POST /score", "Server", inst, 50.0 * k, took + 2.0))
        rows.append((k, root, "predict", "Internal", inst, 50.0 * k + 1.0, took))
    x = _inputs(rows)
    lever = prewarmed(x, {"pattern": "cold_start", "span_name": "POST /score", "evidence": {"stats": {}}})
    assert lever is not None
    new = request_latency(x.frame, retime(x.frame, lever.edit, x.lay).dur, client_side=False) / MS
    assert new.max() <= 33.0


def test_an_init_child_under_the_span_the_finding_names_is_gone_when_prewarmed() -> None:
    """The cold-start finding names the function's invocation span, which every request runs (one
    environment per request here, called from a gateway); the start is its first child, `init`
    (1 s), in one request in ten: pre-warmed, no request runs it."""
    rows: list[tuple] = []
    for k in range(60):
        t, cold = 100.0 * k, k % 10 == 0
        rows.append((k, -1, "gateway", "Server", 0, t, 1012.0 if cold else 12.0))
        rows.append((k, len(rows) - 1, "handler", "Server", 1 + k, t + 1.0, 1010.0 if cold else 10.0))
        handler = len(rows) - 1
        if cold:
            rows.append((k, handler, "init", "Internal", 1 + k, t + 1.0, 1000.0))
        rows.append((k, handler, "work", "Internal", 1 + k, t + (1001.0 if cold else 1.0), 10.0))
    x = _inputs(rows, instances=tuple(["gw"] + [f"env{k}" for k in range(60)]))
    lever = prewarmed(x, {"pattern": "cold_start", "span_name": "handler", "evidence": {"stats": {}}})
    assert lever is not None
    new = request_latency(x.frame, retime(x.frame, lever.edit, x.lay).dur, client_side=False) / MS
    assert new.max() == pytest.approx(12.0, abs=0.01)
