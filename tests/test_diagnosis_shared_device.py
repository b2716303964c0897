"""Forward passes that slow each other because they share a device are no lock (s10 class F: mesh
steady s1, lock_contention 0.72 on Triton's compute_infer): the forward is compute_bound's. A mutex
around a section after the forward stays lock_contention."""

from __future__ import annotations

from tailscope.analysis.diagnosis import diagnose_frame
from tests.shared_device_services import locked_section_service, shared_gpu_service


def _found(result) -> list:
    return [(f.pattern, round(f.confidence, 2), f.span_name) for f in result.findings]


def test_forwards_sharing_a_gpu_are_not_lock_contention() -> None:
    result = diagnose_frame(shared_gpu_service(1))
    assert all(f.confidence < 0.5 for f in result.findings if f.pattern == "lock_contention"), _found(result)


def test_a_mutex_after_the_forward_stays_lock_contention() -> None:
    result = diagnose_frame(locked_section_service(1))
    lock = [f for f in result.findings if f.pattern == "lock_contention"]
    assert lock and lock[0].span_name == "rescore" and lock[0].confidence >= 0.5, _found(result)
