"""A call that blocks its async worker (an inline write that stalls): the tasks queued on the worker
start late; with the call at its median the co-scheduled tasks' waits inside the stall go too. A slow
call awaited asynchronously (nothing else waits meanwhile) cuts nothing of the others."""

from __future__ import annotations

import numpy as np

from tailscope.analysis.whatif.engine import evaluate
from tests.hand_frames import hand_frame


def _run(stall_ms: float, blocks: bool) -> list[tuple]:
    """600 requests 10 ms apart on one worker: `work` (2 ms), then `put` (0.3 ms; every 50th
    `stall_ms`). Where the put blocks the worker, a request arriving meanwhile starts its work when
    the put ends."""
    rng = np.random.default_rng(2)
    rows: list[tuple] = []
    free_at = 0.0
    for k in range(600):
        t = 10.0 * k + float(rng.uniform(0, 2))
        begin = max(t + 0.1, free_at) if blocks else t + 0.1
        put = stall_ms if k % 50 == 7 else 0.3
        root = len(rows)
        rows.append((k, -1, "POST /v1/rerank", "Server", 0, t, begin + 2.0 + put + 0.1 - t))
        rows.append((k, root, "work", "Internal", 0, begin, 2.0))
        rows.append((k, root, "put", "Internal", 0, begin + 2.0, put))
        free_at = begin + 2.0 + put
    return rows


def _predicted(rows: list[tuple]) -> tuple[float, float]:
    finding = {"pattern": "slow_dependency", "confidence": 0.9, "span_name": "put", "evidence": {"stats": {}}}
    result = evaluate(hand_frame(rows), [finding])
    hits = [o for o in result.outcomes if o.key == "dependency_p50:put"]
    assert hits, [o.key for o in result.outcomes]
    return result.measured.p99_ms, hits[0].p99_ms


def test_the_tasks_queued_behind_a_blocking_call_wait_no_more() -> None:
    before, after = _predicted(_run(60.0, blocks=True))
    healthy, _ = _predicted(_run(0.3, blocks=True))
    assert before > 40
    assert after < 1.25 * healthy, (after, healthy)


def test_a_call_awaited_asynchronously_changes_only_its_own_requests() -> None:
    before, after = _predicted(_run(60.0, blocks=False))
    assert before > 50
    assert after < 3.0
