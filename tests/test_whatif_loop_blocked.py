"""A synchronous call inside an async handler: the process' event loop runs nothing else while it
lasts, so every other request of that process waits (its handler span starts late in the sidecar's
inbound span). A queueing finding on the handler span: the calls whose time the waits fall inside
are made non-blocking (each keeps its own time), and the waits they caused go."""

from __future__ import annotations

import numpy as np

from tailscope.analysis.whatif.engine import evaluate
from tests.hand_frames import hand_frame

FINDING = {"pattern": "queueing", "confidence": 0.9, "span_name": "POST /search", "evidence": {"stats": {}}}


def _frame(blocking: bool):
    """2,500 requests ~8 ms apart (Poisson) to one process (instance 0) behind its sidecar
    (instance 1): the handler, then a 2 ms async `SELECT` (every request); 8 % first make a 20 ms
    synchronous `SELECT`. `blocking`: the loop takes no other request during it (they wait in the
    sidecar's span before the handler starts); else the call is awaited and nobody waits."""
    rng = np.random.default_rng(7)
    rows, t, free = [], 0.0, 0.0
    for k in range(2500):
        t += float(rng.exponential(8.0))
        s = max(t + 0.2, free) if blocking else t + 0.2
        sync = rng.random() < 0.08
        work = 0.3
        base = len(rows)
        rows.append((k, -1, "inbound", "Server", 1, t, 0.0))
        rows.append((k, base, "POST /search", "Server", 0, s, 0.0))
        if sync:
            rows.append((k, base + 1, "SELECT", "Client", 0, s + work, 20.0))
            if blocking:
                free = s + work + 20.0
            work += 20.0
        rows.append((k, base + 1, "SELECT", "Client", 0, s + work, 2.0))
        end = s + work + 2.5
        rows[base] = (k, -1, "inbound", "Server", 1, t, end + 0.2 - t)
        rows[base + 1] = (k, base, "POST /search", "Server", 0, s, end - s)
    return hand_frame(rows)


def test_the_waits_a_blocking_call_caused_go_and_the_call_keeps_its_time() -> None:
    awaited = evaluate(_frame(False), []).measured.p99_ms
    finding = FINDING
    result = evaluate(_frame(True), [finding])
    fixed = {o.key.split(":")[0]: o.p99_ms for o in result.outcomes}
    assert result.measured.p99_ms > 1.5 * awaited
    assert abs(fixed["queue_unblocked"] - awaited) < 0.1 * awaited, (fixed, awaited)


def test_an_awaited_call_blocks_nobody() -> None:
    finding = FINDING
    fixed = {o.key.split(":")[0] for o in evaluate(_frame(False), [finding]).outcomes}
    assert "queue_unblocked" not in fixed
