"""A call made again after a back-off sleep is a retry, not a cache's miss path (extra_calls.waited_before).
A tool reads a database replica after a consistency check (both spans named by the operation and the
database, as instrumentations do): where the check finds the replica behind (now and then, in spells
while a long transaction replays) the tool sleeps 0.5 s, 1 s, ... and checks again. The extra copies of
the query come after the caller sat idle for the sleep, so its span has two modes explained by the
extra copies, yet no cache is there: no miss path. The same tool reading, on a miss of its in-process
memo, one query per missing key right after the lookup (copies back to back, no idle wait) is a miss
path and is still named."""

from __future__ import annotations

from tailscope.analysis.diagnosis import diagnose_frame
from tests.mechanism_frames import TraceBuilder, lognormal

N = 3000
RPS, SPELL_S = 10, 0.5  # requests a second; a stale spell's length (s)


def _tool(seed: int, backoff: bool):
    """Requests calling a model (~80 ms) then a SQL tool. `backoff`: the tool's check finds the replica
    stale in spells (3 % of the run's moments, 0.5 s each) and sleeps 0.5 s, 1 s before checking again;
    else the tool misses its memo in the same spells (its keys expired together) and queries one row per
    missing key (2-4 queries) right away."""
    b = TraceBuilder(seed)
    windows = int(N / RPS / SPELL_S)
    spells = set(b.rng.choice(windows, size=int(0.03 * windows), replace=False).tolist())
    for t in b.arrivals(N, RPS):
        b.new_trace()
        inst = f"agent/{int(b.rng.integers(24))}"
        root = b.span(None, "POST /ask", "Server", inst, t, 0.0)
        cur = t + 0.3
        llm = lognormal(b.rng, 80.0, 0.3)
        if b.rng.random() < 0.01:
            llm *= float(b.rng.uniform(4, 8))
        b.span(root, "chat model", "Client", inst, cur, llm)
        cur += llm + 0.2
        tool = b.span(root, "execute_tool sql_query", "Internal", inst, cur, 0.0)
        attrs = {"db__system": "postgresql", "db__name": "orders"}
        if backoff:
            stale = int(t / 1000.0 / SPELL_S) in spells
            for attempt in range(3):
                check = lognormal(b.rng, 1.6, 0.3)
                b.span(tool, "SELECT orders", "Client", inst, cur, check, **attrs)
                cur += check
                if not stale or attempt == 2:
                    break
                cur += 500.0 * 2 ** attempt * (1 + 0.1 * float(b.rng.random()))
            queries = 1
        else:
            look = lognormal(b.rng, 0.3, 0.2)
            b.span(tool, "memo get", "Internal", inst, cur, look)
            cur += look
            queries = 1 + (int(b.rng.integers(2, 5)) if int(t / 1000.0 / SPELL_S) in spells else 0)
        for _q in range(queries):
            read = lognormal(b.rng, 6.0, 0.3) if backoff else lognormal(b.rng, 60.0, 0.3)
            b.span(tool, "SELECT orders", "Client", inst, cur, read, **attrs)
            cur += read
        b.set_end(tool, cur)
        b.set_end(root, cur + 0.5)
    return b.frame()


def _cache(result) -> float:
    return max((f.confidence for f in result.findings if f.pattern == "cache_miss"), default=0.0)


def test_copies_after_a_back_off_sleep_are_no_miss_path() -> None:
    result = diagnose_frame(_tool(2, backoff=True))
    assert _cache(result) < 0.5, [(f.pattern, round(f.confidence, 2)) for f in result.findings]


def test_copies_right_after_a_lookup_are_still_a_miss_path() -> None:
    result = diagnose_frame(_tool(2, backoff=False))
    assert _cache(result) >= 0.5, [(f.pattern, round(f.confidence, 2)) for f in result.findings]
