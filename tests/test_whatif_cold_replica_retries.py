"""A replica added mid-run (an autoscaler's) loads its model and runs slow first batches; the calls a
router gives it meanwhile wait in the router (the proxy's span, before the replica's), pass the
client's per-try deadline and are made again. Pre-warmed, the replica takes them at once, and each attempt
answers in time: its retry (and back-off) is not made."""

from __future__ import annotations

import math

from tailscope.analysis.whatif.engine import evaluate
from tests.hand_frames import hand_frame

DEADLINE, BACKOFF, READY, ADDED = 250.0, 25.0, 2600.0, 2000.0


def _run(cold: bool) -> list[tuple]:
    """1,500 requests every 4 ms at a gateway (instance 0): a call `rank` (CLIENT) to a proxy
    (instance 1) whose span holds the replica's `replica.call` (instance 2; from 2 s every other call
    goes to instance 3, new: its first call runs the model's first, slow pass until 2.6 s while the
    next wait for it, then slow first calls, those that waited taken in order). A call past 250 ms
    is given up and made again after 25 ms, to the warm replica."""
    rows: list[tuple] = []
    n_new = 0
    for k in range(1500):
        t = 4.0 * k
        root = len(rows)
        rows.append((k, -1, "POST /search", "Server", 0, t, 0.0))
        at, to_new = t + 0.5, t >= ADDED and k % 2 == 1
        if to_new:
            begin = max(at + 0.1, READY + 0.01 * n_new) if cold else at + 0.1  # taken in order
            work = 5.0 * (1 + 60 * math.exp(-n_new / 5)) if cold else 5.0
            if cold and n_new == 0:  # its first call: the model's first (slow) run, the rest wait
                begin, work = at + 0.1, READY - at - 0.1
            n_new += 1
        else:
            begin, work = at + 0.1, 5.0
        server_end = begin + work + 0.1
        if server_end - at + 0.2 <= DEADLINE:
            call = len(rows)
            rows.append((k, root, "rank", "Client", 0, at, server_end - at + 0.2))
            proxy = len(rows)
            rows.append((k, call, "rank", "Server", 1, at + 0.05, server_end - at))
            rows.append((k, proxy, "replica.call", "Server", 3 if to_new else 2, begin, work))
            end = server_end + 0.2
        else:  # given up at the deadline; the proxy and the replica run on
            call = len(rows)
            rows.append((k, root, "rank", "Client", 0, at, DEADLINE))
            proxy = len(rows)
            rows.append((k, call, "rank", "Server", 1, at + 0.05, server_end - at))
            rows.append((k, proxy, "replica.call", "Server", 3, begin, work))
            again = at + DEADLINE + BACKOFF
            call = len(rows)
            rows.append((k, root, "rank", "Client", 0, again, 5.4))
            proxy = len(rows)
            rows.append((k, call, "rank", "Server", 1, again + 0.05, 5.2))
            rows.append((k, proxy, "replica.call", "Server", 2, again + 0.1, 5.0))
            end = again + 5.4
        rows[root] = (k, -1, "POST /search", "Server", 0, t, end - t + 0.3)
    return rows


def test_a_prewarmed_replica_takes_its_calls_at_once_and_none_is_retried() -> None:
    finding = {"pattern": "cold_start", "confidence": 1.0, "span_name": "replica.call",
               "evidence": {"stats": {"instances": ["d"]}}}
    frame = hand_frame(_run(True), instances=("a", "b", "c", "d"))
    result = evaluate(frame, [finding])
    healthy = evaluate(hand_frame(_run(False), instances=("a", "b", "c", "d")), [])
    assert result.measured.p99_ms > 10 * healthy.measured.p99_ms, (result.measured.p99_ms,
                                                                   healthy.measured.p99_ms)
    hits = [o for o in result.outcomes if o.key == "prewarmed"]
    assert hits, [o.key for o in result.outcomes]
    # the replica's first calls after its warm-up are a little slower still (in the run, not cold)
    assert abs(hits[0].p99_ms - healthy.measured.p99_ms) < 0.15 * healthy.measured.p99_ms, (
        hits[0].p99_ms, healthy.measured.p99_ms)



def test_calls_made_one_after_another_whose_callee_ends_late_by_a_clocks_skew_are_no_retries() -> None:
    """Three queries in a row (N+1) whose server spans end 0.3 ms after the client's (another host's
    clock): no attempt was given up, and none of them is taken for a retry of another."""
    from tailscope.analysis.whatif.attempts import abandoned_attempts
    from tailscope.analysis.whatif.retime import layout

    rows: list[tuple] = []
    for k in range(200):
        t = 10.0 * k
        root = len(rows)
        rows.append((k, -1, "GET /orders", "Server", 0, t, 8.0))
        for j in range(3):
            call = len(rows)
            rows.append((k, root, "SELECT", "Client", 0, t + 0.5 + 2.0 * j, 1.5))
            rows.append((k, call, "SELECT", "Server", 1, t + 0.6 + 2.0 * j, 1.7))
    frame = hand_frame(rows)
    assert abandoned_attempts(frame, layout(frame)) is None
    cold = hand_frame(_run(True), instances=("a", "b", "c", "d"))
    found = abandoned_attempts(cold, layout(cold))
    assert found is not None and len(found.call) >= 10  # the calls given up at 250 ms


def test_calls_given_up_at_different_times_are_no_deadline_and_no_crash() -> None:
    """Two calls whose callees ran on after them, one given up at 100 ms and one at 130 ms: no deadline
    (the given-up calls of a name are not alike long), so no attempts; the what-if does not fail on it
    (an IndexError on an empty selection before)."""
    from tailscope.analysis.whatif.attempts import abandoned_attempts
    from tailscope.analysis.whatif.retime import layout

    rows: list[tuple] = []
    for k in range(100):
        t = 1000.0 * k
        root = len(rows)
        rows.append((k, -1, "GET /", "Server", 0, t, 500.0))
        call = len(rows)
        given_up = {10: 100.0, 20: 130.0}.get(k, 6.0)
        rows.append((k, root, "rank", "Client", 0, t + 0.1, given_up))
        rows.append((k, call, "rank", "Server", 1, t + 0.2, 400.0 if k in (10, 20) else 5.0))
    frame = hand_frame(rows)
    assert abandoned_attempts(frame, layout(frame)) is None
