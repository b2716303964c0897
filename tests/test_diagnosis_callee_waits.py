"""A call that waits in its callee's accept queue is no lock in the caller (callee_waits.py): the
callee's workers are all busy during a burst, the calls wait before its handler starts, and the more
calls the caller has in flight the longer each lasts (lock_contention's statistic, read at 0.99 on
the caller's CLIENT span). A mutex in the caller around the call reads alike but keeps its finding."""

from __future__ import annotations

import numpy as np

from tailscope.analysis.diagnosis import diagnose_frame
from tests.mechanism_frames import TraceBuilder, lognormal


def _found(frame) -> list[tuple[str, str | None, float]]:
    return [(f.pattern, f.span_name, round(f.confidence, 2)) for f in diagnose_frame(frame).findings]


def _pooled_callee(seed: int, workers: int = 3) -> TraceBuilder:
    """Four caller instances call one callee instance with `workers` workers (a call waits for a
    free one, in arrival order); for 1.5 s a third of the way in, arrivals come at 1.4x what the
    workers serve."""
    b = TraceBuilder(seed)
    arrivals = np.cumsum(b.rng.exponential(1000.0 / 100.0, 3000))
    t0 = arrivals[1000]
    extra = t0 + np.sort(b.rng.uniform(0, 1500.0, int(1.4 * workers * 1000.0 / 20.0 * 1.5)))
    free = [0.0] * workers
    for t in np.sort(np.r_[arrivals, extra]).tolist():
        b.new_trace()
        inst = f"bff/{int(b.rng.integers(4))}"
        root = b.span(None, "GET /search", "Server", inst, t, 0.0)
        cur = t + 0.2
        slot = int(np.argmin(free))
        begin = max(free[slot], cur + 0.3)
        work = lognormal(b.rng, 20.0, 0.2)
        free[slot] = begin + work
        call = b.span(root, "POST", "Client", inst, cur, begin + work + 0.3 - cur)
        b.span(call, "POST /rerank", "Server", "rerank/0", begin, work)
        b.set_end(root, begin + work + 0.8)
    return b


def test_calls_queued_for_a_busy_callee_are_its_queue_not_a_lock() -> None:
    found = _found(_pooled_callee(3).frame())
    # before: lock_contention 'POST' 0.98 on top (over the callee's accept queue, 0.97)
    assert found[0][0] == "queueing" and found[0][2] >= 0.8, found
    assert not [f for f in found if f[0] == "lock_contention" and f[2] >= 0.5], found


def _caller_mutex(seed: int, with_lock_span: bool = True) -> TraceBuilder:
    """Each caller instance holds one connection to a callee with ample workers, under a mutex: a
    call waits in the caller for the one before it (inside its CLIENT span, its `lock` child), then
    the callee answers at once (its SERVER span starts as soon as the call is sent)."""
    b = TraceBuilder(seed)
    gaps = b.rng.exponential(1000.0 / 90.0, 3000)
    arrivals = np.cumsum(gaps)
    free = {0: 0.0, 1: 0.0}
    for t in arrivals.tolist():
        b.new_trace()
        k = int(b.rng.integers(2))
        inst = f"bff/{k}"
        root = b.span(None, "GET /search", "Server", inst, t, 0.0)
        cur = t + 0.1
        got = max(cur, free[k])
        work = lognormal(b.rng, 15.0, 0.3)
        free[k] = got + work + 0.6
        call = b.span(root, "POST", "Client", inst, cur, free[k] - cur)
        if with_lock_span:
            b.span(call, "lock", "Internal", inst, cur, got - cur + 0.01)
        b.span(call, "POST /rerank", "Server", f"rerank/{k}", got + 0.3, work)
        b.set_end(root, free[k] + 0.5)
    return b


def test_a_mutex_in_the_caller_around_the_call_keeps_its_lock() -> None:
    # with a span for the wait, and without one: the callee then runs one call at a time, and a
    # queue at it cannot be told from the caller's lock on its connection (the lock is kept)
    for with_lock_span in (True, False):
        found = _found(_caller_mutex(4, with_lock_span).frame())
        assert [f for f in found if f[0] == "lock_contention" and f[2] >= 0.5], found
