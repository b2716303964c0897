"""A store that stops now and then (a Redis primary whose AOF writes block on a degraded disk) behind a
feature server with a small worker pool: the server's workers all wait on it, new calls queue for a
worker, and when the store answers everything is released at once, at every level above it. The cause
is the store (slow_dependency at its calls), not a pause of the server or of its callers, and not a
connection pool on the callers' side: the callers' long calls are the server's own time."""

from __future__ import annotations

import numpy as np

from tailscope.analysis.diagnosis import diagnose_frame
from tests.mechanism_frames import TraceBuilder, lognormal

WORKERS = 4


def stopping_store_service(seed: int = 7, n: int = 4000, rps: float = 260.0):
    b = TraceBuilder(seed)
    arrive = b.arrivals(n, rps)
    stops, t = [], float(b.rng.uniform(0, 500))
    while t < arrive[-1] + 1000:
        length = float(b.rng.uniform(60.0, 250.0))
        stops.append((t, t + length))
        t += length + float(b.rng.uniform(300.0, 900.0))
    free = {f"features/{k}": [0.0] * WORKERS for k in range(2)}
    for j, a in enumerate(arrive.tolist()):
        b.new_trace()
        gw, srv = f"gw/{int(b.rng.integers(3))}", f"features/{j % 2}"
        root = b.span(None, "POST /v1/search", "Server", gw, a, 0.0, service="gw")
        parse = a + lognormal(b.rng, 0.3, 0.2)
        b.span(root, "search.parse", "Internal", gw, a + 0.05, parse - a - 0.05, service="gw")
        sent = parse + 0.05
        k = int(np.argmin(free[srv]))
        start = max(sent + lognormal(b.rng, 0.3, 0.2), free[srv][k])
        read = start + 0.2
        done = read + lognormal(b.rng, 1.0, 0.3)
        for p0, p1 in stops:
            if p0 <= done and read < p1:  # the store answers nothing while stopped
                done = p1 + 0.05 * float(b.rng.random())
                break
        end = done + lognormal(b.rng, 1.5, 0.2)
        free[srv][k] = end
        back = end + lognormal(b.rng, 0.3, 0.2)
        call = b.span(root, "POST", "Client", gw, sent, back - sent, service="gw",
                      **{"server.address": "features.svc"})
        handler = b.span(call, "POST /get-features", "Server", srv, start, end - start, service="features")
        b.span(handler, "HMGET", "Client", srv, read, done - read, service="features",
               **{"db.system": "redis", "server.address": "redis-2"})
        b.span(handler, "features.merge", "Internal", srv, done + 0.05, end - done - 0.1, service="features")
        fin = back + lognormal(b.rng, 12.0, 0.2)  # the caller does work of its own: no proxy
        b.span(root, "search.encode", "Internal", gw, back + 0.02, fin - back - 0.02, service="gw")
        b.set_end(root, fin + 0.05)
    return b.frame()


def test_a_stopping_store_behind_a_small_pool_is_the_store_s() -> None:
    result = diagnose_frame(stopping_store_service())
    found = [(f.pattern, f.span_name, round(f.confidence, 2)) for f in result.findings]
    assert result.findings[0].pattern == "slow_dependency", found
    wrong = [f for f in found if f[0] in ("gc_pause", "lock_contention", "cpu_throttling") and f[2] >= 0.5]
    assert not wrong, found
