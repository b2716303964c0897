"""Blind family `python-istio`: a semantic-search API in Python behind an Istio mesh
(python_istio_sim.py: the physics; python_istio_spans.py: the conventions; python_istio_write.py: a
request's spans).

Shape: every pod has an Envoy sidecar (inbound and outbound hops of ~0.2-1 ms, mTLS, HTTP/2 to the
embedder). `search-api` (FastAPI on uvicorn: 2-4 worker processes per pod, 3-5 pods) serves
`POST /v1/search` with async handlers on one asyncio loop per process: the loop runs one callback at a
time, so a callback that does not yield (a synchronous call, the pure-Python re-rank) holds every
other request of that process, and a CPython collection (it runs inside whichever callback allocates
when it falls due) stops the whole process. A request the loop cannot take yet waits before its
FastAPI span starts: only Envoy's inbound span (or the caller's) covers that wait. Per request: parse;
`tokenize` in a ThreadPoolExecutor (4 threads; the Rust tokenizer releases the GIL, a pure-Python one
holds it and the loop gets it back only at the 5 ms switch interval); Redis `GET` of the result cache
by query hash (Zipf popularity, TTL 600 s); on a miss the embedder over httpx through Envoy
(VirtualService: `retries: attempts 2, perTryTimeout 200ms, retryOn 5xx,reset,connect-failure`, a
jittered 25 ms back-off; least-request with two choices, per sidecar; previous-hosts on a retry;
outlier detection: 5 consecutive gateway errors eject a host), then an OpenSearch kNN query (3 data
nodes, one shard each: the query waits for the slowest shard; refresh each second) and a Redis `SET`;
document metadata from Postgres via asyncpg (a pool of max 10 per process, shared with
`GET /v1/facets`, whose two aggregates run concurrently); the re-rank; the response; then a
BackgroundTask publishes a click/audit event to Kafka (linger.ms 5, acks=all, waits for the delivery
report) in anyio's thread pool: its PRODUCER span starts after the response was sent. `embedder` (a
Ray Serve-like Python server, 3-4 replicas on 4 vCPUs each: max_ongoing_requests 64 and
`@serve.batch(max_batch_size=16, batch_wait_timeout_s=0.005)`, ~16 ms + 0.13 ms a token per input; a
timed-out attempt's handler keeps running; autoscaled replicas start cold).

Healthy noise: jitter; ~6 % result-cache misses (the Zipf tail); young collections every few hundred
ms and a ~30 ms full collection every 6-20 s per worker; OpenSearch refreshes and small merges; 1 %
of metadata queries on a cold plan; query-by-document requests (20 %: 300-1500 tokens); the facets
endpoint's own queries.

Conventions by seed (seed % 3): 0: OTLP/JSON, new semconv, Envoy spans, manual spans exported, the
OTel operator's service.instance.id (one per pod container: all workers alike), collections as `gc`
span events on the request whose callback ran them. 1: Jaeger JSON, old semconv, no Envoy spans (the
trace's root is `search-frontend`'s fetch), manual spans exported, host.name + process.pid (each worker
its own instance), no GC reporting. 2: Zipkin v2, old semconv, Envoy spans, only auto-instrumentation
spans, instances are ip:port, collections as a `process.runtime.cpython.gc.pause_ms` attribute.

Mechanisms (scenario: truth):
- `sync-db-call`: 8 % of searches (synonym expansion) call psycopg2 synchronously inside the async
  handler (~70 ms): the loop is held, every other request of that process waits: queueing, stage
  queue, the FastAPI SERVER span, all workers (side slow_dependency: spans in flight end late).
- `worker-heap-growth`: one worker's in-process LRU never evicts; its tracked objects grow 2 M -> 10 M;
  each time the long-lived objects grew by a quarter a full collection stops it, 0.2 -> 0.85 s:
  gc_pause, no stage, the SERVER span, that worker (side queueing).
- `python-tokenizer`: the fast tokenizer is gone (a pure-Python fallback holding the GIL: ~0.06 ms a
  token); long inputs hold the GIL for tens of ms, concurrent tokenizations take turns and the loop
  waits for the GIL at its steps: lock_contention, stage preprocessing, `tokenize` (the SERVER span
  where manual spans are not exported), accept compute_bound (side queueing).
- `overloaded-replica`: an untraced bulk re-index job sends long-document batches straight to one
  embedder replica (~80 % of it busy): attempts there exceed the 200 ms per-try timeout and Envoy
  retries on another replica: timeout_retry, stage downstream, httpx's `POST` to the embedder
  (side queueing, slow_dependency).
- `segment-merge`: big segment merges on one OpenSearch node for ~80 % of the run slow its shard ~10x;
  every kNN query waits for it: slow_dependency, stage downstream, `opensearch.knn_search`.
- `ttl-expiry-wave`: a warm-up job wrote the 2,500 most popular keys in one go: they expire together
  at 30 % of the run; misses go 6 % -> ~45 % and fall back as keys are written again: cache_miss, stage
  feature_hydration, Redis `GET` (side queueing, slow_dependency).
- `slow-metadata-query`: a migration dropped the GIN index on `documents.tags`: the facets endpoint's
  aggregates take ~2 s and hold the asyncpg pool; searches wait for a connection: lock_contention,
  stage feature_hydration, `metadata.fetch` (the SERVER span without manual spans), accept queueing
  (side slow_dependency).
- `embedder-burst`: a partner integration adds 60 % more traffic of new (uncached) queries from 10 %
  of the run; the autoscaler adds two replicas ~5 s later; their first batches pay a warm-up
  (~350 ms, decaying batch by batch), attempts landing there pass the per-try timeout and are
  retried: cold_start, stage model_forward, `model.forward` (the embedder's SERVER span without
  manual spans), the new replicas (side queueing, timeout_retry).
- `batch-wait-100ms`: batch_wait_timeout_s 0.005 -> 0.1 at a few misses a second per replica: a batch
  never fills and each miss waits up to 100 ms: queueing, stage queue, `batch.wait` (the SERVER span),
  the embedder replicas.
- `slow-kafka-broker`: the broker leading the events topic is slow (acks ~0.7 s): the PRODUCER spans
  last most of a second, but they start after the response was sent, in anyio's thread pool (40
  threads, a handful busy): no search's latency moves. Truth: no cause (a finding on it is a false
  alarm).
- Two causes: `worker-heap-growth+segment-merge`, `ttl-expiry-wave+batch-wait-100ms`,
  `python-tokenizer+slow-metadata-query`.
"""

from __future__ import annotations

import random
from typing import Any

from reference_pipeline.simulate import python_istio_spans as sp
from reference_pipeline.simulate import python_istio_write as wr
from reference_pipeline.simulate.python_istio_sim import (
    Busy,
    OpenSearch,
    Replica,
    ResultCache,
    Sidecar,
    Worker,
    call_embedder,
    external_batches,
    gc_pauses,
    merges,
)
from reference_pipeline.simulate.trace_table import (
    NS_PER_MS,
    NS_PER_S,
    Cause,
    TraceTable,
    WorkerPool,
    lognormal_ms,
    poisson_arrivals,
)

FAMILY = "python-istio"
SINGLES = (
    "sync-db-call",
    "worker-heap-growth",
    "python-tokenizer",
    "overloaded-replica",
    "segment-merge",
    "ttl-expiry-wave",
    "slow-metadata-query",
    "embedder-burst",
    "batch-wait-100ms",
    "slow-kafka-broker",
)
NO_CAUSE = ("slow-kafka-broker",)
PAIRS = (
    "worker-heap-growth+segment-merge",
    "ttl-expiry-wave+batch-wait-100ms",
    "python-tokenizer+slow-metadata-query",
)
SCENARIOS = ("steady", *SINGLES, *PAIRS)

SLOW_NODE, NEW_REPLICAS = 2, 2
_SETUPS = (
    {
        "fmt": "otlp-json",
        "semconv": "new",
        "ident": "instance-id",
        "envoy": True,
        "internals": True,
        "gc": "events",
        "pods": 4,
        "workers": 3,
        "replicas": 3,
        "rps": 110.0,
        "eject_after": 5,
    },
    {
        "fmt": "jaeger",
        "semconv": "old",
        "ident": "host-pid",
        "envoy": False,
        "internals": True,
        "gc": "none",
        "pods": 3,
        "workers": 4,
        "replicas": 3,
        "rps": 100.0,
        "eject_after": 5,
    },
    {
        "fmt": "zipkin",
        "semconv": "old",
        "ident": "endpoint",
        "envoy": True,
        "internals": False,
        "gc": "attribute",
        "pods": 5,
        "workers": 2,
        "replicas": 4,
        "rps": 125.0,
        "eject_after": 5,
    },
)


def setup(seed: int) -> dict[str, Any]:
    return dict(_SETUPS[seed % 3])


def style(seed: int) -> sp.Style:
    s = setup(seed)
    return sp.Style(s["semconv"], s["ident"], s["envoy"], s["internals"], s["gc"])


def leaky_worker(seed: int) -> tuple[int, int]:
    """(pod, worker) of the worker whose heap grows."""
    return 0, 1 % setup(seed)["workers"]


def truth(scenario: str, seed: int) -> tuple[Cause, ...]:
    if scenario not in SCENARIOS:
        raise ValueError(f"unknown {FAMILY} scenario {scenario!r}; one of {', '.join(SCENARIOS)}")
    s, st = setup(seed), style(seed)
    api = tuple(dict.fromkeys(st.label(sp.API, k, w) for k in range(s["pods"]) for w in range(s["workers"])))
    emb = tuple(st.label(sp.EMB, r) for r in range(s["replicas"]))
    new = tuple(st.label(sp.EMB, r) for r in range(s["replicas"], s["replicas"] + NEW_REPLICAS))
    causes = {
        "sync-db-call": Cause("queueing", "queue", sp.ROOT, sp.API, api, side=("slow_dependency",)),
        "worker-heap-growth": Cause(
            "gc_pause", None, sp.ROOT, sp.API, (st.label(sp.API, *leaky_worker(seed)),), side=("queueing",)
        ),
        "python-tokenizer": Cause(
            "lock_contention",
            "preprocessing",
            st.span_or(sp.TOKENIZE, sp.ROOT),
            sp.API,
            api,
            accept=("compute_bound",),
            side=("queueing",),
        ),
        "overloaded-replica": Cause(
            "timeout_retry", "downstream", sp.POST, sp.API, api, side=("queueing", "slow_dependency")
        ),
        "segment-merge": Cause("slow_dependency", "downstream", sp.KNN, sp.API, api),
        "ttl-expiry-wave": Cause(
            "cache_miss", "feature_hydration", sp.GET, sp.API, api, side=("queueing", "slow_dependency")
        ),
        "slow-metadata-query": Cause(
            "lock_contention",
            "feature_hydration",
            st.span_or(sp.META, sp.ROOT),
            sp.API,
            api,
            accept=("queueing",),
            side=("slow_dependency",),
        ),
        "embedder-burst": Cause(
            "cold_start",
            "model_forward",
            st.span_or(sp.FORWARD, sp.EMBED_ROOT),
            sp.EMB,
            new,
            side=("queueing", "timeout_retry"),
        ),
        "batch-wait-100ms": Cause("queueing", "queue", st.span_or(sp.WAIT, sp.EMBED_ROOT), sp.EMB, emb),
    }
    return tuple(causes[part] for part in scenario.split("+") if part not in ("steady", *NO_CAUSE))


def generate(scenario: str, requests: int, seed: int, **opts: Any) -> TraceTable:
    truth(scenario, seed)
    s = {**setup(seed), **opts}
    parts = set(scenario.split("+")) - {"steady"}
    rng = random.Random(seed * 1_000_003 + 2727)
    table = TraceTable(seed, 0x27A)
    st = sp.Style(s["semconv"], s["ident"], s["envoy"], s["internals"], s["gc"])
    res = sp.Resources(table, st)
    run_s = requests / s["rps"]
    burst = "embedder-burst" in parts  # a partner integration's new queries, on top of the usual ones
    bursts = ((0.1 * run_s, 10 * run_s, 1.6),) if burst else ()
    arrivals = poisson_arrivals(rng, s["rps"], requests, bursts)
    run_ns = arrivals[-1]
    horizon = run_ns + 30 * NS_PER_S
    procs: list[list[Worker]] = []
    for k in range(s["pods"]):
        row = []
        for w in range(s["workers"]):
            leak = (2.0, 10.0) if "worker-heap-growth" in parts and (k, w) == leaky_worker(seed) else None
            due = gc_pauses(rng, run_ns if leak else horizon, leak)
            if leak:
                due = sorted(due + [x for x in gc_pauses(rng, horizon, None) if x[0] > run_ns])
            row.append(Worker(Busy(), due, WorkerPool(4)))
        procs.append(row)
    sidecars = [Sidecar(s["replicas"] + NEW_REPLICAS, s["eject_after"]) for _ in range(s["pods"])]
    wait = (100.0 if "batch-wait-100ms" in parts else 5.0) * NS_PER_MS
    replicas = []
    for r in range(s["replicas"] + NEW_REPLICAS):
        busy = (
            external_batches(rng, 0.1 * run_ns, horizon, 0.8)
            if "overloaded-replica" in parts and r == 0
            else []
        )
        ready = (
            0.0
            if r < s["replicas"]
            else (0.1 * run_s + 3.0 + rng.uniform(1.5, 2.5)) * NS_PER_S
            if "embedder-burst" in parts
            else float("inf")
        )
        replicas.append(Replica(Busy(busy), ready, 16, wait, cold=r >= s["replicas"]))
    slow = merges(rng, horizon, 0.12 * run_ns, 0.8, 10.0) if "segment-merge" in parts else []
    search = OpenSearch(rng, horizon, slow, SLOW_NODE)
    cache = ResultCache(rng, 600.0, 12000, 0.3 * run_ns if "ttl-expiry-wave" in parts else None)
    facets = poisson_arrivals(rng, 0.12 * s["rps"], int(0.12 * requests))
    events = sorted([(t, 0) for t in arrivals] + [(t, 1) for t in facets if t < run_ns])
    slow_facets = "slow-metadata-query" in parts
    python_tok = "python-tokenizer" in parts
    for t0, kind in events:
        pod, w = rng.randrange(s["pods"]), rng.randrange(s["workers"])
        proc = procs[pod][w]
        app = t0 + lognormal_ms(rng, 0.35, 0.3)  # the inbound sidecar: mTLS off, HTTP/1.1 to uvicorn
        root_s, t = proc.span_step(rng, app, 0.35)
        if kind == 1:
            queries = []
            for _ in range(2):
                qs = max(t, proc.db.acquire(t))
                qs = proc.step(rng, qs, 0.05)
                done = qs + (lognormal_ms(rng, 2000.0, 0.45) if slow_facets else lognormal_ms(rng, 35.0, 0.4))
                qe = proc.step(rng, done, 0.1)
                proc.db.release(qe)
                queries.append((qs, qe))
            root_e = proc.step(rng, max(q[1] for q in queries), 0.3)
            sp.write_facets(
                table, res, pod, w, (root_s, root_e), queries, (t0, root_e + lognormal_ms(rng, 0.25, 0.3))
            )
            continue
        sync = None
        if "sync-db-call" in parts and rng.random() < 0.08:
            dur = lognormal_ms(rng, 70.0, 0.45)
            block = proc.loop.place(t, dur)  # the driver's socket read never yields to the loop
            sync = (block, block + dur)
            t = sync[1]
        doc = rng.random() < 0.2
        tokens = (
            int(min(1500, max(300, 600 * rng.lognormvariate(0, 0.4))))
            if doc
            else int(max(3, 18 * rng.lognormvariate(0, 0.4)))
        )
        thread = max(t, proc.tokenizer.acquire(t)) + 0.05 * NS_PER_MS
        if python_tok:
            cpu = 0.06 * tokens * NS_PER_MS * rng.lognormvariate(0, 0.1)
            done = proc.threads_run(thread, cpu * (1 + proc.gil_held(thread) + 0.3))
            proc.gil_busy.append((thread, done))
            if len(proc.gil_busy) > 64:
                del proc.gil_busy[:32]
        else:
            done = proc.threads_run(thread, (0.15 + 0.004 * tokens) * NS_PER_MS * rng.lognormvariate(0, 0.2))
        proc.tokenizer.release(done)
        tok_e = proc.step(rng, done, 0.05)
        tokenize = (t, tok_e, tokens, "python" if python_tok else "rust")
        get_s = proc.step(rng, tok_e, 0.05)
        get_e = proc.step(rng, get_s + lognormal_ms(rng, 0.35, 0.3), 0.04)
        novel = burst and t0 >= 0.1 * run_s * NS_PER_S and rng.random() < 0.6 / 1.6
        key = 30_000 + rng.randrange(1_000_000) if novel else cache.query(rng)
        hit = cache.hit(key, get_s)
        embed = knn = cache_set = None
        t = get_e
        status = 200
        if not hit:
            e_s = proc.step(rng, t, 0.1)
            back, code, attempts = call_embedder(rng, e_s, sidecars[pod], replicas, min(tokens, 512))
            e_e = proc.step(rng, back + lognormal_ms(rng, 0.2, 0.3), 0.1)
            embed = sp.Embed(e_s, e_e, code, attempts, min(tokens, 512))
            k_s = proc.step(rng, e_e, 0.15)
            took, _node = search.query(rng, k_s + lognormal_ms(rng, 0.3, 0.3))
            k_e = proc.step(rng, k_s + took + lognormal_ms(rng, 0.9, 0.3), 0.4)
            knn = (k_s, k_e, took, "knn" if code == 200 else "bm25")
            t = k_e
            if code == 200:
                c_s = proc.step(rng, t, 0.05)
                cache.write(key, c_s + 0.2 * NS_PER_MS, rng)
                cache_set = (c_s, proc.step(rng, c_s + lognormal_ms(rng, 0.35, 0.3), 0.04))
                t = cache_set[1]
        f_s = t
        conn = proc.db.acquire(f_s)
        q_s = proc.step(rng, max(f_s, conn), 0.05)
        slow_plan = rng.random() < 0.01
        q_e = proc.step(rng, q_s + lognormal_ms(rng, 25.0 if slow_plan else 1.8, 0.35), 0.15)
        proc.db.release(q_e)
        meta = (f_s, q_e + 0.02 * NS_PER_MS, q_s, q_e, rng.random() < 0.3)
        rerank = proc.span_step(rng, meta[1], 2.0)
        root_e = proc.step(rng, rerank[1], 0.5)
        ack = lognormal_ms(rng, 700.0, 0.5) if "slow-kafka-broker" in parts else lognormal_ms(rng, 6.0, 0.4)
        send_s = root_e + lognormal_ms(rng, 0.3, 0.3)
        gc = [x for x in proc.gc[-16:] if x[0] < root_e and x[1] > root_s]
        wr.write_request(
            table,
            res,
            sp.Timeline(
                pod,
                w,
                (t0, root_e + lognormal_ms(rng, 0.25, 0.3)),
                (root_s, root_e),
                status,
                hit,
                tokenize,
                (get_s, get_e),
                embed,
                knn,
                cache_set,
                sync,
                meta,
                (rerank[0], rerank[1], 50),
                (send_s, send_s + 5 * NS_PER_MS + ack),
                gc,
            ),
            key,
        )
    return table
