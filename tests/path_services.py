"""Services built from a mechanism for the path and payload rules (test_diagnosis_paths.py): a cache whose
keys expire together behind a worker pool (a stampede), a connection pool that runs dry behind a worker
pool, a service that calls two traced services, and a model server whose batches take long. Each is
built on mechanism_frames.TraceBuilder traces, timings from what the mechanism physically does."""

from __future__ import annotations

import heapq

import numpy as np

from tests.mechanism_frames import Pauses, TraceBuilder, lognormal

PODS = ("api/0", "api/1")


def _arrivals(b: TraceBuilder, n: int, rate: float, bursts: bool) -> list[float]:
    """Poisson arrivals at `rate` per second, at 2.5x for 2 s out of every 10 s with `bursts`."""
    t, out = 0.0, []
    while len(out) < n:
        now = rate * 2.5 if bursts and (t // 2000) % 5 == 4 else rate
        t += b.rng.exponential(1000.0 / now)
        out.append(t)
    return out


def cached_service(seed: int, expiry: bool = True, bursts: bool = False, miss_rate: float = 0.005,
                   workers: int = 4, rate: float = 300.0, n: int = 6000, miss_ms: float = 12.0,
                   expire_at: float = 1 / 3):
    """Calls from a front end to a service with `workers` slots per pod: each request looks up its key
    in an in-process cache (`lookup`, 0.1 ms on a hit); on a miss it reads the store (a CLIENT
    `SELECT items`, ~`miss_ms` ms, 8 % slower per other store read in flight) and writes the key back.
    With `expiry`, every key expires `expire_at` into the run (0: a cache cold after a deploy), and each
    request for a key not yet written back misses (no coalescing): a stampede. Otherwise `miss_rate` of
    lookups miss at random."""
    b = TraceBuilder(seed)
    free = {p: [0.0] * workers for p in PODS}
    cached: dict[tuple[str, int], float] = {}
    in_flight: list[float] = []  # end times of the store reads running
    times = _arrivals(b, n, rate, bursts)
    clear_at = times[int(len(times) * expire_at)] if expiry else float("inf")
    for i, t in enumerate(times):
        b.new_trace()
        pod = PODS[i % 2]
        key = int(400 * b.rng.random() ** 3)
        slots = free[pod]
        k = int(np.argmin(slots))
        start = max(t + lognormal(b.rng, 0.3, 0.1), slots[k])
        cli = b.span(None, "GET /items", "Client", f"web/{i % 3}", t, 0.0, service="web")
        root = b.span(cli, "GET /items", "Server", pod, start, 0.0)
        cur = start + 0.05
        since = cached.get((pod, key), 0.0)
        if expiry:
            hit = since <= cur and (since >= clear_at or cur < clear_at)
        else:
            hit = b.rng.random() >= miss_rate
        look = b.span(root, "lookup", "Internal", pod, cur, 0.0, **{"cache.name": "items"})
        end = cur + lognormal(b.rng, 0.1, 0.2)
        if not hit:
            while in_flight and in_flight[0] <= end:
                heapq.heappop(in_flight)
            d = lognormal(b.rng, miss_ms, 0.3) * (1.0 + 0.08 * len(in_flight))
            b.span(look, "SELECT items", "Client", pod, end, d, **{"db.system": "postgresql"})
            heapq.heappush(in_flight, end + d)
            end += d + 0.05
            if (pod, key) not in cached or cached[(pod, key)] < clear_at <= end:
                cached[(pod, key)] = end
        b.set_end(look, end)
        cur = end + 0.02
        for name, median in (("rank", 5.0), ("render", 1.5)):
            d = lognormal(b.rng, median, 0.2)
            b.span(root, name, "Internal", pod, cur, d)
            cur += d + 0.02
        b.set_end(root, cur)
        slots[k] = cur
        b.set_end(cli, cur + lognormal(b.rng, 0.3, 0.1))
    return b.frame()


def pooled_service(seed: int, workers: int = 8, connections: int = 3, rate: float = 800.0, n: int = 6000,
                   bursts: bool = False):
    """Calls to a service with `workers` threads per pod and a pool of `connections` database
    connections per pod, held from the repository span's query until the response is written (open
    session in view): `findRecent` waits for a free connection before its JDBC child, and threads
    waiting for a connection fill the worker pool too. With `bursts`, arrivals run at 2.5x the rate
    for 2 s out of every 10 s."""
    b = TraceBuilder(seed)
    free = {p: [0.0] * workers for p in PODS}
    conns = {p: [0.0] * connections for p in PODS}
    for i, t in enumerate(_arrivals(b, n, rate, bursts)):
        b.new_trace()
        pod = PODS[i % 2]
        slots = free[pod]
        k = int(np.argmin(slots))
        start = max(t + lognormal(b.rng, 0.3, 0.1), slots[k])
        cli = b.span(None, "GET /feed", "Client", f"web/{i % 3}", t, 0.0, service="web")
        root = b.span(cli, "GET /feed", "Server", pod, start, 0.0)
        cur = start + 0.05
        d = lognormal(b.rng, 1.0, 0.2)
        b.span(root, "auth", "Internal", pod, cur, d)
        cur += d + 0.02
        repo = b.span(root, "findRecent", "Internal", pod, cur, 0.0)
        pool = conns[pod]
        c = int(np.argmin(pool))
        got = max(cur + 0.05, pool[c])
        q = lognormal(b.rng, 1.2, 0.2)
        b.span(repo, "SELECT seen", "Client", pod, got, q, **{"db.system": "postgresql"})
        b.set_end(repo, got + q + 0.05)
        cur = got + q + 0.1
        for name, median in (("score", 4.0), ("render", 1.5)):
            d = lognormal(b.rng, median, 0.2)
            b.span(root, name, "Internal", pod, cur, d)
            cur += d + 0.02
        b.set_end(root, cur)
        pool[c] = cur  # the connection goes back when the response is written
        slots[k] = cur
        b.set_end(cli, cur + lognormal(b.rng, 0.3, 0.1))
    return b.frame()


def two_callee_service(seed: int, n: int = 4000):
    """A service that works between calls to two traced services: its own spans (~7 ms), a feature
    service (~6 ms, 1 % of its reads ~70 ms: they own the p99) and a model server (~4 ms)."""
    b = TraceBuilder(seed)
    for i, t in enumerate(b.arrivals(n, 150)):
        b.new_trace()
        pod = PODS[i % 2]
        root = b.span(None, "GET /recs", "Server", pod, t, 0.0)
        cur = t + 0.05
        for name, median, peer, callee in (
            ("load", 2.0, None, None), ("features", 6.0, "features/0", "GetFeatures"),
            ("score", 4.0, "model/0", "Infer"), ("render", 5.0, None, None),
        ):
            d = lognormal(b.rng, median, 0.2)
            if peer is None:
                b.span(root, name, "Internal", pod, cur, d)
            else:
                if peer.startswith("features") and b.rng.random() < 0.01:
                    d += lognormal(b.rng, 70.0, 0.2)
                call = b.span(root, callee, "Client", pod, cur, d + 0.4)
                srv = b.span(call, callee, "Server", peer, cur + 0.2, d)
                b.span(srv, f"{callee}.work", "Internal", peer, cur + 0.25, d - 0.1)
                d += 0.4
            cur += d + 0.02
        b.set_end(root, cur)
    return b.frame()


def batched_model_service(seed: int, per_batch_ms: float, rate: float = 260.0, n: int = 5000,
                          max_batch: int = 16, client_name: str = "Infer", bursts: bool = False,
                          queue_span: bool = True, cotenant_rate: float = 0.0):
    """Requests prepare (~8 ms), call a feature service (~6 ms), then a model server with one executor
    per pod: each waits (`batch.queue`) for the batch in progress, then runs in the next batch (every
    request waiting then, up to `max_batch`) of `per_batch_ms` + 0.3 ms per request (`model.execute`,
    one interval shared by the batch's members). `client_name`: the caller's CLIENT span name;
    `bursts`: 2.5x the rate for 2 s out of every 10 s (the co-tenant's only, where there is one);
    without `queue_span` the wait shows only as the SERVER span's time before its execute child;
    `cotenant_rate`: untraced requests per second per model server (bursting with `bursts`) that share
    its batches."""
    b = TraceBuilder(seed)
    b.stages.update({"model.execute": "model_forward", "batch.queue": "queue"})
    calls: dict[str, list[tuple[float, int, int, int]]] = {"model/0": [], "model/1": []}
    for i, t in enumerate(_arrivals(b, n, rate, bursts and not cotenant_rate)):
        b.new_trace()
        pod, model = PODS[i % 2], ("model/0", "model/1")[i % 2]
        root = b.span(None, "POST /predict", "Server", pod, t, 0.0)
        d = lognormal(b.rng, 8.0, 0.2)
        b.span(root, "prepare", "Internal", pod, t + 0.05, d)
        cur = t + d + 0.1
        d = lognormal(b.rng, 6.0, 0.2)  # the features, from a service of their own
        call = b.span(root, "GetFeatures", "Client", pod, cur, d + 0.4)
        b.span(b.span(call, "GetFeatures", "Server", "features/0", cur + 0.2, d), "lookup", "Internal",
               "features/0", cur + 0.25, d - 0.1)
        cur += d + 0.5
        cli = b.span(root, client_name, "Client", pod, cur, 0.0)
        srv = b.span(cli, "Infer", "Server", model, cur + 0.2, 0.0)
        calls[model].append((cur + 0.25, srv, cli, root))
    for model in calls:  # the untraced co-tenant's requests take batch places too
        ghost = _arrivals(b, int(cotenant_rate * calls[model][-1][0] / 1000.0), cotenant_rate, bursts)
        calls[model] += [(t, -1, -1, -1) for t in ghost]
    for model, queue in calls.items():
        queue.sort()
        free, k = 0.0, 0
        while k < len(queue):
            go = max(free, queue[k][0])
            batch = [c for c in queue[k : k + max_batch] if c[0] <= go]
            d = per_batch_ms + 0.3 * len(batch)
            for arrived, srv, cli, root in batch:
                if srv < 0:
                    continue
                if queue_span:
                    b.span(srv, "batch.queue", "Internal", model, arrived, go - arrived)
                b.span(srv, "model.execute", "Internal", model, go, d)
                b.set_end(srv, go + d + 0.05)
                b.set_end(cli, go + d + 0.3)
                b.set_end(root, go + d + 1.3)
            free, k = go + d, k + len(batch)
    return b.frame()


def decoding_service(seed: int, as_queue_stage: bool, n: int = 4000):
    """Each request decodes a message (`decode`, an in-process leaf carrying the message's
    `messaging.message.body.size`: 25 ms per MB, sizes lognormal around 40 kB), then reads a
    profile (1 % of reads take ~60 ms more: they own most of the p99) and scores. With `as_queue_stage`, the
    mapping puts `decode` in the queue stage (a messaging.* attribute rule), as a loader may."""
    b = TraceBuilder(seed)
    if as_queue_stage:
        b.stages["decode"] = "queue"
    for i, t in enumerate(b.arrivals(n, 150)):
        b.new_trace()
        pod = PODS[i % 2]
        root = b.span(None, "process", "Server", pod, t, 0.0)
        cur = t + 0.05
        size = int(40_000 * np.exp(b.rng.normal(0.0, 1.2)))
        d = (0.2 + size / 1e6 * 25.0) * lognormal(b.rng, 1.0, 0.1)
        b.span(root, "decode", "Internal", pod, cur, d, **{"messaging.message.body.size": size})
        cur += d + 0.02
        d = lognormal(b.rng, 1.5, 0.2) + (lognormal(b.rng, 60.0, 0.2) if b.rng.random() < 0.01 else 0.0)
        b.span(root, "SELECT profiles", "Client", pod, cur, d, **{"db.system": "cassandra"})
        cur += d + 0.02
        d = lognormal(b.rng, 4.0, 0.2)
        b.span(root, "score", "Internal", pod, cur, d)
        b.set_end(root, cur + d + 0.05)
    return b.frame()


def lossy_node_service(seed: int, lossy: bool, n: int = 4000, traced_callee: bool = False):
    """Three pods call an untraced database (`SELECT seen`, ~1.2 ms). With `lossy`, pod 0 sits on a
    node whose network delays 4 % of its packets ~30 ms: only its calls have the slow tail. Otherwise
    the database itself is slow on 2 % of the reads, whoever calls. With `traced_callee` the callee is a
    traced service (`GET seen-svc` CLIENT, its SERVER span the callee's own time: the delay is outside)."""
    b = TraceBuilder(seed)
    pods = ("api/0", "api/1", "api/2")
    for i, t in enumerate(b.arrivals(n, 150)):
        b.new_trace()
        pod = pods[i % 3]
        root = b.span(None, "GET /seen", "Server", pod, t, 0.0)
        cur = t + 0.05
        d = work = lognormal(b.rng, 1.2, 0.2)
        if (pod == "api/0" if lossy else True) and b.rng.random() < (0.04 if lossy else 0.02):
            d += lognormal(b.rng, 30.0, 0.2)
        if traced_callee:
            call = b.span(root, "GET seen-svc", "Client", pod, cur, d + 0.3)
            b.span(call, "GET /v1/seen", "Server", "seen/0", cur + 0.15, work if lossy else d)
            d += 0.3
        else:
            b.span(root, "SELECT seen", "Client", pod, cur, d, **{"db.system": "postgresql"})
        cur += d + 0.02
        d = lognormal(b.rng, 4.0, 0.2)
        b.span(root, "render", "Internal", pod, cur, d)
        b.set_end(root, cur + d + 0.05)
    return b.frame()


def sharded_fan_out(seed: int, n: int = 3000, shards: int = 8, deadline: float | None = 30.0,
                    limit: int | None = None, straggler: bool = False):
    """Each request fans out one call per shard (side by side, at most `limit` at once) to a shard
    service of three replicas per shard; 3 % of the attempts hang (a compaction). With a `deadline`,
    a hung attempt is cut at it with DEADLINE_EXCEEDED, then made once more, 2 ms later, on another
    replica of the same shard; without one, it runs long (~40 ms, heavy-tailed) and is not retried.
    With `straggler`, no attempt hangs but replica 0 of shard 3 takes ~25 ms more on every call (with a
    `deadline`, its calls that outlast it are cut and made again on another replica)."""
    b = TraceBuilder(seed)
    for i, t in enumerate(b.arrivals(n, 80)):
        b.new_trace()
        pod = PODS[i % 2]
        root = b.span(None, "GET /search", "Server", pod, t, 0.0)
        cur = t + 0.05
        ends, slots = [], [cur] * (limit or shards)
        for shard in range(shards):
            k = int(np.argmin(slots))
            start, replica = max(slots[k], cur + 0.02 * shard), int(b.rng.integers(3))
            while True:
                work = lognormal(b.rng, 4.0, 0.25)
                hang = not straggler and b.rng.random() < 0.03
                if straggler and shard == 3 and replica == 0:
                    work += lognormal(b.rng, 25.0, 0.2)
                if hang and deadline is None:
                    work += lognormal(b.rng, 40.0, 0.5)
                # a deadline cuts whatever outlasts it: a hung attempt, or a straggler's slowest calls
                cut = deadline is not None and (hang or (straggler and work + 0.3 > deadline))
                d = deadline if cut else work + 0.3
                call = b.span(root, "Shard/Search", "Client", pod, start, d,
                              **{"rpc.grpc.status_code": 4 if cut else 0})
                b.span(call, "Shard/Search", "Server", f"shard/{shard}-{replica}", start + 0.1,
                       deadline + 5.0 if cut else work, service="shard")
                if not cut:
                    ends.append(start + d)
                    slots[k] = start + d
                    break
                start, replica = start + d + 2.0, (replica + 1) % 3
        cur = max(ends) + 0.05
        d = lognormal(b.rng, 2.0, 0.2)
        b.span(root, "merge", "Internal", pod, cur, d)
        b.set_end(root, cur + d + 0.05)
    return b.frame()



def embedding_caller(seed: int, n: int = 3000):
    """A search service calls an embedder (CLIENT and SERVER spans both named `Embedder/Embed`, as
    gRPC instrumentations name them) whose forward pass (`encode`) grows with the input's length
    (heavy-tailed), then a vector index (~4 ms), then merges: the call's tail is the model's compute."""
    b = TraceBuilder(seed)
    b.stages["encode"] = "model_forward"
    for i, t in enumerate(b.arrivals(n, 120)):
        b.new_trace()
        pod = PODS[i % 2]
        root = b.span(None, "GET /search", "Server", pod, t, 0.0)
        cur = t + 0.05
        d = 2.0 + 0.02 * float(np.exp(b.rng.normal(5.0, 0.8)))  # ~150 tokens, heavy-tailed
        call = b.span(root, "Embedder/Embed", "Client", pod, cur, d + 0.6)
        srv = b.span(call, "Embedder/Embed", "Server", "embedder/0", cur + 0.2, d + 0.2)
        b.span(srv, "encode", "Internal", "embedder/0", cur + 0.3, d)
        cur += d + 0.7
        d = lognormal(b.rng, 4.0, 0.2)
        call = b.span(root, "POST /points/search", "Client", pod, cur, d + 0.4)
        b.span(call, "POST /points/search", "Server", "index/0", cur + 0.2, d, service="index")
        cur += d + 0.5
        d = lognormal(b.rng, 3.0, 0.2)
        b.span(root, "merge", "Internal", pod, cur, d)
        b.set_end(root, cur + d + 0.05)
    return b.frame()


def paused_jvm_service(seed: int, n: int = 6000, rate: float = 300.0, stages: tuple = (2.0, 4.0, 1.5)):
    """Calls from a front end to a JVM service (two pods, 8 worker threads each) whose old generation
    fills: 60-150 ms pauses every 0.5-1.5 s per pod. A paused JVM accepts nothing (calls sent then
    start their SERVER span after it) and runs no thread (the requests in flight stretch). The runtime
    reports GC only as each request's `jvm.gc.collection_time_ms.delta` (JMX: no moment). `stages`:
    the median ms of each stage under the request (one stage: a handler with nothing else traced)."""
    b = TraceBuilder(seed)
    pauses: dict[str, list[tuple[float, float]]] = {}
    for pod in PODS:
        t, spans = float(b.rng.uniform(0, 500)), []
        while t < n / rate * 1000 + 2000:
            d = float(b.rng.uniform(60, 150))
            spans.append((t, t + d))
            t += d + float(b.rng.uniform(500, 1500))
        pauses[pod] = spans
    stalls = Pauses(pauses)
    free = {p: [0.0] * 8 for p in PODS}
    for i, t in enumerate(b.arrivals(n, rate)):
        b.new_trace()
        pod = PODS[i % 2]
        slots = free[pod]
        k = int(np.argmin(slots))
        start = stalls.run(pod, max(t + lognormal(b.rng, 0.3, 0.1), slots[k]), 0.0)
        cli = b.span(None, "GET /feed", "Client", f"web/{i % 3}", t, 0.0, service="web")
        cur = start + 0.05
        ends = []
        for median in stages:
            cur = stalls.run(pod, cur, lognormal(b.rng, median, 0.2))
            ends.append(cur)
        gc_ms = sum(max(0.0, min(e, cur) - max(a, start)) for a, e in pauses[pod])
        root = b.span(cli, "GET /feed", "Server", pod, start, cur - start,
                      **{"jvm.gc.collection_time_ms.delta": round(gc_ms)})
        prev = start + 0.05
        for name, end in zip(("load", "score", "render")[: len(stages)], ends, strict=True):
            b.span(root, name, "Internal", pod, prev, end - prev)
            prev = end
        slots[k] = cur
        b.set_end(cli, cur + lognormal(b.rng, 0.3, 0.1))
    return b.frame()
