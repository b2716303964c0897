"""Re-timing a step whose last call's end comes out past the step's by the clocks' rounding (a µs-stamped
format): the step waited for the call (kept apart from tests/test_whatif.py, which is at its size)."""

from __future__ import annotations

import pytest

from tailscope.analysis.whatif.retime import Edit, retime
from tests.hand_frames import MS, as_ms, hand_frame


def test_a_last_call_rounded_past_its_step_was_awaited() -> None:
    # a µs-stamped format (Jaeger, Zipkin): the step ends as its last call ends, and the call's end
    # comes out 1 µs after it; the step waited for it (llm-agent s1's chat call, whose 20 s of
    # Retry-After sleeps never left the step: read as fire and forget)
    rows = [
        (0, -1, "root", "Server", 0, 0, 100),
        (0, 0, "step", "Internal", 0, 0, 100),
        (0, 1, "tokenize", "Internal", 0, 0, 2),
        (0, 1, "chat", "Client", 0, 2, 98.001),
    ]
    f = hand_frame(rows)
    edit = Edit.none(len(f))
    edit.dur[3] = 8 * MS
    assert as_ms(retime(f, edit).dur)[:2] == pytest.approx([10.0, 10.0], abs=0.002)  # was 100, 100
