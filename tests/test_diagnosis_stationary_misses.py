"""A cache's stationary mix is the service's shape (cache_miss.py). A per-location cache in front of a
far store misses a fifth of its reads at random all run (each key expires a while after the read that
filled it): its reads have two duration modes and carry a cache hit/miss attribute, but the misses
cost every request alike and the tail is made elsewhere (a dependency's rare slow answers). Nothing
a cache does changed: no wave, no onset, no cold start; a possible cause, not named. The same cache
whose keys all expire at one moment (an expiry wave) misses far more from then on: named."""

from __future__ import annotations

from tailscope.analysis.diagnosis import diagnose_frame
from tests.mechanism_frames import TraceBuilder, lognormal

N = 3000


def _edge_cache(seed: int, wave: bool = False, warming: bool = False):
    """A read through a local cache (hit ~1 ms; a miss ~60 ms to the far store, `cache.status` MISS),
    then a call to a ranker that answers in ~20 ms and 2 % of the time in 300-600 ms. Misses: 20 % at
    random all run, or with `wave` 4 % until 40 % of the run and 45 % after (every key expired), or
    with `warming` a cold cache filling slowly: 70 % at the start, falling to 45 % by a fifth of the run."""
    b = TraceBuilder(seed)
    for i, t in enumerate(b.arrivals(N, 80)):
        b.new_trace()
        inst = f"edge/{int(b.rng.integers(4))}"
        root = b.span(None, "GET /personalize", "Server", inst, t, 0.0)
        cur = t + 0.1
        rate = (0.04 if i < 0.4 * N else 0.45) if wave else 0.2
        if warming:
            rate = 0.45 + 0.25 * max(0.0, 1.0 - i / (0.2 * N))
        miss = b.rng.random() < rate
        read = lognormal(b.rng, 60.0, 0.2) if miss else lognormal(b.rng, 1.0, 0.2)
        b.span(root, "KV get", "Client", inst, cur, read, cache__status="MISS" if miss else "HIT")
        cur += read + 0.1
        rank = lognormal(b.rng, 20.0, 0.2)
        if b.rng.random() < 0.02:
            rank = float(b.rng.uniform(300.0, 600.0))
        call = b.span(root, "POST /rank", "Client", inst, cur, rank)
        cur += rank + 0.1
        b.set_end(call, cur - 0.1)
        b.set_end(root, cur + 0.2)
    return b.frame()


def _cache(result) -> float:
    return max((f.confidence for f in result.findings if f.pattern == "cache_miss"), default=0.0)


def test_a_caches_stationary_misses_that_carry_little_of_the_tail_are_not_named() -> None:
    result = diagnose_frame(_edge_cache(1))
    cache = [f for f in result.findings if f.pattern == "cache_miss"]
    assert cache and cache[0].confidence < 0.5, [(f.pattern, round(f.confidence, 2)) for f in result.findings]
    assert cache[0].evidence["stats"]["steady_trickle"]


def test_the_same_cache_after_an_expiry_wave_is_named() -> None:
    result = diagnose_frame(_edge_cache(1, wave=True))
    assert _cache(result) >= 0.5, [(f.pattern, round(f.confidence, 2)) for f in result.findings]


def test_a_cold_cache_warming_slowly_is_no_stationary_mix() -> None:
    """Its misses fall from the start far beyond chance, though they carry little of the tail."""
    result = diagnose_frame(_edge_cache(1, warming=True))
    assert _cache(result) >= 0.5, [(f.pattern, round(f.confidence, 2)) for f in result.findings]
