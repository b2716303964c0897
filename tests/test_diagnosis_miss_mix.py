"""A cache's stationary mix through a request's many lookups is the request's shape (miss_mix.py).
An agent loops 1-6 steps; each step asks a semantic cache (a lookup span with a hit/miss attribute):
a hit answers in ~5 ms, a miss calls the model provider (a second or more, heavy-tailed). Every lookup
misses 40 % of the time at random all run, so the requests of many steps meet many misses and make the
tail: the misses carry all of the tail excess, yet the tail's lookups miss no more often than lookups
dealt at random would. A possible cause, not named. The same cache where 15 % of the requests
(a key space the cache cannot hold) miss on every lookup, all run: the tail's lookups miss far more
often than chance deals them: named."""

from __future__ import annotations

from tailscope.analysis.diagnosis import diagnose_frame
from tests.mechanism_frames import TraceBuilder, lognormal

N = 2500


def _agent(seed: int, evicted: float = 0.0, steps_of: int = 0, stalls: bool = False):
    """Requests of 1-6 steps (half of them 1-2), each a tokenizer, a cache lookup (hit ~5 ms; a miss then a
    ~1.2 s provider call, 2 % of them 3-6x longer) and a tool call (~40 ms). `evicted`: the share of
    requests whose every lookup misses (their keys never stay cached); the others miss 40 % of the time.
    `steps_of`: every request makes that many steps. `stalls`: one worker's loop freezes for 3-6 s in
    each step it runs during a fifth of the run (long pauses), inside the step spans."""
    b = TraceBuilder(seed)
    for t in b.arrivals(N, 6):
        b.new_trace()
        inst = f"agent/{int(b.rng.integers(6))}"
        root = b.span(None, "POST /ask", "Server", inst, t, 0.0)
        cur = t + 0.5
        steps = steps_of or int(b.rng.choice([1, 2, 3, 4, 5, 6], p=[0.15, 0.3, 0.2, 0.15, 0.12, 0.08]))
        always = b.rng.random() < evicted
        for _k in range(steps):
            step = b.span(root, "agent.step", "Internal", inst, cur, 0.0)
            tok = lognormal(b.rng, 3.0, 0.3)
            if stalls and inst == "agent/0" and (cur // 20_000) % 5 == 0:  # its loop frozen (long pauses)
                tok += float(b.rng.uniform(3000.0, 6000.0))
            b.span(step, "tokenize", "Internal", inst, cur, tok)
            cur += tok
            miss = always or b.rng.random() < 0.4
            look = lognormal(b.rng, 5.0, 0.3)
            b.span(step, "semantic_cache lookup", "Client", inst, cur, look, cache__hit=not miss)
            cur += look
            if miss:
                llm = lognormal(b.rng, 1200.0, 0.35)
                llm *= float(b.rng.uniform(3, 6)) if b.rng.random() < 0.02 else 1.0
                b.span(step, "chat model", "Client", inst, cur, llm)
                cur += llm
            tool = lognormal(b.rng, 40.0, 0.3)
            b.span(step, "tool call", "Client", inst, cur, tool)
            cur += tool + 0.2
            b.set_end(step, cur)
        b.set_end(root, cur + 0.5)
    return b.frame()


def _cache(result):
    found = [f for f in result.findings if f.pattern == "cache_miss"]
    return max(found, key=lambda f: f.confidence, default=None)


def _lines(result):
    return [(f.pattern, round(f.confidence, 2)) for f in result.findings]


def test_a_stationary_mix_met_by_requests_of_many_lookups_is_not_named() -> None:
    result = diagnose_frame(_agent(3))
    cache = _cache(result)
    assert cache is not None and cache.confidence < 0.5, _lines(result)
    stats = cache.evidence["stats"]
    assert stats["steady_trickle"] and stats["tail_excess_share"] > 0.5, stats


def test_misses_falling_on_the_tails_requests_beyond_chance_are_named() -> None:
    result = diagnose_frame(_agent(3, evicted=0.15))
    cache = _cache(result)
    assert cache is not None and cache.confidence >= 0.5, _lines(result)
    stats = cache.evidence["stats"]
    rate, (chance, sd) = stats["tail_lookup_miss_rate"], stats["tail_lookup_miss_rate_by_chance"]
    assert rate > chance + 2 * sd, cache.evidence["stats"]


def test_a_stationary_mix_beside_pauses_inside_the_steps_is_not_named() -> None:
    """Every request makes two steps; one worker's pauses (inside the steps) make the tail. The step
    spans carry the tail excess, the misses' own cost little of it: the cache's normal cost."""
    result = diagnose_frame(_agent(3, steps_of=2, stalls=True))
    cache = _cache(result)
    assert cache is not None and cache.confidence < 0.5, _lines(result)
    assert cache.evidence["stats"]["misses_cost_tail_share"] < 0.15, cache.evidence["stats"]
