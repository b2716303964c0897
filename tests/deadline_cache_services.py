"""A handler beside a working cache that calls an outside API on some requests, built from the
mechanism (tests/test_diagnosis_deadline_cache.py): every request reads a cache (a fast `get` to a
Redis-like store, a hit); a third of them also call an API that, from the middle of the run on, answers
slowly; a client deadline cuts an attempt at 250 ms with an error and the call is made once again.
The twin: the same handler whose cache starts missing at one moment, each miss fetching from the store
(a call made on the slow path only, no deadline, no retry)."""

from __future__ import annotations

from tests.mechanism_frames import TraceBuilder, lognormal

DEADLINE = 250.0


def _cache_read(b: TraceBuilder, root: int, pod: str, cur: float) -> float:
    """The handler's cache read (`get` to a Redis-like store, a hit, ~0.6 ms) from `cur`: when the
    handler goes on."""
    d = lognormal(b.rng, 0.6, 0.2)
    b.span(root, "get", "Client", pod, cur, d, db__system="redis", net__peer__name="redis.svc",
           peer__service="redis")
    return cur + d + 0.2


def _render(b: TraceBuilder, root: int, pod: str, cur: float) -> None:
    """The handler's last step (`render`, ~8 ms) from `cur`, and the request's end after it."""
    d = lognormal(b.rng, 8.0, 0.2)
    b.span(root, "render", "Internal", pod, cur, d)
    b.set_end(root, cur + d + 0.2)


def deadline_beside_cache(seed: int, same_name: bool, late_timers: float = 0.0, late_errors: bool = True,
                          n: int = 3000, rps: float = 40.0):
    """`mod` (3 pods) serves `POST /moderate`: a cache read (`get`, Redis, ~0.6 ms), then for 35 % of
    requests the API call (`GET`, or `get` where `same_name`: a client convention that names both by
    the method) to api.example, ~25 ms until half way, then ~120 ms (sigma 0.7) cut at the 250 ms
    deadline with an error, then a second attempt (cut the same way). `late_timers`: the share of
    the cut attempts whose timer fires 20-60 ms late (the process was busy or paused): they end in error
    past the deadline where `late_errors`, else they end as answers (no deadline at all)."""
    b = TraceBuilder(seed)
    api = "get" if same_name else "GET"
    b.stages.update({"get": "downstream", api: "downstream", "render": "postprocessing"})
    arrivals = b.arrivals(n, rps)
    change = arrivals[len(arrivals) // 2]
    for i, t in enumerate(arrivals):
        b.new_trace()
        pod = f"mod/{i % 3}"
        root = b.span(None, "POST /moderate", "Server", pod, t, 0.0)
        cur = _cache_read(b, root, pod, t + 0.3)
        if b.rng.random() < 0.35:
            for _attempt in range(2):
                d = lognormal(b.rng, 120.0, 0.7) if t >= change else lognormal(b.rng, 25.0, 0.3)
                cut = d >= DEADLINE
                if cut:
                    d = DEADLINE + (b.rng.uniform(20, 60) if b.rng.random() < late_timers else 0.0)
                error = cut and (late_errors or d <= DEADLINE)
                b.span(root, api, "Client", pod, cur, d, net__peer__name="api.example",
                       http__method="GET", otel__status_code="ERROR" if error else "UNSET")
                cur += d + 0.3
                if not cut:
                    break
        _render(b, root, pod, cur)
    return b.frame()


def cache_starts_missing(seed: int, n: int = 3000, rps: float = 40.0):
    """The twin: every request reads the cache (`get`, ~0.6 ms); from the middle of the run 25 % of the
    reads miss (the keys expired at once) and the handler fetches from the store (`GET` to
    store.example, ~150 ms, no deadline, no retry) before rendering."""
    b = TraceBuilder(seed)
    b.stages.update({"get": "downstream", "GET": "downstream", "render": "postprocessing"})
    arrivals = b.arrivals(n, rps)
    change = arrivals[len(arrivals) // 2]
    for i, t in enumerate(arrivals):
        b.new_trace()
        pod = f"mod/{i % 3}"
        root = b.span(None, "POST /moderate", "Server", pod, t, 0.0)
        cur = _cache_read(b, root, pod, t + 0.3)
        if t >= change and b.rng.random() < 0.25:
            d = lognormal(b.rng, 150.0, 0.3)
            b.span(root, "GET", "Client", pod, cur, d, net__peer__name="store.example", http__method="GET")
            cur += d + 0.3
        _render(b, root, pod, cur)
    return b.frame()
