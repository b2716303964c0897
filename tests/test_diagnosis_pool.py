"""Issue 25: a connection pool held across a remote call (tests/mechanism_calls.py's pool_service).
Waiters take freed connections one at a time, the moment a holder's request ends: the waits end by a
hand-off (slot_handoff.py), whatever the holders' completions look like (N holders complete closer
together than one mutex's)."""

from __future__ import annotations

from tailscope.analysis.diagnosis import diagnose_frame
from tests.mechanism_calls import pool_service


def _found(result) -> list:
    return [(f.pattern, round(f.confidence, 2), f.span_name) for f in result.findings]


def test_waits_for_a_pool_slot_end_by_hand_off_and_name_lock_contention() -> None:
    """Six connections per instance, all taken at the peaks (before: 0.78, the holders' close
    completions read as side-by-side work)."""
    result = diagnose_frame(pool_service(3, slots=6, rps=500.0))
    top = result.findings[0]
    assert top.pattern == "lock_contention" and top.span_name == "load_history", _found(result)
    assert top.evidence["stats"]["waits_ended_by_handoff"] >= 0.9, top.evidence["stats"]
    assert top.confidence >= 0.9, _found(result)


def test_a_pool_beside_a_slow_dependency_is_named_with_it() -> None:
    """A tenth of the remote calls take 50-150 ms more while holding their connection: both causes
    are named (before: lock_contention 0.67)."""
    result = diagnose_frame(pool_service(3, slots=3, slow_calls=0.1, rps=150.0))
    conf = {f.pattern: f.confidence for f in result.findings}
    assert conf.get("lock_contention", 0.0) >= 0.9 and conf.get("slow_dependency", 0.0) >= 0.5, _found(result)


def test_no_pool_wait_without_contention() -> None:
    result = diagnose_frame(pool_service(3, slots=8, rps=100.0))
    assert all(f.confidence < 0.5 for f in result.findings if f.pattern != "compute_bound"), _found(result)
