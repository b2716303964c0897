"""A forwarding tier in front of a backlogged service is not paused (proxy_stalls.py). The service's
sync workers take requests from a shared backlog in bursts of arrivals: the tier's calls wait at the
service's door, so the tier's "own" time (its span minus the service's) is long for the burst's
requests, and a burst's requests are forwarded, answered and replied to close together. A paused
tier releases what it held when it runs again: its events come late after what they waited for
(the request's arrival, the service's answer). A backlog's requests are forwarded as they arrive
and read as soon as they are answered: nothing of the tier is late."""

from __future__ import annotations

from tailscope.analysis.diagnosis import diagnose_frame, proxy_stalls
from tailscope.analysis.diagnosis.model import Context
from tests.mechanism_frames import Pauses, TraceBuilder, by_pattern, lognormal

N = 4000


def _bursty_arrivals(b: TraceBuilder, burst_rps: float) -> list[float]:
    """80 rps, with a 1 s burst at `burst_rps` every 5 s (ms)."""
    out, t = [], 0.0
    while len(out) < N:
        burst = (t % 5000.0) < 1000.0
        t += float(b.rng.exponential(1000.0 / (burst_rps if burst else 80.0)))
        out.append(t)
    return out


def _gateway(seed: int, backlog: bool, pauses: Pauses | None = None, burst_rps: float = 600.0):
    """A gateway forwards each request to one of four service instances with eight sync workers each
    (`backlog`: a request waits for a free worker, first come first served; else it is served at once)
    and reads the reply; `pauses` stop the gateway."""
    b = TraceBuilder(seed)
    pauses = pauses or Pauses()
    free = {f"api/{k}": [0.0] * 8 for k in range(4)}  # each worker's next free moment (ms)
    for t in _bursty_arrivals(b, burst_rps):
        b.new_trace()
        gw = "gw/0"
        outer = b.span(None, "POST /v1/offer", "Server", gw, t, 0.0)
        sent = pauses.run(gw, t, lognormal(b.rng, 0.4, 0.2))
        api = f"api/{int(b.rng.integers(4))}"
        at = sent + lognormal(b.rng, 0.3, 0.2)
        workers = free[api]
        w = min(range(8), key=lambda j: workers[j])
        start = max(at, workers[w]) if backlog else at
        work = lognormal(b.rng, 75.0, 0.3)
        workers[w] = start + work
        call = b.span(outer, "POST /credit-limit", "Client", gw, sent, 0.0)
        root = b.span(call, "POST credit-limit", "Server", api, start, work)
        b.span(root, "SELECT", "Client", api, start + 1.0, work * 0.4)
        b.span(root, "score", "Internal", api, start + 1.5 + work * 0.4, work * 0.5)
        back = pauses.run(gw, start + work + lognormal(b.rng, 0.3, 0.2), 0.0)
        b.set_end(call, back)
        b.set_end(outer, pauses.run(gw, back, lognormal(b.rng, 0.3, 0.2)))
    return b.frame()


def _confidence(frame) -> float:
    return max((fd.confidence for fd in proxy_stalls.detect(Context(frame))), default=0.0)


def test_a_backlog_at_the_callees_door_is_not_a_pause_of_the_forwarding_tier() -> None:
    assert _confidence(_gateway(5, backlog=True)) < 0.5


def test_a_forwarding_tier_that_stops_is_paused() -> None:
    """The same bursts served at once, and the gateway stopped for 40-120 ms at random moments: what
    it held is forwarded and read when it runs again."""
    b = TraceBuilder(9)
    stops = [(a, a + float(b.rng.uniform(40.0, 120.0))) for a in sorted(b.rng.uniform(0.0, 20_000.0, 40))]
    assert _confidence(_gateway(5, backlog=False, pauses=Pauses({"gw/0": stops}))) >= 0.5


def test_a_paused_tier_in_front_of_a_backlog_keeps_both_causes() -> None:
    """Two causes on different processes: the gateway stops, and the service behind it queues in its
    bursts. The queue fills the tail; the stops still hold many requests (what they add to the mean
    request names them beside it), and the queue stays the queue."""
    b = TraceBuilder(9)
    stops = [(a, a + float(b.rng.uniform(40.0, 120.0))) for a in sorted(b.rng.uniform(0.0, 20_000.0, 40))]
    frame = _gateway(5, backlog=True, pauses=Pauses({"gw/0": stops}), burst_rps=500.0)
    seen = by_pattern(diagnose_frame(frame).findings)
    assert seen.get("gc_pause", 0.0) >= 0.5 and seen.get("queueing", 0.0) >= 0.5, seen
