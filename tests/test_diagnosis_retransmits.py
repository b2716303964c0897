"""A lossy path is the network even where the callees are not traced (diag20, django-celery class 4):
calls from one zone's instances to redis and postgres lose a segment now and then and wait for TCP's
retransmission timer (200 ms, 600 ms after a second loss): their slow calls take a fixed 200 ms more,
the same on every kind of call (retransmits.py). Read before as slow_dependency 0.96 on the busiest
call. A heavy-tailed dependency (a continuous tail of slow statements from every caller) stays a slow
dependency."""

from __future__ import annotations

from tailscope.analysis.diagnosis import diagnose_frame
from tests.mechanism_frames import TraceBuilder, by_pattern, lognormal

CALLS = (("GET", "redis", 0.3), ("SELECT", "postgresql", 1.5), ("SELECT", "postgresql", 1.0),
         ("UPDATE", "postgresql", 0.8), ("SET", "redis", 0.3))


def zones_service(seed: int, lossy: bool, n: int = 3000, rps: float = 120.0):
    """Six API instances (three per zone); each request makes five calls to redis and postgres, then
    scores (~20 ms). With `lossy`, a zone-b instance's call loses a segment 2 % of the time (+200 ms;
    one loss in 20 is followed by a second: +600 ms); otherwise 1.5 % of the SELECTs from any instance
    are slow statements (30-1000 ms, Pareto)."""
    b = TraceBuilder(seed)
    for t in b.arrivals(n, rps):
        b.new_trace()
        zone_b = b.rng.random() < 0.5
        inst = f"api/{'b' if zone_b else 'a'}{int(b.rng.integers(3))}"
        root = b.span(None, "POST /limit", "Server", inst, t, 0.0)
        cur = t + 0.1
        for name, system, median in CALLS:
            d = lognormal(b.rng, median * (2.0 if zone_b else 1.0), 0.3)
            if lossy and zone_b and b.rng.random() < 0.02:
                d += 600.0 if b.rng.random() < 0.05 else 200.0
            if not lossy and name == "SELECT" and b.rng.random() < 0.015:
                d += 30.0 * float(b.rng.pareto(1.2) + 1.0)
            b.span(root, name, "Client", inst, cur, d, db__system=system)
            cur += d + 0.05
        d = lognormal(b.rng, 20.0, 0.2)
        b.span(root, "score", "Internal", inst, cur, d)
        b.set_end(root, cur + d + 0.1)
    return b.frame()


def test_a_lost_segments_timer_on_one_zones_calls_is_the_network() -> None:
    result = diagnose_frame(zones_service(1, lossy=True))
    seen = by_pattern(result.findings)
    assert result.findings[0].pattern == "network" and seen["network"] >= 0.5, seen
    assert seen.get("slow_dependency", 0.0) < 0.5, seen
    where = result.findings[0].evidence["stats"]["instances"]
    assert where and all("/b" in i for i in where), where


def test_a_heavy_tailed_dependency_is_no_lossy_path() -> None:
    seen = by_pattern(diagnose_frame(zones_service(1, lossy=False)).findings)
    assert seen.get("network", 0.0) < 0.5, seen
    assert seen.get("slow_dependency", 0.0) >= 0.5, seen
