"""A batcher whose max wait is long for its traffic (batch_timer.py): no batch fills before the timer, so
every batch closes on it and its first request waits exactly max_wait, whatever the load. The healthy
few-ms timer and a batcher saturated by a burst (a queue: its waits grow with the arrivals, its batches
close full) are not it."""

from __future__ import annotations

from batcher_frames import batcher_service

from tailscope.analysis.diagnosis import batch_timer
from tailscope.analysis.diagnosis.model import Context
from tailscope.analysis.diagnosis.runner import diagnose_frame
from tests.mechanism_frames import TraceBuilder


def _timer(frame) -> float:
    return max((fd.confidence for fd in batch_timer.detect(Context(frame))), default=0.0)


def test_a_long_max_wait_at_low_traffic_is_the_batchers_timer() -> None:
    frame = batcher_service(max_wait=60.0, rps=120.0)
    assert _timer(frame) >= 0.8
    findings = diagnose_frame(frame).findings
    assert findings[0].pattern == "queueing"  # nothing before batch_timer (compute_bound 0.77 on gpu-torch)
    assert findings[0].evidence["stats"]["timer_ms"] == 60.0


def test_a_few_ms_timer_is_the_batcher_working_as_meant() -> None:
    assert _timer(batcher_service(max_wait=4.0)) < 0.5


def test_a_burst_that_saturates_the_batcher_is_a_queue_not_the_timer() -> None:
    frame = batcher_service(max_wait=4.0, rps=240.0, burst=6.0, max_batch=4)
    assert _timer(frame) < 0.5
    assert diagnose_frame(frame).findings[0].pattern == "queueing"


def test_each_models_batcher_has_its_own_timer() -> None:
    """Two models on one server, each queue span named alike under its model's span: the text model's
    100 ms timer at low traffic is found although the image model's 2 ms batches are the more common
    (before: the timer read as 2 ms, the 100 ms waits missed, 0.00)."""
    b = batcher_service(n=1500, rps=30.0, max_wait=100.0, model="text_model", into=TraceBuilder(3))
    frame = batcher_service(n=3000, rps=240.0, max_wait=2.0, model="image_model", into=b).frame()
    found = batch_timer.detect(Context(frame))
    assert found and found[0].confidence >= 0.5, [(f.confidence, f.evidence["summary"]) for f in found]
    assert found[0].evidence["stats"]["timer_ms"] == 100.0
