"""A client that names every HTTP call alike (`HTTP POST`, as some HTTP client libraries do), built from
the mechanism (tests/test_diagnosis_same_name_calls.py): on a cache miss a request first asks a peer's
embed operation (a steady ~17 ms) and then its search operation, two calls of one name to one peer; or,
the twin, a search attempt is cut by a 17 ms client deadline and the same search is sent again."""

from __future__ import annotations

from tests.mechanism_frames import TraceBuilder, lognormal


def same_name_calls(seed: int, retries: bool, n: int = 4000, rps: float = 60.0, rate: float = 0.03):
    """`shop` (3 pods) serves `GET /similar`: with probability `rate`, either (not `retries`) an embed
    call (`POST /v1/embed` on `ann`, 17 ms +- 1 %) before the search, or (`retries`) a first search
    attempt the client gives up on at 17 ms (the server's span runs on to ~40 ms) before the search
    that answers; then the search (`POST /v1/search`, ~5 ms) and `rank` (~3 ms)."""
    b = TraceBuilder(seed)
    b.stages.update({"HTTP POST": "downstream", "rank": "postprocessing"})
    for i, t in enumerate(b.arrivals(n, rps)):
        b.new_trace()
        pod, peer = f"shop/{i % 3}", f"ann/{i % 2}"
        root = b.span(None, "GET /similar", "Server", pod, t, 0.0)
        cur = t + 0.5
        if b.rng.random() < rate:
            d = lognormal(b.rng, 17.0, 0.01)
            cli = b.span(root, "HTTP POST", "Client", pod, cur, d)
            b.span(cli, "POST /v1/search" if retries else "POST /v1/embed", "Server", peer, cur + 0.3,
                   lognormal(b.rng, 40.0, 0.2) if retries else d - 0.6)
            cur += d + 0.2
        d = lognormal(b.rng, 5.0, 0.25)
        cli = b.span(root, "HTTP POST", "Client", pod, cur, d + 0.6)
        b.span(cli, "POST /v1/search", "Server", peer, cur + 0.3, d)
        cur += d + 0.8
        d = lognormal(b.rng, 3.0, 0.2)
        b.span(root, "rank", "Internal", pod, cur, d)
        b.set_end(root, cur + d + 0.2)
    return b.frame()
