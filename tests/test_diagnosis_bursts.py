"""A burst on single-threaded event-loop workers (tests/mechanism_loops.py): the requests the loops
cannot run at once wait before their handler and, inside it, for the request-scoped connection pool the
crowd runs dry. The cause is the burst (queueing); the pool's waits are its consequence, not a lock
that serialises the work. The same pool cut to one connection at a steady rate is a lock."""

from __future__ import annotations

from tailscope.analysis.diagnosis import diagnose_frame
from tests.mechanism_loops import event_loop_service


def _found(result) -> list:
    return [(f.pattern, round(f.confidence, 2), f.span_name, f.evidence.get("stats", {}).get("part_of"))
            for f in result.findings]


def test_a_burst_on_event_loops_is_queueing_and_the_pool_waits_part_of_it() -> None:
    result = diagnose_frame(event_loop_service(1, bursts=3.0, pool=5, rps=400.0))
    top = result.findings[0]
    assert top.pattern == "queueing" and top.confidence >= 0.8, _found(result)
    assert top.evidence["stats"]["waits_inside_handler"], _found(result)
    for fd in result.findings:
        if fd.pattern == "lock_contention" and fd.confidence >= 0.3:
            assert fd.evidence["stats"].get("part_of") == "queueing", _found(result)
            assert fd.confidence < top.confidence, _found(result)


def test_a_pool_too_small_for_a_steady_load_stays_a_lock() -> None:
    """Waits for one connection at a Poisson rate do not follow any burst: lock_contention, not queueing."""
    result = diagnose_frame(event_loop_service(2, bursts=0.0, pool=1, rps=330.0))
    top = result.findings[0]
    assert top.pattern == "lock_contention" and top.confidence >= 0.8, _found(result)
    assert not top.evidence["stats"].get("part_of"), _found(result)
    assert all(fd.confidence < 0.5 for fd in result.findings if fd.pattern == "queueing"), _found(result)
