"""A worker process that stops now and then (a leaking heap's long collections, no GC events) among
the event-loop workers of a pod that share one instance id (tests/mechanism_loops.py): the pod's
other workers keep working, so nothing lines up across names and nothing falls silent; the calls
sent to the stopped worker wait at its door and are let in together when it runs again."""

from __future__ import annotations

import numpy as np
from hand_frames import hand_frame

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


def _pool_behind_a_stopping_store(seed: int = 3, n: int = 3000) -> list[tuple]:
    """Callers on three web instances call a feature server (two instances, 4 workers each) whose
    handler reads a store (a CLIENT span, the store untraced) that stops for 100-200 ms every 0.8-1.6 s
    (a Redis blocked on its disk): the workers all wait on it, new calls wait for a worker, and when
    the store answers the workers free up together and the queued calls rush in."""
    rng = np.random.default_rng(seed)
    arrive = np.cumsum(rng.exponential(1000.0 / 300.0, n))
    stops, t = [], rng.uniform(0, 500)
    while t < arrive[-1] + 1000:
        length = rng.uniform(100.0, 200.0)
        stops.append((t, t + length))
        t += length + rng.uniform(800.0, 1600.0)
    free = {3: [0.0] * 4, 4: [0.0] * 4}
    rows: list[tuple] = []
    for j, a in enumerate(arrive.tolist()):
        web, srv = int(rng.integers(0, 3)), 3 + j % 2
        sent = a + 0.2
        k = int(np.argmin(free[srv]))
        start = max(sent + 0.3 * rng.lognormal(0, 0.2), free[srv][k])
        read = start + 0.3
        done = read + 1.0 * rng.lognormal(0, 0.3)
        for p0, p1 in stops:
            if p0 <= done and read < p1:  # the store answers nothing while stopped
                done = p1 + 0.05 * rng.random()
                break
        end = done + 1.5 * rng.lognormal(0, 0.2)
        free[srv][k] = end
        base = len(rows)
        rows += [
            (j, -1, "GET /search", "Server", web, a, end + 0.3 - a + 0.5),
            (j, base, "POST /features", "Client", web, sent, end + 0.3 - sent),
            (j, base + 1, "POST /features", "Server", srv, start, end - start),
            (j, base + 2, "HMGET", "Client", srv, read, done - read),
        ]
    return rows


def test_workers_freed_together_by_a_stopped_store_are_no_pause_of_the_server() -> None:
    """Calls wait at the feature server's door and are let in together, as at a stopped process's;
    but the server ran every worker just before each rush (a stopped process starts nothing, so it
    holds only what it had begun): the store stopped, not the server. Before: gc_pause 0.9."""
    frame = hand_frame(_pool_behind_a_stopping_store(),
                       instances=("web/0", "web/1", "web/2", "features/0", "features/1"))
    result = diagnose_frame(frame)
    assert not [f for f in result.findings if f.pattern == "gc_pause" and f.confidence >= 0.5], _found(result)
