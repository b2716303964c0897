"""A replica restarted mid-run: gone for a while (its load on its peer, which queues), then cold. The
pre-warm lever also re-times the peer's spans while it was down and the drain after (down_peers.py)."""

from __future__ import annotations

import numpy as np

from tailscope.analysis.whatif.engine import evaluate
from tests.hand_frames import hand_frame

FINDING = {"pattern": "cold_start", "confidence": 1.0, "span_name": "generate",
           "evidence": {"stats": {"instances": ["b"]}}}


def _rows(restart: bool) -> list[tuple]:
    """3,000 chats 20 ms apart through a gateway (`c`) to two replicas (`a`, `b`) taking turns: a
    generation of 40-400 ms. With `restart`, `b` is down from 20 s to 26 s (its turns go to `a`, whose
    generations wait up to 600 ms, draining over the 6 s after), then its first 30 are 300 ms slower."""
    rng = np.random.default_rng(4)
    rows: list[tuple] = []
    cold = 0
    for k in range(3000):
        t = 20.0 * k
        work = float(np.clip(rng.lognormal(np.log(120), 0.5), 40, 400))
        replica = k % 2
        if restart:
            if 20_000 <= t < 26_000:
                replica = 0
            if replica == 0 and 20_000 <= t < 32_000:
                work += 600.0 * (min(t - 20_000, 6_000) / 6_000 if t < 26_000 else (32_000 - t) / 6_000)
            if replica == 1 and t >= 26_000 and cold < 30:
                work, cold = work + 300.0, cold + 1
        root = len(rows)
        rows.append((k, -1, "POST /chat", "Server", 2, t, work + 2.0))
        rows.append((k, root, "generate", "Server", replica, t + 1.0, work))
    return rows


def test_a_restart_pre_warmed_also_gives_the_peer_its_calm_times_while_it_was_down() -> None:
    healthy = evaluate(hand_frame(_rows(False), ("a", "b", "c")), []).measured.p99_ms
    result = evaluate(hand_frame(_rows(True), ("a", "b", "c")), [FINDING], only={"prewarmed"})
    assert result.measured.p99_ms > 1.8 * healthy
    fixed = result.outcomes[0]
    assert abs(fixed.p99_ms - healthy) < 0.1 * healthy, (fixed.p99_ms, healthy, result.measured.p99_ms)
    assert fixed.params["peer_spans_retimed"] > 100
