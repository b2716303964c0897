"""A listing endpoint whose requests carry 5-50 items (`list.items` on the root), built from the
mechanism (tests/test_diagnosis_repeated_calls.py): it asks the database for each item's price one
query after another (N+1), or asks a price service for all items at once (a parallel fan-out), or
reads the prices from a cache and queries the database only for the missing keys (about a third)."""

from __future__ import annotations

from tests.mechanism_frames import TraceBuilder, lognormal


def listing_service(seed: int, prices: str, n: int = 3000, rps: float = 100.0):
    """`prices`: "per_item" (a `SELECT prices` per item, ~0.6 ms each, in turn), "fan_out" (a `GET
    /price` per item, all at once, ~3 ms each) or "cache_misses" (`MGET prices` from redis, then a
    `SELECT prices` per missing key, 30 % of keys)."""
    b = TraceBuilder(seed)
    for t in b.arrivals(n, rps):
        b.new_trace()
        inst = f"api/{int(b.rng.integers(3))}"
        items = int(b.rng.integers(5, 51))
        root = b.span(None, "GET /list", "Server", inst, t, 0.0, list__items=items)
        cur = t + 0.05
        d = lognormal(b.rng, 2.0, 0.3)
        b.span(root, "SELECT items", "Client", inst, cur, d, db__system="postgresql")
        cur += d + 0.05
        if prices == "fan_out":
            ends = [cur + lognormal(b.rng, 3.0, 0.3) for _ in range(items)]
            for end in ends:
                b.span(root, "GET /price", "Client", inst, cur, end - cur)
            cur = max(ends) + 0.05
        else:
            missing = items
            if prices == "cache_misses":
                d = lognormal(b.rng, 0.4, 0.2)
                b.span(root, "MGET prices", "Client", inst, cur, d, db__system="redis")
                cur += d + 0.05
                missing = int(b.rng.binomial(items, 0.3))
            for _ in range(missing):
                d = lognormal(b.rng, 0.6, 0.3)
                b.span(root, "SELECT prices", "Client", inst, cur, d, db__system="postgresql")
                cur += d + 0.03
        d = lognormal(b.rng, 4.0, 0.2) + 0.02 * items
        b.span(root, "render", "Internal", inst, cur, d)
        b.set_end(root, cur + d + 0.05)
    return b.frame()
