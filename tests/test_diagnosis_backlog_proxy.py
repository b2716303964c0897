"""A burst queued in a callee's listen backlog is not a pause of the tier in front of it (diag20,
django-celery class 1): a forwarding tier's call to sync workers waits at the callee's door (between
the call's send and the callee's SERVER span) while the burst outruns the workers, and the calls held
there are let in as workers free up, many in the same millisecond. proxy_stalls.py read that wait as
the proxy's own time released together (gc_pause 0.96-0.99 on the caller). The callee's door is the
callee's: left out of the proxy's time. A forwarding tier that stops (forwards and reads replies late)
stays a pause."""

from __future__ import annotations

import heapq

from tailscope.analysis.diagnosis import diagnose_frame
from tests.mechanism_frames import TraceBuilder, by_pattern, lognormal
from tests.mechanism_services import gateway_service

PODS, WORKERS = 3, 4


def backlog_service(seed: int, n: int = 5000, rps: float = 120.0):
    """A gateway (one instance, forwarding only) calls an API on three pods of four sync workers each
    (~30 ms a request; a pod's workers share one backlog); arrivals at `rps` with a burst of twice the
    pods' capacity for 5 % of the run."""
    b = TraceBuilder(seed)
    free = {p: [(0.0, w) for w in range(WORKERS)] for p in range(PODS)}
    run_ms = n / rps * 1000.0
    burst = (0.4 * run_ms, 0.45 * run_ms)
    capacity = PODS * WORKERS / 0.030
    t, times = 0.0, []
    while len(times) < n:
        t += b.rng.exponential(1000.0 / (2.0 * capacity if burst[0] <= t < burst[1] else rps))
        times.append(t)
    for t in times:
        b.new_trace()
        outer = b.span(None, "POST /offer", "Server", "gw/0", t, 0.0)
        sent = t + lognormal(b.rng, 0.3, 0.3)
        call = b.span(outer, "POST", "Client", "gw/0", sent, 0.0)
        pod = int(b.rng.integers(PODS))
        at, w = heapq.heappop(free[pod])
        start = max(sent + lognormal(b.rng, 0.3, 0.3), at)
        inst = f"api/{pod}-{w}"
        root = b.span(call, "POST /limit", "Server", inst, start, 0.0)
        cur = start + 0.05
        for name, median in (("load", 4.0), ("score", 20.0), ("write", 5.0)):
            d = lognormal(b.rng, median, 0.3)
            b.span(root, name, "Internal", inst, cur, d)
            cur += d + 0.02
        b.set_end(root, cur)
        heapq.heappush(free[pod], (cur + 0.1, w))
        back = cur + lognormal(b.rng, 0.3, 0.3)
        b.set_end(call, back)
        b.set_end(outer, back + lognormal(b.rng, 0.2, 0.3))
    return b.frame()


def test_a_burst_in_the_callees_backlog_is_no_pause_of_the_caller() -> None:
    seen = by_pattern(diagnose_frame(backlog_service(2)).findings)
    assert seen.get("gc_pause", 0.0) < 0.5, seen
    assert seen.get("queueing", 0.0) >= 0.5, seen


def test_a_stopped_forwarding_tier_stays_a_pause() -> None:
    seen = by_pattern(diagnose_frame(gateway_service(1, gateway_pauses=True)).findings)
    assert seen.get("gc_pause", 0.0) >= 0.5, seen
