"""Services whose feature lookup reads a key-value store that is also used as a cache (db.system
redis), built from the mechanism (tests/test_diagnosis_cache_store.py): either the store itself
answers slowly at times (a shard blocked while its slots migrate: the same call, only longer), or the
lookup misses and takes another path (a database read, then a write-back). Both give the lookup the
same two duration modes; only the second is a cache miss."""

from __future__ import annotations

from tests.mechanism_frames import TraceBuilder, lognormal
from tests.mechanism_services import work_spans


def feature_store_service(seed: int, blocked_shard: bool, n: int = 3000, rps: float = 150.0):
    """Each request's `load_features` sends `HMGET` then `LRANGE` to redis. With `blocked_shard`, the
    15 % of keys on a shard being migrated wait ~40 ms for it (the commands are the same, their replies
    late); otherwise 15 % of lookups miss: `HMGET` answers empty as fast as ever, the features are read
    from the database (`SELECT features`, ~35 ms) and written back (`HSET`)."""
    b = TraceBuilder(seed)
    for t in b.arrivals(n, rps):
        b.new_trace()
        inst = f"api/{int(b.rng.integers(3))}"
        root = b.span(None, "POST /score", "Server", inst, t, 0.0)
        cur = t + 0.05
        odd = b.rng.random() < 0.15
        look = b.span(root, "load_features", "Internal", inst, cur, 0.0)
        cur += 0.03
        for command in ("HMGET", "LRANGE"):
            d = lognormal(b.rng, 0.3, 0.2) + (lognormal(b.rng, 40.0, 0.3) if odd and blocked_shard else 0.0)
            b.span(look, command, "Client", inst, cur, d, db__system="redis")
            cur += d + 0.02
            if command == "HMGET" and odd and not blocked_shard:
                d = lognormal(b.rng, 35.0, 0.3)
                b.span(look, "SELECT features", "Client", inst, cur, d, db__system="postgresql")
                cur += d + 0.02
                d = lognormal(b.rng, 0.3, 0.2)
                b.span(look, "HSET", "Client", inst, cur, d, db__system="redis")
                cur += d + 0.02
        b.set_end(look, cur)
        cur = work_spans(b, root, inst, cur + 0.02)
        b.set_end(root, cur + 0.05)
    return b.frame()
