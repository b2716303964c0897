"""A compile for a new kind of input in a running process (new_kinds.py): from 40 % of the run a new
sequence bucket arrives; the first batch of it on each instance compiles for 1.5 s while every request
behind it waits, then that bucket runs as fast as the others. The same stops at random moments (a
pause, whatever the input) and a kind that is slow every time (longer inputs) are not it."""

from __future__ import annotations

from batcher_frames import batcher_service

from tailscope.analysis.diagnosis import new_kinds
from tailscope.analysis.diagnosis.model import Context
from tailscope.analysis.diagnosis.runner import diagnose_frame


def _new_kind(frame) -> float:
    return max((fd.confidence for fd in new_kinds.detect(Context(frame), "{where}")), default=0.0)


def test_a_compile_for_a_new_kind_mid_run_is_a_cold_start() -> None:
    frame = batcher_service(new_kind_from=0.4, compile_ms=1500.0)
    assert _new_kind(frame) >= 0.8
    findings = diagnose_frame(frame).findings
    assert findings[0].pattern == "cold_start"  # none before new_kinds (gc_pause 0.45-0.48 on gpu-torch)
    assert findings[0].evidence["stats"]["kind_attribute"] == "seq.bucket"
    # the stalls the compile makes are not a pause nor an interpreter lock (lock_contention 0.74 before)
    stalls = ("gc_pause", "lock_contention")
    assert not [fd for fd in findings if fd.pattern in stalls and fd.confidence >= 0.5]


def test_stops_as_long_at_random_moments_are_not_a_new_kind() -> None:
    stops = {f"scorer/{i}": [(t, t + 1500.0) for t in (8000.0 + 3000 * i, 17000.0 + 2000 * i)]
             for i in range(3)}
    assert _new_kind(batcher_service(new_kind_from=0.4, stops=stops)) < 0.5


def test_a_kind_slow_every_time_is_not_a_compile() -> None:
    assert _new_kind(batcher_service(new_kind_from=0.4, kind_cost=8.0)) < 0.5
