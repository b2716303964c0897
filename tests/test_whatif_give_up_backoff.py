"""A client that retries a rejected call with back-off and, after its last attempt fails, waits out
one more back-off before its fallback (a circuit breaker's 503s in a burst): once the call is answered
at its first attempt, the step after it follows at once, not a back-off later."""

from __future__ import annotations

from tailscope.analysis.whatif.engine import evaluate
from tests.hand_frames import hand_frame


def _run() -> list[tuple]:
    """400 requests: 2 ms of work, a 10 ms call, 1 ms of blending. One in ten (the 4 % over 99 %
    included): three attempts rejected at once (0.2 ms), 20 / 40 / 80 ms back-offs after them (the last
    before the fallback), then the blend."""
    rows: list[tuple] = []
    for k in range(400):
        t = 20.0 * k
        root = len(rows)
        if k % 10 == 3:
            rows.append((k, -1, "GET /recs", "Server", k % 2, t, 2.0 + 0.6 + 140.0 + 1.0))
            at = t + 2.0
            for back_off in (20.0, 40.0, 80.0):
                rows.append((k, root, "ModelInfer", "Client", k % 2, at, 0.2))
                at += 0.2 + back_off
            rows.append((k, root, "blend", "Internal", k % 2, at, 1.0))
        else:
            rows.append((k, -1, "GET /recs", "Server", k % 2, t, 13.05))
            rows.append((k, root, "ModelInfer", "Client", k % 2, t + 2.0, 10.0))
            rows.append((k, root, "blend", "Internal", k % 2, t + 12.05, 1.0))
    return rows


def test_the_back_off_before_the_fallback_goes_with_the_retries() -> None:
    finding = {"pattern": "timeout_retry", "confidence": 0.9, "span_name": "ModelInfer",
               "evidence": {"stats": {}}}
    result = evaluate(hand_frame(_run()), [finding])
    fix = {o.key: o for o in result.outcomes}
    assert result.measured.p99_ms > 140
    # answered at the first attempt (10 ms at the callee's p50), the blend right after it
    assert fix["callee_p50:ModelInfer"].p99_ms < 13.5, fix["callee_p50:ModelInfer"]
