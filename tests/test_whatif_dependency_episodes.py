"""A dependency slow in episodes that cover most of the run (segment merges on a search node): its
p50 is a slow call (where its times split in no clean second mode, 'at its p50' keeps the slowness:
python-istio segment-merge 35.8 %); the calls of the slow stretches take the time of calls between
them."""

from __future__ import annotations

import numpy as np

from tailscope.analysis.whatif.engine import evaluate
from tests.hand_frames import hand_frame


def _frame(episodes: bool):
    """3,000 requests 10 ms apart: 1 ms, a `knn` call of 6-10 ms (x 1.5-12 in the slow episodes,
    spread over that range: 3 s of every 4 s, from the first quarter on), 1 ms."""
    rng = np.random.default_rng(4)
    rows = []
    for k in range(3000):
        t = 10.0 * k
        call = float(rng.uniform(6, 10))
        if episodes and t > 7500 and (t % 4000) < 3000:
            call *= float(np.exp(rng.uniform(0.4, 2.5)))
        rows.append((k, -1, "POST /search", "Server", 0, t, call + 2.0))
        rows.append((k, 2 * k, "knn", "Client", 0, t + 1.0, call))
    return hand_frame(rows)


def test_a_dependency_slow_in_episodes_is_fixed_as_between_them() -> None:
    healthy = evaluate(_frame(False), []).measured.p99_ms
    finding = {"pattern": "slow_dependency", "confidence": 0.9, "span_name": "knn", "evidence": {"stats": {}}}
    result = evaluate(_frame(True), [finding])
    fixed = {o.key.split(":")[0]: o.p99_ms for o in result.outcomes}
    assert result.measured.p99_ms > 5 * healthy
    assert abs(fixed["dependency_as_calm"] - healthy) < 0.1 * healthy, (fixed, healthy)
