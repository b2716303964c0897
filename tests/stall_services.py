"""Services stalled in part, built from the mechanism (tests/test_diagnosis_partial_stalls.py): a producer
whose full buffer blocks every request's send until its broker acknowledges; one instance whose collector
runs back to back (a live heap near its memory limit), so its allocating steps slow while its calls do
not."""

from __future__ import annotations

import heapq

from tests.mechanism_frames import TraceBuilder, lognormal

PODS = ("api/0", "api/1", "api/2", "api/3")


def producer_service(seed: int, kind: str = "Producer", n: int = 4000, rps: float = 160.0, buffer: int = 20):
    """Four pods; a request's handler span (under the SERVER root) runs its work (~6 ms), then sends one
    ~100 KB record to a broker (a `kind` span `impressions send`, messaging attributes only on a
    Producer). The send returns once the record is in the pod's buffer of `buffer` records; the pod's
    sender drains it one record at a time at the broker's pace: ~10x the pod's arrival rate, or 0.85x
    from 20 % to 60 % of the run (a slow follower holds every acknowledgement): the buffer fills and a
    send blocks until enough records ahead of it are acknowledged."""
    b = TraceBuilder(seed)
    if kind == "Producer":  # the stage rules map messaging.* attributes to `queue`, as the loader does
        b.stages["impressions send"] = "queue"
    arrivals = b.arrivals(n, rps)
    horizon = float(arrivals[-1])
    per_pod_ms = 1000.0 / (rps / len(PODS))
    drained = {p: [] for p in PODS}  # per pod: the drain times of the records in its buffer (a heap)
    last = {p: 0.0 for p in PODS}
    attrs = {"messaging.system": "kafka", "messaging.destination.name": "impressions"}
    attrs = attrs if kind == "Producer" else {}
    for t in arrivals:
        b.new_trace()
        pod = PODS[int(b.rng.integers(len(PODS)))]
        root = b.span(None, "GET /search", "Server", pod, t, 0.0)
        handler = b.span(root, "SearchController.search", "Internal", pod, t + 0.05, 0.0)
        cur = t + 0.1
        for name, median in (("parse", 0.8), ("score", 4.0), ("render", 1.0)):
            d = lognormal(b.rng, median, 0.25)
            b.span(handler, name, "Internal", pod, cur, d)
            cur += d + 0.02
        heap = drained[pod]
        while heap and heap[0] <= cur:
            heapq.heappop(heap)
        back = cur if len(heap) < buffer else heapq.nsmallest(len(heap) - buffer + 1, heap)[-1]
        slow = 0.2 * horizon <= back < 0.6 * horizon
        each = per_pod_ms / (0.85 if slow else 10.0)
        done = max(back, last[pod]) + each
        last[pod] = done
        heapq.heappush(heap, done)
        end = back + lognormal(b.rng, 0.07, 0.2)
        b.span(handler, "impressions send", kind, pod, cur, end - cur, **attrs)
        b.set_end(handler, end + 0.3)
        b.set_end(root, end + 0.4)
    return b.frame()


def memlimit_service(seed: int, gc: str = "hot", n: int = 4000, rps: float = 150.0):
    """Four Go pods; a request decodes its body (~0.6 ms), queries a database (~16 ms round trip, an
    untraced callee), reads and parses its rows (`sql.rows`, ~1.1 ms) and re-ranks them (~1.4 ms). On
    api/3 the allocating steps (decode, rows, rerank) run ~8x slower all along (mark assists, the CPU the
    collector takes), the query does not. `gc`: "hot": the runtime reports GC cycles ~2.5 a second there
    and ~0.1 on the others (a live heap near GOMEMLIMIT); "even": ~1 a second on every pod (the
    collector is not what slows api/3: a CPU shared with a neighbour); "none": no GC reported."""
    b = TraceBuilder(seed)
    arrivals = b.arrivals(n, rps)
    slow_pod = PODS[3]
    for t in arrivals:
        b.new_trace()
        pod = PODS[int(b.rng.integers(len(PODS)))]
        x = 8.0 * lognormal(b.rng, 1.0, 0.3) if pod == slow_pod else 1.0
        root = b.span(None, "POST /v1/ask", "Server", pod, t, 0.0)
        cur = t + 0.05
        for name, kind, median, factor, attrs in (
                ("decode", "Internal", 0.6, x, {}),
                ("sql.conn.query", "Client", 16.0, 1.0, {"db.system": "postgresql"}),
                ("sql.rows", "Client", 1.1, x, {"db.system": "postgresql"}),
                ("rerank", "Internal", 1.4, x, {})):
            d = lognormal(b.rng, median, 0.3) * factor
            b.span(root, name, kind, pod, cur, d, **attrs)
            cur += d + 0.03
        b.set_end(root, cur + 0.1)
    horizon = float(arrivals[-1])
    rates = {"hot": {p: (2.5 if p == slow_pod else 0.1) for p in PODS}, "even": {p: 1.0 for p in PODS},
             "none": {}}[gc]
    events = []
    for pod, rate in rates.items():
        at = float(b.rng.exponential(1000.0 / rate))
        while at < horizon:
            events.append((pod, at, at + 0.3))
            at += float(b.rng.exponential(1000.0 / rate))
    return b.frame(gc=events or None)


def dispatcher_service(seed: int, starved: bool = True, n: int = 4000, rps: float = 360.0, threads: int = 4):
    """Four pods running each request as tasks on a dispatcher of `threads` threads: the handler asks two
    entities (INTERNAL spans, ~2 ms) and queries a database (~15 ms) side by side, then its continuation
    (a thread for ~0.3 ms) predicts (~3 ms) and publishes (~1 ms). On api/1, with `starved`, a canary build
    runs the query on the dispatcher itself: each holds a thread for the query's whole duration, and when
    they hold all of them every continuation on that pod waits for a thread (the steps run as fast as
    anywhere once they start). Without `starved`, api/1 instead stops for ~40 ms about every 400 ms (a
    collector's pauses): every step in flight there is stretched."""
    from tests.mechanism_frames import Pauses

    b = TraceBuilder(seed)
    arrivals = b.arrivals(n, rps)
    horizon = float(arrivals[-1])
    canary = PODS[1]
    stops = Pauses() if starved else Pauses({canary: [(a, a + lognormal(b.rng, 40.0, 0.2))
                                                       for a in range(300, int(horizon), 400)]})
    free = {p: [0.0] * threads for p in PODS}
    for t in arrivals:
        b.new_trace()
        pod = PODS[int(b.rng.integers(len(PODS)))]
        pool = free[pod]
        root = b.span(None, "GET /eta", "Server", pod, t, 0.0)
        ends = []
        for name, median in (("ask Restaurant", 2.0), ("ask Courier", 1.5)):
            s = t + 0.1
            e = stops.run(pod, s, lognormal(b.rng, median, 0.3))
            b.span(root, name, "Internal", pod, s, e - s)
            ends.append(e)
        q = lognormal(b.rng, 15.0, 0.4)
        qs = t + 0.15
        if starved and pod == canary:  # the query blocks a dispatcher thread while it runs
            got = max(qs, heapq.heappop(pool))
            heapq.heappush(pool, got + q)
            qs = got
        qe = stops.run(pod, qs + q, 0.0)
        b.span(root, "SELECT prep_time", "Client", pod, qs, qe - qs, **{"db.system": "postgresql"})
        ends.append(qe)
        ready = max(ends)
        got = max(ready, heapq.heappop(pool))  # the continuation waits for a dispatcher thread
        cont = stops.run(pod, got, lognormal(b.rng, 0.3, 0.2))
        heapq.heappush(pool, cont)
        cur = cont
        for name, median in (("EtaModel.predict", 3.0), ("quotes publish", 1.0)):
            e = stops.run(pod, cur, lognormal(b.rng, median, 0.25))
            b.span(root, name, "Internal", pod, cur, e - cur)
            cur = e + 0.02
        b.set_end(root, cur + 0.05)
    return b.frame()
