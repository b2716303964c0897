"""Arrivals a paused sender held and let go at once (held_arrivals.py): the clumps they make downstream
are the pause's, not the load's. Put back where the pauses found them, a real burst beside the same
pauses shows as the queue it is (before: its arrivals' correlation with the waits drowned in the
clumps, queueing 0.41), and the pauses alone still raise no queue."""

from __future__ import annotations

import heapq

import numpy as np

from tailscope.analysis.diagnosis import diagnose_frame
from tests.mechanism_frames import TraceBuilder, by_pattern, lognormal

N, RPS, WORKERS, FRONTS, WORK_MS = 4000, 60.0, 2, 2, 25.0


def _pauses(rng: np.random.Generator, horizon: float) -> list[tuple[float, float]]:
    out, t = [], float(rng.uniform(500.0, 3000.0))
    while t < horizon:
        out.append((t, t + float(rng.uniform(600.0, 1200.0))))
        t = out[-1][1] + float(rng.uniform(3000.0, 6000.0))
    return out


def _settle(stops: list[tuple[float, float]], t: float) -> float:
    for a, b in stops:
        if a <= t < b:
            return b
    return t


def _run(seed: int, burst: bool) -> TraceBuilder:
    """FRONTS front processes (each stopped by its collector for 0.6-1.2 s every 3-6 s: nothing starts
    or is sent meanwhile) forward each request to a model server with WORKERS workers (first come first
    served; its queue is a span of its own, then the forward). `burst`: for a tenth of the run a third
    of the way in, arrivals come at 2.2x the rate."""
    b = TraceBuilder(seed)
    b.stages["queue wait"] = "queue"
    b.stages["forward"] = "model_forward"
    arrivals = b.arrivals(N, RPS)
    if burst:
        t0, length = arrivals[N // 3], 0.1 * arrivals[-1]
        extra = np.sort(b.rng.uniform(t0, t0 + length, int(1.2 * RPS * length / 1000.0)))
        arrivals = np.sort(np.r_[arrivals, extra])
    stops = [_pauses(b.rng, arrivals[-1] + 5000.0) for _ in range(FRONTS)]
    free = [0.0] * WORKERS
    for t in arrivals:
        b.new_trace()
        k = int(b.rng.integers(FRONTS))
        inst = f"gw/{k}"
        start = _settle(stops[k], float(t) + 0.2)
        root = b.span(None, "POST /predict", "Server", inst, start, 0.0)
        send = start + lognormal(b.rng, 1.5, 0.3)
        call = b.span(root, "POST", "Client", inst, send, 0.0)
        arrive = send + 0.3
        begin = max(arrive, heapq.heappop(free))
        work = lognormal(b.rng, WORK_MS, 0.3)
        heapq.heappush(free, begin + work)
        server = b.span(call, "POST /infer", "Server", "model/0", arrive, begin + work - arrive)
        b.span(server, "queue wait", "Internal", "model/0", arrive, begin - arrive)
        b.span(server, "forward", "Internal", "model/0", begin, work)
        back = _settle(stops[k], begin + work + 0.3)
        b.set_end(call, back)
        b.set_end(root, _settle(stops[k], back + lognormal(b.rng, 1.0, 0.3)))
    return b


def test_waits_behind_requests_a_paused_sender_let_go_together_are_the_pause():
    seen = by_pattern(diagnose_frame(_run(4, burst=False).frame()).findings)
    assert seen.get("gc_pause", 0.0) >= 0.5, seen
    assert seen.get("queueing", 0.0) < 0.5, seen


def test_a_real_burst_beside_the_same_pauses_is_still_a_queue():
    seen = by_pattern(diagnose_frame(_run(4, burst=True).frame()).findings)
    assert seen.get("queueing", 0.0) >= 0.5, seen
