"""A hedged call (a copy sent after a fixed delay while the first attempt is in flight, the first cancelled
when the copy answers) under the callee lever, on hand-built traces: the fix answers at the callee's median
before the hedge's delay and sends no copy."""

from __future__ import annotations

import numpy as np
import pytest

from tailscope.analysis.whatif import cause_levers as cl
from tailscope.analysis.whatif import evaluate
from tailscope.analysis.whatif.retime import request_latency, retime
from tests.hand_frames import MS, hand_frame, lever_inputs


def _hedged_rows(hedge: bool = True) -> list[tuple]:
    """A blender called once per request, a copy sent after 40 ms while the first is in flight (the
    first cancelled when the copy answers; a deadline of 80 ms). Half the calls answer in 12-18 ms;
    the other half hang: their copies answer 15-25 ms after being sent."""
    rows: list[tuple] = []
    for k in range(200):
        t, base = 100.0 * k, len(rows)
        if k % 2 and not hedge:  # the hung call waited out
            rows += [(k, -1, "rank", "Server", 0, t, 2 + 60 + 3),
                     (k, base, "blend", "Client", 0, t + 2, 60.0)]
        elif k % 2:
            copy = 15.0 + (k % 11)
            rows += [(k, -1, "rank", "Server", 0, t, 2 + 40 + copy + 3),
                     (k, base, "blend", "Client", 0, t + 2, 40 + copy),
                     (k, base, "blend", "Client", 0, t + 42, copy)]
        else:
            took = 12.0 + 0.03 * k
            rows += [(k, -1, "rank", "Server", 0, t, 2 + took + 3),
                     (k, base, "blend", "Client", 0, t + 2, took)]
    return rows


def test_callee_p50_sends_no_hedge_copy_once_the_callee_answers_before_the_hedge_delay() -> None:
    """The callee fixed, every call at the median of the calls that answered: a hedged call's first
    attempt (cancelled when its copy answered) is no answer, and a call answered before the hedge's
    40 ms delay sends no copy. Before: the copies stayed, 40 ms + the median after each hedged call's
    start (a request of 65 ms, p50 worse than measured)."""
    f = hand_frame(_hedged_rows())
    x = lever_inputs(f)
    finding = {"pattern": "timeout_retry", "confidence": 0.9, "span_name": "blend",
               "evidence": {"stats": {"service": "svc"}}}
    lever = cl.callee_p50(x, finding)
    assert lever is not None
    new = request_latency(f, retime(f, lever.edit, x.lay).dur, client_side=False) / MS
    first = [r for r in _hedged_rows() if r[0] % 2 and r[2] == "blend" and r[5] == 100.0 * r[0] + 2]
    answered = [r[6] for r in _hedged_rows() if r[2] == "blend" and r not in first]
    p50 = float(np.median(answered))
    assert lever.params["p50_ms"] == pytest.approx(p50, abs=0.01)
    assert np.percentile(new, 99) == pytest.approx(p50 + 5, abs=0.01), np.sort(new)[-5:]


def test_a_slow_dependency_with_a_hedge_gets_the_callee_fixed_without_copies() -> None:
    """The diagnosis names the hedged blender a slow dependency: its fix answers at the median before
    the hedge's delay, no copy sent (callee_p50's key); without a hedge no such lever."""
    f = hand_frame(_hedged_rows())
    finding = {"pattern": "slow_dependency", "confidence": 0.5, "span_name": "blend",
               "evidence": {"stats": {}}}
    fixed = [o for o in evaluate(f, [finding]).outcomes if o.key == "callee_p50:blend"]
    assert fixed and fixed[0].p99_ms < 23, [(o.key, o.p99_ms) for o in evaluate(f, [finding]).outcomes]
    plain = hand_frame(_hedged_rows(hedge=False))
    assert not [o for o in evaluate(plain, [finding]).outcomes if o.key == "callee_p50:blend"]
