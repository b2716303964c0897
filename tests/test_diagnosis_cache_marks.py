"""A cache finding needs the slow mode marked as the misses (diag22, session 13): a call made on the
slow path only, or a hit/miss value telling the modes apart. A cache nearby is not enough: a cache's
own writes stalling behind the store's compaction, and a call whose new connections sometimes wait
for a retransmission timer, are two duration modes beside a cache with no miss in them."""

from __future__ import annotations

from tailscope.analysis.diagnosis import diagnose_frame
from tests.mechanism_frames import TraceBuilder, by_pattern, lognormal


def _stalls(b: TraceBuilder, until_ms: float, every_ms: float, length_ms: float) -> list[tuple[float, float]]:
    out, t = [], b.rng.uniform(0, every_ms)
    while t < until_ms:
        out.append((t, t + length_ms * b.rng.uniform(0.6, 1.4)))
        t += b.rng.uniform(0.5, 1.5) * every_ms
    return out


def cache_writes(seed: int, marked: bool):
    """Each request reads its items (a lookup carrying the cache's counts), computes, then writes the
    items it fetched back into a local cache. The store behind the cache slows its writes now and
    then (compaction behind: a delayed write rate, each write sleeps a few ms). With `marked`, a
    hit/miss value on the write says which writes missed (and the misses are the slow ones): a real
    miss path."""
    b = TraceBuilder(seed)
    n, rps = 4000, 200
    stalls = {f"api/{k}": _stalls(b, n / rps * 1000.0 + 5000, 1500.0, 400.0) for k in range(3)}
    for t in b.arrivals(n, rps):
        b.new_trace()
        inst = f"api/{int(b.rng.integers(3))}"
        root = b.span(None, "POST /score", "Server", inst, t, 0.0)
        cur = t + 0.05
        look = lognormal(b.rng, 0.4, 0.2)
        b.span(root, "load_items", "Internal", inst, cur, look, cache__items=40)
        cur += look + 0.02
        work = lognormal(b.rng, 6.0, 0.2)
        b.span(root, "score", "Internal", inst, cur, work)
        cur += work + 0.02
        write = lognormal(b.rng, 0.05, 0.3)
        stall = next((e for a, e in stalls[inst] if a <= cur < e), None)
        if marked:
            miss = b.rng.random() < 0.2 if stall is None else True
            write = lognormal(b.rng, 4.0, 0.2) if miss else write
            b.span(root, "store_items", "Internal", inst, cur, write, cache__items=40,
                   cache__result="miss" if miss else "hit")
        else:
            if stall is not None:
                write += b.rng.uniform(0.5, 4.0)
            b.span(root, "store_items", "Internal", inst, cur, write, cache__items=40)
        cur += write + 0.02
        b.set_end(root, cur + 0.05)
    return b.frame()


def test_a_cache_write_stalling_is_not_a_miss() -> None:
    found = by_pattern(diagnose_frame(cache_writes(1, marked=False)).findings)
    assert found.get("cache_miss", 0.0) < 0.5, found


def test_a_slow_mode_a_hit_miss_value_marks_is_a_miss() -> None:
    found = by_pattern(diagnose_frame(cache_writes(2, marked=True)).findings)
    assert found.get("cache_miss", 0.0) >= 0.5, found


def reconnecting_calls(seed: int, store_on_slow: bool = False):
    """A call to a third party inside a wrapper span; one call in ten opens a new connection (a name
    lookup and a connect below the CLIENT span). For two seconds the peer drops SYNs: a connect then
    waits the kernel's 1 s retransmission timer. With `store_on_slow`, the wrapper is a lookup whose
    misses call a store beside the call (a real miss path)."""
    b = TraceBuilder(seed)
    n, rps = 4000, 200
    drop = (8000.0, 10000.0)
    for t in b.arrivals(n, rps):
        b.new_trace()
        inst = f"api/{int(b.rng.integers(3))}"
        root = b.span(None, "POST /embed", "Server", inst, t, 0.0)
        cur = t + 0.05
        wrap = b.span(root, "fetch_embedding", "Internal", inst, cur, 0.0, cache__name="embeddings")
        at = cur + 0.02
        if store_on_slow and b.rng.random() < 0.3:
            q = lognormal(b.rng, 25.0, 0.2)
            b.span(wrap, "SELECT embeddings", "Client", inst, at, q, db__system="postgresql")
            at += q + 0.02
        call = b.span(wrap, "POST", "Client", inst, at, 0.0, http__response__status_code=200)
        inner = at + 0.01
        if b.rng.random() < 0.1:
            dns = lognormal(b.rng, 1.2, 0.3)
            b.span(call, "resolve", "Internal", inst, inner, dns)
            connect = lognormal(b.rng, 5.0, 0.15)
            if not store_on_slow and drop[0] <= t < drop[1] and b.rng.random() < 0.6:
                connect += 1000.0
            b.span(call, "connect", "Internal", inst, inner + dns, connect)
            inner += dns + connect
        inner += lognormal(b.rng, 20.0, 0.2)
        b.set_end(call, inner)
        b.set_end(wrap, inner + 0.02)
        cur = inner + 0.05
        b.set_end(root, cur + 0.05)
    return b.frame()


def test_a_new_connection_inside_a_call_is_no_miss_path() -> None:
    found = by_pattern(diagnose_frame(reconnecting_calls(3)).findings)
    assert found.get("cache_miss", 0.0) < 0.5, found


def test_a_store_call_beside_the_call_is_a_miss_path() -> None:
    result = diagnose_frame(reconnecting_calls(4, store_on_slow=True))
    found = by_pattern(result.findings)
    assert found.get("cache_miss", 0.0) >= 0.5, found
