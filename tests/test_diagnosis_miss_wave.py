"""cache_miss from a wave of refetches (miss_wave.py): a search API keeps a per-process cache of item
features (expire after write); a bulk preload wrote the hot items at one moment, so they expire
together a TTL later, and from then on each request fetches the items it misses in one batch call to
a feature service (traced: its time grows per item), which refills them, popular items first. The
twins make the same call carry more items by another mechanism: the requests ask for more (their
own item count surges and falls back the same way), a setting that makes every call fetch more from
one moment on (a plateau that holds), or nothing at all."""

from __future__ import annotations

import numpy as np

from tailscope.analysis.diagnosis import diagnose_frame
from tests.mechanism_frames import TraceBuilder, by_pattern, lognormal

N, RPS, ITEMS, ASKED, PODS, HOT = 3000, 200.0, 200_000, 150, 3, 20_000
WEIGHT = 1.0 / np.arange(1, ITEMS + 1) ** 0.8
POPULARITY = np.cumsum(WEIGHT) / WEIGHT.sum()


def _search(seed: int, mode: str, cache_attr: bool = True) -> TraceBuilder:
    """`mode`: `wave` (the preloaded items expire together at 35 % of the run), `asked` (no wave; the
    requests' own item count surges at 35 % and falls back, so the misses do), `plateau` (from 35 %
    every call fetches 6x the items: a setting, no refill), `steady`. `cache_attr`: the span around
    the call says it counts cache misses."""
    b = TraceBuilder(seed)
    arrivals = b.arrivals(N, RPS)
    end = float(arrivals[-1])
    wave_at = 0.35 * end
    ttl = 4.0 * end  # expire after write; at the start an item asked at rate r is present with
    rate = WEIGHT / WEIGHT.sum() * ASKED * RPS / PODS / 1000.0  # probability r ttl / (r ttl + 1)
    present = rate * ttl / (rate * ttl + 1.0)
    written = {p: np.where(b.rng.random(ITEMS) < present, -ttl * b.rng.random(ITEMS), -np.inf)
               for p in range(PODS)}
    if mode == "wave":  # a bulk preload wrote the popular head at one moment
        for p in range(PODS):
            written[p][:HOT] = wave_at - ttl
    for t in arrivals:
        b.new_trace()
        p = int(b.rng.integers(PODS))
        inst = f"api/{p}"
        asked = ASKED
        if mode == "asked" and t >= wave_at:
            asked = int(ASKED * (1 + 5 * np.exp(-(t - wave_at) / (0.2 * end))))
        root = b.span(None, "GET /search", "Server", inst, t, 0.0, **{"request.items": asked})
        cur = t + lognormal(b.rng, 3.0, 0.3)
        keys = np.unique(np.searchsorted(POPULARITY, b.rng.random(asked)))
        w = written[p][keys]
        missing = keys[(t - w >= ttl) | np.isinf(w)]
        n_miss = len(missing) + 1 + int(b.rng.poisson(2.0))  # and the user's own features, never cached
        if mode == "plateau" and t >= wave_at:
            n_miss *= 6
        attrs = {"lookup.cache_misses": n_miss} if cache_attr else {"lookup.items": asked}
        feats = b.span(root, "features", "Internal", inst, cur, 0.0, **attrs)
        after = cur + 0.2
        work = (0.8 + 0.3 * n_miss) * float(b.rng.lognormal(0.0, 0.2))
        call = b.span(feats, "GetFeatures", "Client", inst, after, 0.0, **{"rpc.items": n_miss})
        srv = b.span(call, "GetFeatures", "Server", f"store/{int(b.rng.integers(4))}", after + 0.2, work,
                     service="store")
        b.set_end(srv, after + 0.2 + work)
        b.set_end(call, after + 0.5 + work)
        after += 0.6 + work
        written[p][missing] = t
        b.set_end(feats, after)
        done = after + lognormal(b.rng, 4.0, 0.25)
        b.span(root, "rank", "Internal", inst, after, done - after)
        b.set_end(root, done + 0.3)
    return b


def _wave(findings) -> float:
    return max((f.confidence for f in findings if f.pattern == "cache_miss"
                and f.evidence["stats"].get("mechanism", "").startswith("entries that expired")), default=0.0)


def test_an_expiry_wave_is_a_cache_miss_not_a_payload_or_a_cold_start():
    findings = diagnose_frame(_search(5, "wave").frame()).findings
    conf = by_pattern(findings)
    assert _wave(findings) >= 0.8, [(f.pattern, round(f.confidence, 2)) for f in findings]
    assert findings[0].pattern == "cache_miss" and findings[0].span_name == "features"
    assert conf.get("large_payload", 0.0) < 0.5  # the call's size is the misses' count
    assert conf.get("cold_start", 0.0) < 0.5  # the store answered larger calls, no data went cold


def test_an_expiry_wave_with_no_cache_named_is_still_a_miss_wave_below_the_named_cap():
    findings = diagnose_frame(_search(5, "wave", cache_attr=False).frame()).findings
    assert 0.5 <= _wave(findings) <= 0.8, [(f.pattern, round(f.confidence, 2)) for f in findings]
    assert by_pattern(findings).get("large_payload", 0.0) < 0.5


def test_requests_that_ask_for_more_are_no_miss_wave():
    assert _wave(diagnose_frame(_search(5, "asked").frame()).findings) < 0.5


def test_calls_that_fetch_more_from_one_moment_on_are_no_miss_wave():
    assert _wave(diagnose_frame(_search(5, "plateau").frame()).findings) < 0.5


def test_a_steady_cache_has_no_miss_wave():
    assert _wave(diagnose_frame(_search(5, "steady").frame()).findings) < 0.2
