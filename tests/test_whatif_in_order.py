"""Large replies on one pipelined connection (a Redis multiplexer): replies come back in the order the
commands were sent, so a large reply delays every reply behind it (head-of-line). No size attribute:
the large replies are the calls whose own time (after the reply ahead arrived) is well over the usual
one; the fix makes them usual and replays the order, and the waits behind them go."""

from __future__ import annotations

import numpy as np

from tailscope.analysis.whatif.engine import evaluate
from tests.hand_frames import hand_frame


def _frame(large: bool, ordered: bool = True):
    """2 instances, 1,500 requests each ~1.5 ms apart (Poisson): 0.5 ms, a GET (0.8 ms round trip;
    8 % of replies take 30-60 ms to transfer where `large`), then 3 ms. `ordered`: one connection per
    instance, replies in order; else each GET on a connection of its own."""
    rng = np.random.default_rng(11)
    rows = []
    trace = 0
    for inst in (0, 1):
        t, last = 0.0, 0.0
        for _ in range(1500):
            t += float(rng.exponential(1.5))
            sent = t + 0.5
            rtt = float(rng.uniform(0.6, 1.0))
            transfer = float(rng.uniform(30, 60)) if large and rng.random() < 0.08 else 0.02
            reply = (max(sent + rtt, last) if ordered else sent + rtt) + transfer
            last = reply
            base = len(rows)
            rows.append((trace, -1, "POST /score", "Server", inst, t, reply - t + 3.0))
            rows.append((trace, base, "GET", "Client", inst, sent, reply - sent))
            trace += 1
    return hand_frame(rows)


def _fixed(frame) -> tuple[dict[str, float], float]:
    finding = {"pattern": "large_payload", "confidence": 0.9, "span_name": "GET", "evidence": {"stats": {}}}
    result = evaluate(frame, [finding])
    return {o.key.split(":")[0]: o.p99_ms for o in result.outcomes}, result.measured.p99_ms


def test_large_replies_on_an_ordered_pipe_and_the_waits_behind_them_go() -> None:
    healthy = evaluate(_frame(False), []).measured.p99_ms
    fixed, before = _fixed(_frame(True))
    assert before > 5 * healthy
    assert "payload_p50" not in fixed  # no size attribute: the size lever has nothing to fit
    assert abs(fixed["payload_in_order"] - healthy) < 0.1 * healthy, (fixed, healthy)


def test_no_ordered_pipe_no_lever() -> None:
    """Each call on a connection of its own: a later call ends before a large one ahead of it, so
    the calls are no ordered pipe (the large replies delay nobody)."""
    fixed, _ = _fixed(_frame(True, ordered=False))
    assert "payload_in_order" not in fixed


def test_a_lock_named_at_an_ordered_pipe_gets_the_large_replies_lever() -> None:
    """The diagnosis can read head-of-line on one connection as a lock at its calls (dotnet-onnx
    redis-large-values: lock_contention 0.77 at `GET`): the pipe's holders are its large replies."""
    finding = {"pattern": "lock_contention", "confidence": 0.8, "span_name": "GET", "evidence": {"stats": {}}}
    healthy = evaluate(_frame(False), []).measured.p99_ms
    fixed = {o.key.split(":")[0]: o.p99_ms for o in evaluate(_frame(True), [finding]).outcomes}
    assert abs(fixed["payload_in_order"] - healthy) < 0.1 * healthy, (fixed, healthy)
