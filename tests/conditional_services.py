"""Services built from a mechanism for the conditional-path rules (test_diagnosis_conditional.py): a
scorer that reads three profiles from a Redis cache and, per missing profile, queries the database
under the same span name as the query every request makes; whose model sends a fifth of the requests
(the grey zone) to a third-party vendor behind a client deadline and one retry. Healthy, it has a
steady miss rate and a vendor with a heavy tail; an eviction wave empties the cache for a third of
the run; vendor slow periods cut attempts at the deadline. Timings from what the mechanism does."""

from __future__ import annotations

from tests.mechanism_frames import Pauses, TraceBuilder, lognormal

PODS = ("scorer/0", "scorer/1", "scorer/2")
DEADLINE_MS = 300.0


def profile_scorer(seed: int, n: int = 3000, rps: float = 150.0, miss_rate: float = 0.02,
                   wave: bool = False, vendor_slow: bool = False, recycle: bool = False):
    """POST /score: `fetch_features` (Redis `MGET` of 3 profiles, the velocity query `SELECT fraud`,
    then per missing profile an aggregate `SELECT fraud` of 20-50 ms and a Redis `SET`), the model
    (`model.predict`, model_forward), for 20 % of requests `vendor.check` (a CLIENT `POST` to
    api.vendor.example, lognormal 40 ms with a heavy tail), the decision `INSERT fraud`. With `wave`,
    each profile misses with probability 0.6 in the middle third of the run (evictions); with
    `vendor_slow`, the vendor answers in ~330 ms in three periods of 5 % of the run each: attempts end
    at the 300 ms deadline with an error and are made again 50 ms later. With `recycle`, each pod's
    process is replaced every ~1.5 s: the new one opens its database connection at its first query
    (`connect`, ~150 ms with its TLS and login, to the same database)."""
    b = TraceBuilder(seed)
    b.stages.update({"model.predict": "model_forward", "fetch_features": "feature_hydration"})
    times = b.arrivals(n, rps)
    horizon = float(times[-1])
    slow_periods = [(horizon * a, horizon * (a + 0.05)) for a in (0.15, 0.45, 0.75)] if vendor_slow else []
    restart = {pod: 1500.0 * b.rng.random() for pod in PODS}
    for i, t in enumerate(times):
        b.new_trace()
        pod = PODS[i % len(PODS)]
        fresh = recycle and t >= restart[pod]
        if fresh:
            restart[pod] = t + 1200.0 + 600.0 * b.rng.random()
        root = b.span(None, "POST /score", "Server", pod, t, 0.0, **{"http.route": "/score"})
        cur = t + 0.1
        fetch = b.span(root, "fetch_features", "Internal", pod, cur, 0.0)
        d = lognormal(b.rng, 0.5, 0.3)
        b.span(fetch, "MGET", "Client", pod, cur, d, **{"db.system": "redis"})
        cur += d + 0.05
        if fresh:  # a new process: its first query opens the connection
            d = lognormal(b.rng, 150.0, 0.2)
            b.span(fetch, "connect", "Client", pod, cur, d, **{"db.system": "postgresql"})
            cur += d + 0.05
        d = lognormal(b.rng, 2.0, 0.3)
        b.span(fetch, "SELECT fraud", "Client", pod, cur, d, **{"db.system": "postgresql"})
        cur += d + 0.05
        rate = 0.6 if wave and horizon / 3 <= t < 2 * horizon / 3 else miss_rate
        for _ in range(3):
            if b.rng.random() < rate:
                d = 20.0 + 30.0 * b.rng.random()
                b.span(fetch, "SELECT fraud", "Client", pod, cur, d, **{"db.system": "postgresql"})
                cur += d + 0.05
                d = lognormal(b.rng, 0.4, 0.3)
                b.span(fetch, "SET", "Client", pod, cur, d, **{"db.system": "redis"})
                cur += d + 0.05
        b.set_end(fetch, cur)
        d = lognormal(b.rng, 4.0, 0.15)
        b.span(root, "model.predict", "Internal", pod, cur, d)
        cur += d + 0.05
        if b.rng.random() < 0.2:
            cur = _vendor(b, root, pod, cur, any(a <= t < z for a, z in slow_periods))
        d = lognormal(b.rng, 1.5, 0.3)
        b.span(root, "INSERT fraud", "Client", pod, cur, d, **{"db.system": "postgresql"})
        b.set_end(root, cur + d + 0.1)
    return b.frame()


def _vendor(b: TraceBuilder, root: int, pod: str, cur: float, slow: bool) -> float:
    """The vendor check: one attempt, or an attempt cut at the deadline and one more 50 ms later."""
    check = b.span(root, "vendor.check", "Internal", pod, cur, 0.0)
    cur += 0.05
    for attempt in range(2):
        d = lognormal(b.rng, 330.0, 0.15) if slow else lognormal(b.rng, 40.0, 0.5)
        cut = d >= DEADLINE_MS
        d = min(d, DEADLINE_MS)
        b.span(check, "POST", "Client", pod, cur, d, **{"server.address": "api.vendor.example",
                                                        "http.response.status_code": 0 if cut else 200,
                                                        "error": cut})
        cur += d + 0.05
        if not cut or attempt == 1:
            break
        cur += 50.0
    b.set_end(check, cur)
    return cur + 0.05


def paused_worker_behind_callers(seed: int, n: int = 4000, rps: float = 150.0, pause: bool = True):
    """Three caller pods (`POST` CLIENT) call a scorer of three single-process pods (SERVER `POST
    /score`: `features` 2 ms, `predict` 4 ms). With `pause`, the process of pod 0 stops for ~250 ms
    every ~2 s (a collection, reported nowhere): a call sent meanwhile is read once it runs again, the
    held calls one after the other (~1 ms each, the loop reading them in turn). Without, pod 0's node
    delays 6 % of the packets sent to it by ~150 ms (the wire: each on its own)."""
    b = TraceBuilder(seed)
    b.stages.update({"predict": "model_forward"})
    pauses, t = [], 500.0
    while t < n / rps * 1000.0 + 1000.0:
        pauses.append((t, t + lognormal(b.rng, 250.0, 0.2)))
        t += 1500.0 + 1000.0 * b.rng.random()
    released: dict[float, int] = {}  # calls held by each pause, read in turn once it ends
    for i, t in enumerate(b.arrivals(n, rps)):
        b.new_trace()
        caller, pod = f"api/{i % 3}", PODS[int(b.rng.integers(3))]
        start = t + lognormal(b.rng, 0.3, 0.2)
        if pod == PODS[0]:
            if pause:
                held = [z for a, z in pauses if a <= start < z]
                if held:
                    released[held[0]] = released.get(held[0], 0) + 1
                    start = held[0] + 1.0 * released[held[0]]
            elif b.rng.random() < 0.06:
                start += lognormal(b.rng, 150.0, 0.3)
        call = b.span(None, "POST", "Client", caller, t, 0.0, service="api")
        root = b.span(call, "POST /score", "Server", pod, start, 0.0)
        cur = start + 0.1
        for name, median in (("features", 2.0), ("predict", 4.0)):
            d = lognormal(b.rng, median, 0.2)
            b.span(root, name, "Internal", pod, cur, d)
            cur += d + 0.05
        b.set_end(root, cur)
        b.set_end(call, cur + lognormal(b.rng, 0.3, 0.2))
    return b.frame()


def paused_caller(seed: int, n: int = 4000, rps: float = 200.0):
    """A scorer of three pods whose processes stop for ~120 ms every ~1.5 s (a collection, reported as
    GC events): each request runs `parse` (1 ms), calls a profile store (`GET profile` CLIENT, ~15 ms,
    the store itself steady) and runs `predict` (4 ms, model_forward). A call in flight during a stop
    ends when the process runs again (its reply is read late): its time is the caller's stall."""
    b = TraceBuilder(seed)
    b.stages.update({"predict": "model_forward"})
    horizon = n / rps * 1000.0 + 1000.0
    stops, gc = {}, []
    for pod in PODS:
        t, mine = 300.0 + 500.0 * b.rng.random(), []
        while t < horizon:
            mine.append((t, t + lognormal(b.rng, 120.0, 0.2)))
            gc.append((pod, *mine[-1]))
            t = mine[-1][1] + 1200.0 + 600.0 * b.rng.random()
        stops[pod] = mine
    pauses = Pauses(stops)
    for i, t in enumerate(b.arrivals(n, rps)):
        b.new_trace()
        pod = PODS[i % 3]
        root = b.span(None, "POST /score", "Server", pod, t, 0.0)
        cur = pauses.run(pod, t + 0.05, 0.0)
        end = pauses.run(pod, cur, lognormal(b.rng, 1.0, 0.2))
        b.span(root, "parse", "Internal", pod, cur, end - cur)
        cur = end + 0.05
        end = pauses.run(pod, cur + lognormal(b.rng, 15.0, 0.1), 0.05)  # the reply, read by the process
        b.span(root, "GET profile", "Client", pod, cur, end - cur, **{"server.address": "profiles"})
        cur = end + 0.05
        end = pauses.run(pod, cur, lognormal(b.rng, 4.0, 0.15))
        b.span(root, "predict", "Internal", pod, cur, end - cur)
        b.set_end(root, end + 0.05)
    return b.frame(gc=gc)


def batch_worker(seed: int, n: int = 3000, rps: float = 40.0):
    """A worker taking one or two events per poll (a third of the polls two): `process batch` runs
    `handle_event` (in-process, ~40 ms) once per event, then the poll's `ack` (a call to the broker)."""
    b = TraceBuilder(seed)
    for i, t in enumerate(b.arrivals(n, rps)):
        b.new_trace()
        pod = PODS[i % 3]
        root = b.span(None, "poll", "Server", pod, t, 0.0)
        batch = b.span(root, "process batch", "Internal", pod, t + 0.1, 0.0)
        cur = t + 0.2
        for _ in range(2 if b.rng.random() < 1 / 3 else 1):
            d = lognormal(b.rng, 40.0, 0.1)
            b.span(batch, "handle_event", "Internal", pod, cur, d)
            cur += d + 0.05
        b.set_end(batch, cur)
        d = lognormal(b.rng, 1.0, 0.2)
        b.span(root, "ack", "Client", pod, cur, d, **{"messaging.system": "kafka"})
        b.set_end(root, cur + d + 0.05)
    return b.frame()
