"""Issue 25's mechanism rules on traces built from the mechanism (tests/mechanism_frames.py): each
test plants one physical cause and checks the diagnosis names it, and does not name another."""

from __future__ import annotations

from tailscope.analysis.diagnosis import diagnose_frame
from tests.mechanism_frames import TraceBuilder, lognormal

BASE = [("auth", "Internal", 0.4, 0.3), ("featurize", "Internal", 1.5, 0.3), ("infer", "Internal", 8.0, 0.15)]


def _conf(result, pattern: str) -> float:
    return max((f.confidence for f in result.findings if f.pattern == pattern), default=0.0)


def _two_mode_service(seed: int, child_on_slow: bool = False, hit_attribute: bool = False):
    """A lookup that takes a slow path 15 % of the time (6x slower)."""
    b = TraceBuilder(seed)
    for t in b.arrivals(3000, 150):
        b.new_trace()
        inst = f"api/{int(b.rng.integers(3))}"
        root = b.span(None, "POST /score", "Server", inst, t, 0.0)
        cur = t + 0.05
        slow = b.rng.random() < 0.15
        work = lognormal(b.rng, 12.0 if slow else 2.0, 0.2)
        attrs = {"lookup.hit": not slow} if hit_attribute else {}
        look = b.span(root, "load_profile", "Internal", inst, cur, work, **attrs)
        if slow and child_on_slow:
            b.span(look, "SELECT profiles", "Client", inst, cur + 0.3, work - 0.5, db__system="postgresql")
        cur += work + 0.02
        for name, kind, median, sigma in BASE:
            d = lognormal(b.rng, median, sigma)
            b.span(root, name, kind, inst, cur, d)
            cur += d + 0.02
        b.set_end(root, cur + 0.05)
    return b.frame()


def test_two_modes_without_a_cache_are_not_a_cache_miss() -> None:
    result = diagnose_frame(_two_mode_service(1))
    assert _conf(result, "cache_miss") < 0.5, [(f.pattern, round(f.confidence, 2)) for f in result.findings]


def test_two_modes_with_a_store_call_on_the_slow_path_are_a_cache_miss() -> None:
    result = diagnose_frame(_two_mode_service(2, child_on_slow=True))
    assert result.findings[0].pattern == "cache_miss"
    assert result.findings[0].confidence >= 0.5
    assert "slow path" in result.findings[0].evidence["stats"]["cache_evidence"]


def test_two_modes_with_a_hit_attribute_are_a_cache_miss() -> None:
    result = diagnose_frame(_two_mode_service(3, hit_attribute=True))
    assert result.findings[0].pattern == "cache_miss" and result.findings[0].confidence >= 0.5

