"""A Rails-like service whose threads share a per-process connection pool, built from the mechanism
(tests/test_diagnosis_pool_checkout.py): a request leases a connection at its first query and holds it
until it ends, with no span for the checkout. With more threads than connections, requests wait
before their first query while slow queries hold the connections; the twin has enough connections but
stops its process now and then (a pause), which also delays first queries."""

from __future__ import annotations

import numpy as np

from tests.mechanism_frames import Pauses, TraceBuilder, lognormal

PROCESSES = ("web/0", "web/1", "web/2")


def pooled_threads_service(
    seed: int,
    connections: int,
    pauses: bool = False,
    n: int = 4000,
    rps: float = 150.0,
    threads: int = 5,
    slow_queries: bool = True,
):
    """Each process runs `threads` threads and a pool of `connections`; a request authenticates
    (0.3 ms), queries `SELECT users` (~1 ms: the lease starts), calls `search` (~15 ms), queries
    `SELECT products` (~2 ms, +100 ms from 30 % to 70 % of the run with `slow_queries`) and renders
    (~3 ms); its lease and thread are given back when it ends. With `pauses`, each process stops for
    ~80 ms about every 0.3 s."""
    b = TraceBuilder(seed)
    times = b.arrivals(n, rps)
    horizon = float(times[-1])
    stops = Pauses(
        {
            p: [
                (a, a + lognormal(b.rng, 80.0, 0.2))
                for a in np.arange(500.0, horizon, 300.0)
                + b.rng.uniform(0, 100, len(np.arange(500.0, horizon, 300.0)))
            ]
            for p in PROCESSES
        }
        if pauses
        else None
    )
    free_thread = {p: [0.0] * threads for p in PROCESSES}
    free_conn = {p: [0.0] * connections for p in PROCESSES}
    for i, t in enumerate(times):
        b.new_trace()
        pod = PROCESSES[i % 3]
        slots = free_thread[pod]
        k = int(np.argmin(slots))
        start = max(t, slots[k])
        root = b.span(None, "GET /recs", "Server", pod, start, 0.0)

        def run(at: float, ms: float, pod: str = pod) -> float:
            return stops.run(pod, at, ms) if stops else at + ms

        cur = run(start, 0.3)
        conns = free_conn[pod]
        c = int(np.argmin(conns))
        cur = max(cur, conns[c])  # the checkout: no span
        d = lognormal(b.rng, 1.0, 0.2)
        b.span(root, "SELECT users", "Client", pod, cur, d, db__system="postgresql")
        cur = run(cur + d, 0.05)
        d = lognormal(b.rng, 15.0, 0.3)
        b.span(root, "search", "Client", pod, cur, d)
        cur = run(cur + d, 0.05)
        d = lognormal(b.rng, 2.0, 0.2) + (
            lognormal(b.rng, 100.0, 0.3) if slow_queries and 0.3 < t / horizon < 0.7 else 0.0
        )
        b.span(root, "SELECT products", "Client", pod, cur, d, db__system="postgresql")
        cur = run(cur + d, 0.05)
        end = run(cur, lognormal(b.rng, 3.0, 0.2))
        b.span(root, "render", "Internal", pod, cur, end - cur)
        b.set_end(root, end + 0.05)
        slots[k] = conns[c] = end + 0.05
    return b.frame()
