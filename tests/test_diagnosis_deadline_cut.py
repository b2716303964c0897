"""A tail cut by a deadline with a fallback (unexplained.deadline_cut): calls held past a 300 ms ask
timeout by something without a span of its own end at 300 ms in error, and a fallback answers. What
held them is not pinned down (it stays unexplained_tail), but the accounting says the expiry: the
tail's value is the deadline's, and the cause is what held the calls past it. Twin: the same slow
calls without a deadline (they end at any duration, no error) are only heavy-tailed."""

from __future__ import annotations

from tailscope.analysis.diagnosis import diagnose_frame
from tests.mechanism_frames import TraceBuilder, lognormal

N, RPS, DEADLINE = 2000, 120.0, 300.0


def asks(deadline: bool, seed: int = 8) -> TraceBuilder:
    """Each request asks an entity (`Entity.ask`, INTERNAL, ~2 ms); 6 % of the asks are held 150-900 ms
    by something untraced; with `deadline`, an ask ends at 300 ms in error and a fallback (~1 ms, no
    span) answers."""
    b = TraceBuilder(seed)
    for t in b.arrivals(N, RPS):
        t = float(t)
        b.new_trace()
        inst = f"api/{int(b.rng.integers(3))}"
        root = b.span(None, "GET /eta", "Server", inst, t, 0.0, service="eta-api")
        at = t + lognormal(b.rng, 1.0, 0.2)
        took = lognormal(b.rng, 2.0, 0.3)
        if b.rng.random() < 0.06:
            took += float(b.rng.uniform(150.0, 900.0))
        failed = deadline and took > DEADLINE
        took = min(took, DEADLINE) if deadline else took
        b.span(root, "Entity.ask", "Internal", inst, at, took, service="eta-api",
               **{"otel.status_code": "ERROR" if failed else "OK"})
        b.set_end(root, at + took + (1.0 if failed else 0.0) + lognormal(b.rng, 3.0, 0.2))
    return b


def _accounting(b: TraceBuilder) -> dict:
    found = [f for f in diagnose_frame(b.frame()).findings
             if f.pattern == "unexplained_tail" and f.span_name == "Entity.ask"]
    assert found, "the ask's share is accounted for"
    return found[0].evidence["stats"]


def test_a_tail_cut_by_a_deadline_says_so() -> None:
    """Before: 'heavy_tailed' (p99 300 ms vs p50 2 ms), the deadline not said."""
    stats = _accounting(asks(deadline=True))
    assert stats["character"] == "deadline", stats
    assert abs(stats["deadline_ms"] - DEADLINE) <= 1.0 and stats["at_deadline_in_error"] >= 0.9, stats


def test_the_same_slow_calls_without_a_deadline_are_heavy_tailed() -> None:
    stats = _accounting(asks(deadline=False))
    assert stats["character"] != "deadline" and "deadline_ms" not in stats, stats
