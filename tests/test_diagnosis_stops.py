"""A worker process that stops now and then (a leaking heap's long collections, no GC events) among
the event-loop workers of a pod that share one instance id (tests/mechanism_loops.py): the pod's
other workers keep working, so nothing lines up across names and nothing falls silent; the calls
sent to the stopped worker wait at its door and are let in together when it runs again."""

from __future__ import annotations

from tailscope.analysis.diagnosis import diagnose_frame
from tailscope.analysis.diagnosis.model import Context
from tailscope.analysis.diagnosis.stopped_accepts import releases
from tests.mechanism_loops import event_loop_service


def _found(result) -> list:
    return [(f.pattern, round(f.confidence, 2), f.evidence.get("stats", {}).get("services")
             or f.evidence.get("stats", {}).get("service")) for f in result.findings]


def test_a_stopped_worker_in_a_pod_is_a_gc_pause_of_the_pod_not_of_its_caller() -> None:
    result = diagnose_frame(event_loop_service(1, paused=True, processes=6, per_instance=3, rps=300.0))
    top = result.findings[0]
    assert top.pattern == "gc_pause" and top.confidence >= 0.8, _found(result)
    assert top.evidence["stats"]["instances"][0] == "scorer/0", _found(result)
    assert top.evidence["stats"]["releases"] >= 5, _found(result)
    for fd in result.findings:  # the caller only forwards and waits: no pause of its own
        stats = fd.evidence["stats"]
        assert not (fd.pattern == "gc_pause" and stats.get("service") == "checkout"), _found(result)


def test_a_burst_lets_calls_in_at_the_pace_work_completes_not_together() -> None:
    frame = event_loop_service(1, bursts=3.0, pool=5, rps=400.0)
    found = releases(Context(frame))
    assert found is None or found["strength"] < 0.2, found and found["stats"]
    result = diagnose_frame(frame)
    assert all(fd.confidence < 0.5 for fd in result.findings if fd.pattern == "gc_pause"), _found(result)


def test_healthy_pods_raise_no_pause() -> None:
    result = diagnose_frame(event_loop_service(3, processes=6, per_instance=3, rps=300.0))
    assert all(fd.confidence < 0.5 for fd in result.findings if fd.pattern == "gc_pause"), _found(result)


def test_processes_restarted_cold_in_a_pod_are_no_pause() -> None:
    """A restarted process's first predictions hold its event loop for 150, 75, 37 ms: it lets the
    calls in together after each, but only in the short stretch of the run after its restart, where a
    collector stops a process again and again through the whole run."""
    frame = event_loop_service(2, restarted=True, processes=6, per_instance=3, rps=300.0)
    found = releases(Context(frame))
    assert found is None or found["stats"]["stops_recur_over_the_run"] <= 0.3, found and found["stats"]
    result = diagnose_frame(frame)
    assert all(fd.confidence < 0.5 for fd in result.findings if fd.pattern == "gc_pause"), _found(result)


def test_large_inputs_parsed_on_the_loop_are_no_pause() -> None:
    """A request with thousands of items holds its event loop while it is parsed: the door opens late
    and lets the waiting calls in together, but the parse that filled the stop took as long as its
    input predicts: the input's, not a stop of the process."""
    frame = event_loop_service(4, large_inputs=True, processes=6, per_instance=3, rps=200.0)
    found = releases(Context(frame))
    assert found is None or found["strength"] < 0.2, found and found["stats"]
    result = diagnose_frame(frame)
    assert all(fd.confidence < 0.5 for fd in result.findings if fd.pattern == "gc_pause"), _found(result)
