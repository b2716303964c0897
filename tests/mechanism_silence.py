"""Many requests slow together with and without a stopped process, built from a mechanism for issue
25's rule tests (test_diagnosis_silence.py): a model server's dynamic batcher behind which requests
queue while a co-tenant's burst fills the batches (the server keeps accepting and finishing work), a
light ingest whose fire-and-forget publish outlives its sub-millisecond requests (idle between
requests), and an orchestrator (a JVM) that calls two traced services and pauses for 40-180 ms."""

from __future__ import annotations

import numpy as np

from tests.mechanism_frames import Pauses, TraceBuilder, lognormal


def _batches(arrivals: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One executor's dynamic batcher: a batch takes up to 32 of the requests waiting when it starts
    (0.5 ms after the first one where the executor is idle) and runs 2 ms + 0.3 ms per member. Per
    arrival (sorted): its batch's start, end and size."""
    start, end, size = (np.zeros(len(arrivals)) for _ in range(3))
    free, i = 0.0, 0
    while i < len(arrivals):
        begin = max(free, arrivals[i] + 0.5)
        j = min(int(np.searchsorted(arrivals, begin, side="right")), i + 32)
        k = j - i
        done = begin + lognormal(rng, 2.0 + 0.3 * k, 0.05)
        start[i:j], end[i:j], size[i:j] = begin, done, k
        free, i = done, j
    return start, end, size


def batcher_queue(seed: int):
    """An API (three instances: its own work, a call to a feature service, one to the model server) in
    front of a model
    server (two instances, one executor each) whose batches are shared with an untraced co-tenant.
    The co-tenant bursts twice past what full batches serve (2,760 requests/s): queues grow to tens of
    ms and batches run full (11.6 ms, no batch size reported), while the server keeps accepting
    requests and ending batches."""
    b = TraceBuilder(seed)
    n, rps = 3000, 150.0
    times = b.arrivals(n, rps)
    span_ms = float(times[-1])
    server_of = b.rng.integers(2, size=n)
    work = np.array([lognormal(b.rng, 1.5, 0.2) for _ in range(n)])
    features = np.array([lognormal(b.rng, 5.0, 0.2) for _ in range(n)])
    reach = times + 0.1 + work + features + 0.9  # when each traced request reaches the model server
    batch = np.zeros((n, 3))
    for s in range(2):
        t, out = 0.0, []
        while t < span_ms + 1000.0:
            burst = any(a <= t < a + 0.06 * span_ms for a in (0.3 * span_ms, 0.7 * span_ms))
            t += b.rng.exponential(1000.0 / (3300.0 if burst else 600.0))
            out.append(t)
        mine = np.nonzero(server_of == s)[0]
        every = np.r_[reach[mine], out]
        order = np.argsort(every, kind="stable")
        got = np.stack(_batches(every[order], b.rng), axis=1)
        placed = np.empty_like(got)
        placed[order] = got
        batch[mine] = placed[: len(mine)]
    for r, t in enumerate(times):
        b.new_trace()
        api = f"api/{int(b.rng.integers(3))}"
        root = b.span(None, "POST /rank", "Server", api, t, 0.0)
        b.span(root, "featurize", "Internal", api, t + 0.05, work[r])
        cur = t + 0.1 + work[r]
        call = b.span(root, "GetFeatures", "Client", api, cur, features[r] + 0.6)
        b.span(call, "GetFeatures", "Server", f"features/{int(b.rng.integers(2))}", cur + 0.3, features[r])
        cur += features[r] + 0.65
        server = f"model/{int(server_of[r])}"
        start, end, _ = batch[r]
        call = b.span(root, "ModelInfer", "Client", api, cur, end + 0.3 - cur)
        srv = b.span(call, "ModelInfer", "Server", server, reach[r], end + 0.05 - reach[r])
        b.span(srv, "batcher.queue", "Internal", server, reach[r] + 0.02, start - reach[r] - 0.02)
        b.span(srv, "model.execute", "Internal", server, start, end - start)  # no batch size reported
        cur = end + 0.35
        ser = lognormal(b.rng, 0.8, 0.2)
        b.span(root, "serialize", "Internal", api, cur, ser)
        b.set_end(root, cur + ser + 0.05)
    b.stages["batcher.queue"] = "queue"
    b.stages["model.execute"] = "model_forward"
    return b.frame()


def idle_ingest(seed: int):
    """An ingest (three instances, 40 requests/s each) answers in ~0.6 ms: validate, then hand the
    event to a producer that lingers up to 5 ms for a batch and ends when the broker acknowledges,
    after the response. Nothing stalls; between requests the process is idle."""
    b = TraceBuilder(seed)
    for t in b.arrivals(4000, 120.0):
        b.new_trace()
        inst = f"ingest/{int(b.rng.integers(3))}"
        root = b.span(None, "POST /events", "Server", inst, t, 0.0)
        v0 = t + lognormal(b.rng, 0.08, 0.3)
        v1 = v0 + lognormal(b.rng, 0.3, 0.3)
        b.span(root, "validate", "Internal", inst, v0, v1 - v0)
        send = v1 + lognormal(b.rng, 0.04, 0.3)
        ack = send + b.rng.uniform(0.0, 5.0) + lognormal(b.rng, 1.6, 0.3)
        b.span(root, "events publish", "Producer", inst, send, ack - send)
        b.set_end(root, send + lognormal(b.rng, 0.2, 0.3))
    return b.frame()


def paused_orchestrator(seed: int):
    """An orchestrator (three JVM instances) runs a lookup of its own, calls a feature service and a
    model server (both traced, never paused), then serialises. Its runtime stops for 40-180 ms every
    0.4-1.5 s: the calls' replies are read when it runs again, its own steps in flight are stretched,
    and requests that arrive meanwhile are accepted after it (their client's span starts on time).
    No GC events are reported."""
    b = TraceBuilder(seed)
    n, rps = 4000, 600.0
    until = n / rps * 1000.0 + 1000.0
    insts = [f"orchestrator/{k}" for k in range(3)]
    stalls = {}
    for inst in insts:
        t, out = b.rng.uniform(0, 400), []
        while t < until:
            length = b.rng.uniform(40.0, 180.0)
            out.append((t, t + length))
            t += length + b.rng.uniform(400.0, 1500.0)
        stalls[inst] = out
    pauses = Pauses(stalls)
    for t in b.arrivals(n, rps):
        b.new_trace()
        inst = insts[int(b.rng.integers(3))]
        edge = b.span(None, "egress", "Client", f"ingress/{int(b.rng.integers(2))}", t, 0.0)
        start = pauses.run(inst, t + 0.2, 0.0)
        root = b.span(edge, "GET /recommendations", "Server", inst, start, 0.0)
        cur = start + 0.05
        end = pauses.run(inst, cur, lognormal(b.rng, 1.0, 0.3))
        b.span(root, "lookup", "Internal", inst, cur, end - cur)
        cur = end + 0.05
        for name, peer, median in (("GetFeatures", "features", 4.0), ("ModelInfer", "model", 3.0)):
            work = lognormal(b.rng, median, 0.25)
            back = pauses.run(inst, cur + work + 0.4, 0.02)  # the reply is read when the JVM runs
            call = b.span(root, name, "Client", inst, cur, back - cur)
            b.span(call, name, "Server", f"{peer}/{int(b.rng.integers(2))}", cur + 0.2, work)
            cur = back + 0.05
        end = pauses.run(inst, cur, lognormal(b.rng, 1.2, 0.25))
        b.span(root, "serialize", "Internal", inst, cur, end - cur)
        b.set_end(root, end + 0.05)
        b.set_end(edge, end + 0.3)
    return b.frame()


def paused_single_worker(seed: int):
    """Single-threaded workers (three processes, one request at a time, the others waiting for the
    worker): decode (0.5 ms), predict (13 ms, most of the time) and a call to a traced profile store
    (4 ms). The interpreter stops for 80-250 ms every 0.4-1.2 s: the pause mostly lands in predict,
    and now and then in the call, whose reply is then read late by as much. No GC events."""
    b = TraceBuilder(seed)
    workers = [f"worker/{k}" for k in range(3)]
    n, rps = 3000, 90.0
    until = n / rps * 1000.0 + 2000.0
    stalls = {}
    for w in workers:
        t, out = b.rng.uniform(0, 400), []
        while t < until:
            length = b.rng.uniform(80.0, 250.0)
            out.append((t, t + length))
            t += length + b.rng.uniform(400.0, 1200.0)
        stalls[w] = out
    pauses = Pauses(stalls)
    free = dict.fromkeys(workers, 0.0)
    for t in b.arrivals(n, rps):
        b.new_trace()
        w = workers[int(b.rng.integers(3))]
        start = pauses.run(w, max(t, free[w]), 0.0)
        root = b.span(None, "POST /enrich", "Server", w, start, 0.0)
        cur = start + 0.05
        for name, median in (("decode", 0.5), ("predict", 13.0)):
            end = pauses.run(w, cur, lognormal(b.rng, median, 0.15))
            b.span(root, name, "Internal", w, cur, end - cur)
            cur = end + 0.02
        work = lognormal(b.rng, 4.0, 0.2)
        back = pauses.run(w, cur + work + 0.4, 0.02)
        call = b.span(root, "POST", "Client", w, cur, back - cur)
        b.span(call, "POST /profiles", "Server", f"profiles/{int(b.rng.integers(2))}", cur + 0.2, work)
        free[w] = back + 0.1
        b.set_end(root, back + 0.1)
    b.stages["predict"] = "model_forward"
    return b.frame()


def throttled_caller(seed: int, rate: float = 0.15):
    """A caller (three pods under a CPU quota: in `rate` of the 100 ms periods the quota runs out
    10-60 ms before the period ends and the pod waits for the next one) builds a request (1 ms),
    calls a traced ranker (5 ms, never throttled) and merges the answer (1.5 ms). A stall holds
    whatever the pod is doing: its own steps, and the reading of a reply that has arrived."""
    from tests.mechanism_stalls import quota_stalls

    b = TraceBuilder(seed)
    pods = [f"caller/{k}" for k in range(3)]
    n, rps = 5000, 300.0
    stalls = quota_stalls(b, pods, n / rps * 1000.0 + 2000.0, rate)
    for t in b.arrivals(n, rps):
        b.new_trace()
        pod = pods[int(b.rng.integers(3))]
        start = stalls.run(pod, t, 0.0)
        root = b.span(None, "GET /feed", "Server", pod, start, 0.0)
        end = stalls.run(pod, start + 0.05, lognormal(b.rng, 1.0, 0.2))
        b.span(root, "build_request", "Internal", pod, start + 0.05, end - start - 0.05)
        cur = end + 0.02
        work = lognormal(b.rng, 5.0, 0.2)
        back = stalls.run(pod, cur + work + 0.4, 0.02)
        call = b.span(root, "POST rank", "Client", pod, cur, back - cur)
        b.span(call, "POST /rank", "Server", f"ranker/{int(b.rng.integers(2))}", cur + 0.2, work)
        cur = back + 0.02
        end = stalls.run(pod, cur, lognormal(b.rng, 1.5, 0.2))
        b.span(root, "merge", "Internal", pod, cur, end - cur)
        b.set_end(root, end + 0.05)
    return b.frame()


def cold_workers_joining(seed: int):
    """Three warm workers, and two that join a third and half of the way in, their CPU steps slower
    by a factor that starts at 6x and decays over ~150 requests (interpreted code, lazy
    initialisation): serialising and reading the model's reply take alike longer there. No pause."""
    b = TraceBuilder(seed)
    n, rps = 4000, 150.0
    for t, inst, k, joined in b.joining_arrivals(n, rps):
        slow = 1.0 + 5.0 * np.exp(-k / 150.0) if joined else 1.0
        b.new_trace()
        root = b.span(None, "POST /rank", "Server", inst, t, 0.0)
        cur = t + 0.05
        work = lognormal(b.rng, 4.0, 0.2)
        back = cur + work + 0.4 + 1.5 * slow * lognormal(b.rng, 1.0, 0.2)  # the reply decoded by the CPU
        call = b.span(root, "ModelInfer", "Client", inst, cur, back - cur)
        b.span(call, "ModelInfer", "Server", f"model/{int(b.rng.integers(2))}", cur + 0.2, work)
        cur = back + 0.02
        d = slow * lognormal(b.rng, 1.5, 0.2)
        b.span(root, "serialize", "Internal", inst, cur, d)
        b.set_end(root, cur + d + 0.05)
    return b.frame()
