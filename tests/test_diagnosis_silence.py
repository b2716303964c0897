"""Issue 25: a stop-the-world pause silences its process, by mechanism (tests/mechanism_silence.py).
A paused process ends nothing while requests sent to it wait; requests slowed together in
a queue while the process keeps running, or a process idle between short requests, are not paused; a
paused orchestrator that calls traced services reads their replies late."""

from __future__ import annotations

import numpy as np

from tailscope.analysis.diagnosis import diagnose_frame
from tailscope.analysis.diagnosis.long_stalls import credible_silences, silent_stretches, waiting_stops
from tailscope.analysis.diagnosis.model import Context
from tests.mechanism_frames import TraceBuilder
from tests.mechanism_silence import (
    batcher_queue,
    cold_workers_joining,
    idle_ingest,
    paused_orchestrator,
    paused_single_worker,
    throttled_caller,
)


def _conf(result, pattern: str) -> float:
    return max((f.confidence for f in result.findings if f.pattern == pattern), default=0.0)


def _found(result) -> list:
    return [(f.pattern, round(f.confidence, 2), f.span_name) for f in result.findings]


def test_requests_queued_behind_a_saturated_batcher_are_not_a_pause() -> None:
    """A co-tenant's bursts fill the batches: queue waits and full batches make the model server's
    spans slow together for hundreds of ms, while it keeps starting and ending spans and its callers
    send nothing new: no gc_pause (before: 0.64-0.67)."""
    for seed in (0, 1):
        result = diagnose_frame(batcher_queue(seed))
        assert _conf(result, "gc_pause") < 0.5, _found(result)


def test_an_idle_process_between_short_requests_is_not_a_pause() -> None:
    """Sub-millisecond requests whose publish lingers after the response: the process is idle most of
    the time and nothing is stretched: no gc_pause (before: 0.99)."""
    result = diagnose_frame(idle_ingest(0))
    assert _conf(result, "gc_pause") < 0.5, _found(result)


def test_pauses_of_an_orchestrator_that_calls_traced_services_are_found() -> None:
    """The orchestrator's pauses stretch its calls' reply reads and its own steps; its callees are
    fine. It stays the request (a stretched reply read is the caller's tail, not the callee's: not a
    proxy tier) and the pauses are named on it (before: nothing at seed 0, the requests rooted at the
    callees)."""
    for seed in (0, 2):
        frame = paused_orchestrator(seed)
        roots = {frame.names[c] for c in np.unique(frame.name[frame.requests.root])}
        assert roots == {"GET /recommendations"}, roots
        result = diagnose_frame(frame)
        gc = [f for f in result.findings if f.pattern == "gc_pause"]
        assert gc and gc[0].confidence >= 0.5, _found(result)
        assert gc[0].evidence["stats"]["services"] == ["orchestrator"], gc[0].evidence["stats"]


def _silent_process(arrivals_during: bool, consumer: bool = False):
    """One instance running a 2 ms step per request, 200 requests/s sent by a traced client, and one
    60 ms stretch at 500 ms in which it starts and ends nothing; the requests sent meanwhile start
    after it (`arrivals_during`) or none are sent (the client stopped)."""
    b = TraceBuilder(0)
    t = 0.0
    while t < 1500.0:
        t += 5.0
        if 500.0 <= t < 560.0 and not arrivals_during:
            continue
        b.new_trace()
        start = (560.0 if 500.0 <= t < 560.0 else t) + 0.2  # sent during the silence: starts after it
        call = b.span(None, "call", "Producer" if consumer else "Client", "client/0", t, 0.0)
        root = b.span(call, "handle", "Consumer" if consumer else "Server", "svc/0", start, 2.2)
        b.span(root, "step", "Internal", "svc/0", start + 0.1, 2.0)
        b.set_end(call, start + 2.4)
    return b.frame()


def test_a_silence_is_a_stop_only_where_requests_kept_coming() -> None:
    """The same 60 ms silence is a stop (confirmed: 2) where requests sent during it started after it,
    and not (0) where nothing was sent (a starved or idle process)."""
    for arrivals_during, expected in ((True, 2), (False, 0)):
        frame = _silent_process(arrivals_during)
        ctx = Context(frame)
        inst = np.array([frame.instances.index("svc/0")])
        t0, t1 = silent_stretches(ctx, inst, np.array([480_000_000]), np.array([600_000_000]))
        assert 62e6 <= t1[0] - t0[0] <= 66e6, (t0, t1)  # ends: 492.4 -> 557.3 ms from the first span
        assert int(credible_silences(ctx, inst, t0, t1)[0]) == expected


def test_stops_are_found_from_the_requests_they_kept_waiting() -> None:
    """With one request in flight at a time no names line up, yet the silence that kept the requests
    sent during it waiting is found on its own, and only there; also where the process consumes
    messages (no SERVER span of its own: before, an IndexError lost the whole gc_pause finding)."""
    for arrivals_during, stops, consumer in ((True, 1, False), (False, 0, False), (True, 1, True)):
        frame = _silent_process(arrivals_during, consumer)
        inst, t0, t1 = waiting_stops(Context(frame), 2_200_000.0)
        assert len(inst) == stops, (inst, t0, t1)
        if stops:
            assert frame.instances[int(inst[0])] == "svc/0" and 62e6 <= t1[0] - t0[0] <= 66e6


def test_a_paused_single_worker_is_found_from_a_step_and_a_reply_read_alike() -> None:
    """One request at a time: a pause stretches predict (where it mostly lands) or the reading of a
    call's reply, by the same 80-250 ms; no other step is hit often enough to line up. gc_pause, not
    compute_bound (before: compute_bound 0.88, the lone test wanting two stretched steps)."""
    result = diagnose_frame(paused_single_worker(0))
    assert result.findings[0].pattern == "gc_pause" and result.findings[0].confidence >= 0.5, _found(result)


def test_a_throttled_caller_is_cpu_throttling_not_the_network() -> None:
    """A CPU quota stalls the caller's pods until the next 100 ms period: its calls' replies are read
    late (the client - server gap grows) and its own steps stretch, the callee is fine. The late reply
    reads end on the period boundaries like the stretched steps: cpu_throttling on the caller, and the
    gaps inside its stalls are not the wire (before: network 1.00 / nothing)."""
    for seed in (0, 2):
        result = diagnose_frame(throttled_caller(seed))
        top = result.findings[0]
        assert top.pattern == "cpu_throttling" and top.confidence >= 0.5, _found(result)
        assert top.evidence["stats"]["services"] == ["caller"], top.evidence["stats"]
        assert _conf(result, "network") < 0.5, _found(result)


def test_steps_slowed_alike_in_new_instances_first_requests_are_not_a_pause() -> None:
    """Workers that join cold run their CPU steps slower by a decaying factor: serialising and reading
    a reply stretch alike, one request at a time, but only in the first part of those instances'
    lives: a cold start, not a pause (before: gc_pause 0.77 beside cold_start)."""
    result = diagnose_frame(cold_workers_joining(0))
    assert result.findings[0].pattern == "cold_start", _found(result)
    assert _conf(result, "gc_pause") < 0.5, _found(result)
