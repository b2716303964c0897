"""A pod added mid-run behind a caller: its first calls wait for it to take them (new connections,
the TLS handshake: the gap before the callee's span in the caller's call) as well as running cold.
Where the cold-start finding gives a warm-up count (the first N requests per instance), those waits
are not inside any of the counted requests' own spans: the calls that started late are read from the
span as without the count, and each takes the wait of a call to a started instance."""

from __future__ import annotations

import numpy as np

from tailscope.analysis.whatif.engine import evaluate
from tests.hand_frames import hand_frame


def _frame(cold: bool):
    """3,000 calls 5 ms apart from instance 0's `POST /pay` to `POST /score` on instance 1, or from
    the middle of the run on instance 2 (every other call): 0.2 ms before the call reaches it, 8 ms
    there. `cold`: instance 2's first 70 calls wait 40-80 ms to reach it, and its first 100 take 2x."""
    rng = np.random.default_rng(3)
    rows, seen = [], 0
    for k in range(3000):
        t = 5.0 * k
        inst = 2 if k >= 1500 and k % 2 == 0 else 1
        gap, work = 0.2 + float(rng.uniform(0, 0.1)), 8.0 * float(rng.uniform(0.9, 1.1))
        if cold and inst == 2:
            gap = float(rng.uniform(40, 80)) if seen < 70 else gap
            work = 2 * work if seen < 100 else work
            seen += 1
        base = len(rows)
        rows.append((k, -1, "POST /pay", "Server", 0, t, gap + work + 1.0))
        rows.append((k, base, "POST /score", "Server", inst, t + gap, work))
    return hand_frame(rows, instances=("gw", "a", "b"))


def test_late_calls_to_a_new_pod_go_with_a_warm_up_count() -> None:
    healthy = evaluate(_frame(False), []).measured.p99_ms
    finding = {"pattern": "cold_start", "confidence": 0.9, "span_name": "POST /score",
               "evidence": {"stats": {"warmup_requests_per_instance": 100, "warmup_span": "POST /score"}}}
    result = evaluate(_frame(True), [finding])
    fixed = {o.key: o.p99_ms for o in result.outcomes}
    assert result.measured.p99_ms > 4 * healthy
    assert abs(fixed["prewarmed"] - healthy) < 0.15 * healthy, (fixed, healthy)
