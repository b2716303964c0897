"""A connection pool held by a client no trace shows (a job runner's transactions on the app's own
pool): no traced call is ever seen ahead of a wait, so 'no lock wait' keeps every wait. The waits come
in the stretch where the other client holds the pool; where the span states its own checkout wait
(Ecto's `queue_time_microseconds`), that stated wait is what goes."""

from __future__ import annotations

import numpy as np

from tailscope.analysis.whatif.engine import evaluate
from tests.hand_frames import hand_frame


def _frame(held: bool, stated: bool = True):
    """400 requests 200 ms apart (never two at once): 1 ms, then the query span (its wait for a
    connection, then 5 ms of query), then 2 ms. From request 100 to 299 a job runner holds the pool:
    each query waits 30-80 ms."""
    rng = np.random.default_rng(5)
    rows, queries, waits = [], [], []
    for k in range(400):
        t = 200.0 * k
        wait = float(rng.uniform(30, 80)) if held and 100 <= k < 300 else float(rng.uniform(0.01, 0.1))
        base = len(rows)
        rows.append((k, -1, "GET /recs", "Server", 0, t, wait + 8.0))
        queries.append(len(rows))
        rows.append((k, base, "repo.query", "Client", 0, t + 1.0, wait + 5.0))
        rows.append((k, base, "render", "Internal", 0, t + 6.0 + wait, 2.0))
        waits.append(wait)
    f = hand_frame(rows)
    if stated:
        idx = np.array(queries)
        values = {"queue_time_microseconds": (idx, [str(round(w * 1000)) for w in waits]),
                  "total_time_microseconds": (idx, [str(round(w * 1000) + 5000) for w in waits])}
        f.attribute_source = lambda name: values if name == "repo.query" else {}
    return f


def _levers(frame) -> tuple[dict[str, float], float]:
    finding = {"pattern": "lock_contention", "confidence": 0.9, "span_name": "repo.query",
               "evidence": {"stats": {}}}
    result = evaluate(frame, [finding])
    return {o.key.split(":")[0]: o.p99_ms for o in result.outcomes}, result.measured.p99_ms


def test_a_stated_checkout_wait_is_removed() -> None:
    healthy = evaluate(_frame(False), []).measured.p99_ms
    fixed, before = _levers(_frame(True))
    assert before > 70 and healthy < 9
    assert fixed["no_lock_wait"] > 70  # nothing ahead of any wait: the plain lever keeps them
    assert abs(fixed["no_lock_wait_stated"] - healthy) < 0.05 * healthy, (fixed, healthy)


def test_waits_in_the_stretch_another_client_held_the_pool_are_as_calm() -> None:
    healthy = evaluate(_frame(False), []).measured.p99_ms
    fixed, _ = _levers(_frame(True, stated=False))
    assert "no_lock_wait_stated" not in fixed
    assert abs(fixed["no_lock_wait_as_calm"] - healthy) < 0.05 * healthy, (fixed, healthy)
