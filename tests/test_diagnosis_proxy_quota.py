"""A forwarding tier stopped by a CPU quota (proxy_stalls.py through cpu_throttling.split): the
requests it holds are released together when a 100 ms period starts again, so the stops end on
period boundaries; the same stops at random moments stay a pause."""

from __future__ import annotations

from tailscope.analysis.diagnosis import diagnose_frame
from tests.mechanism_frames import Pauses, TraceBuilder, by_pattern, lognormal
from tests.mechanism_stalls import quota_stalls

N, RPS = 4000, 150.0


def _gateway(seed: int, quota: bool) -> TraceBuilder:
    """Gateways (three instances) forward each request to a model server (traced: its span holds a
    preprocess and a forward); a gateway stops in 6 % of the 100 ms periods of its CPU quota (`quota`)
    or for as long at random moments, and reads the model's reply when it runs again."""
    b = TraceBuilder(seed)
    gateways = [f"gw/{k}" for k in range(3)]
    until = N / RPS * 1000.0 + 2000.0
    stops = quota_stalls(b, gateways, until, rate=0.08)
    if not quota:  # as many stops, as long, each at its own moment
        stops = Pauses({g: [(a + s, b_ + s) for (a, b_), s in zip(spans, b.rng.uniform(0, 100, len(spans)),
                                                                  strict=True)]
                        for g, spans in stops.spans.items()})
    for t in b.arrivals(N, RPS):
        b.new_trace()
        gw = gateways[int(b.rng.integers(3))]
        start = stops.run(gw, t, 0.0)
        root = b.span(None, "POST /predict", "Server", gw, start, 0.0)
        sent = stops.run(gw, start + 0.1, 0.2)
        work = lognormal(b.rng, 20.0, 0.2)
        model = f"model/{int(b.rng.integers(2))}"
        srv_s = sent + 0.3
        back = stops.run(gw, srv_s + work + 0.3, 0.0)
        call = b.span(root, "Predict", "Client", gw, sent, back - sent)
        srv = b.span(call, "Predict", "Server", model, srv_s, work)
        pre = work * 0.3
        b.span(srv, "preprocess", "Internal", model, srv_s + 0.05, pre)
        b.span(srv, "forward", "Internal", model, srv_s + 0.1 + pre, work - pre - 0.2)
        b.set_end(root, stops.run(gw, back, 0.1) + 0.05)
    return b


def test_a_forwarding_tier_stopped_by_its_cpu_quota_is_throttled_not_paused():
    seen = by_pattern(diagnose_frame(_gateway(3, quota=True).frame()).findings)
    assert seen.get("cpu_throttling", 0.0) >= 0.5, seen
    assert seen.get("gc_pause", 0.0) < 0.5, seen


def test_a_forwarding_tier_stopped_at_random_moments_is_not_throttled():
    seen = by_pattern(diagnose_frame(_gateway(3, quota=False).frame()).findings)
    assert seen.get("cpu_throttling", 0.0) < 0.5, seen
