"""A retrieval service whose fixed worker pool also serves a client that is not traced (its calls show as
SERVER spans with no parent), built from the mechanism (tests/test_diagnosis_shared_pool.py): when that
client's heavy calls fill the pool, the traced callers' calls wait for a worker before their SERVER span
starts, and the wait grows with every call the instance runs, traced or not; or, the twin, the wire
drops some packets and a few calls arrive late whatever the pool is doing."""

from __future__ import annotations

import heapq

from tests.mechanism_frames import TraceBuilder, lognormal

WORKERS = 4


def shared_pool_service(seed: int, saturated: bool, n: int = 3000, rps: float = 40.0):
    """`shop` (3 pods) serves `GET /similar` and calls `ann.Search` on `ann` (2 pods, 4 workers each,
    first come first served, ~5 ms a call). An untraced batch client sends `ann.Search` calls of ~40 ms
    straight to each pod: 90 a second during a third of the run with `saturated` (the pool ~90 % busy),
    10 a second otherwise; without `saturated`, 5 % of the traced calls lose a packet on the way (a
    40-80 ms retransmit before the server sees them)."""
    b = TraceBuilder(seed)
    b.stages.update({"ann.Search": "downstream", "rank": "postprocessing"})
    horizon = n / rps * 1000.0
    calls = []  # (arrival at the pod, pod, traced request index or -1, work ms)
    sends = []
    for i, t in enumerate(b.arrivals(n, rps)):
        pod = f"ann/{i % 2}"
        wire = 0.3 + (float(b.rng.uniform(40.0, 80.0)) if not saturated and b.rng.random() < 0.05 else 0.0)
        sends.append((t, pod, wire))
        calls.append((t + 1.0 + wire, pod, i, lognormal(b.rng, 5.0, 0.25)))
    for k in range(2):
        t = 0.0
        while t < horizon:
            busy_part = saturated and (horizon / 3 <= t < 2 * horizon / 3)
            t += float(b.rng.exponential(1000.0 / (90.0 if busy_part else 10.0)))
            calls.append((t, f"ann/{k}", -1, lognormal(b.rng, 40.0, 0.2)))
    calls.sort()
    free = {f"ann/{k}": [0.0] * WORKERS for k in range(2)}
    served = {}
    for arrive, pod, req, work in calls:
        start = max(arrive, heapq.heappop(free[pod]))
        heapq.heappush(free[pod], start + work)
        if req < 0:
            b.new_trace()
            b.span(None, "ann.Search", "Server", pod, start, work)
        else:
            served[req] = (start, work)
    for i, (t, pod, _wire) in enumerate(sends):
        b.new_trace()
        root = b.span(None, "GET /similar", "Server", f"shop/{i % 3}", t, 0.0)
        cli = b.span(root, "ann.Search", "Client", f"shop/{i % 3}", t + 1.0, 0.0)
        start, work = served[i]
        b.span(cli, "ann.Search", "Server", pod, start, work)
        b.set_end(cli, start + work + 0.3)
        d = lognormal(b.rng, 3.0, 0.2)
        b.span(root, "rank", "Internal", f"shop/{i % 3}", start + work + 0.5, d)
        b.set_end(root, start + work + 0.6 + d)
    return b.frame()
