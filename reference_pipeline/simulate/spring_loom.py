"""Blind family `spring-loom`: a retail site's product-search re-ranking on Java 21 / Spring Boot 3 with
virtual threads (spring_loom_jvm.py: the physics; spring_loom_spans.py: the conventions).

Shape: an Nginx ingress (`ingress-nginx`, its spans on some seeds, upstream connect / header times as
attributes) sends `GET /api/search` (a query and a user id) to `search-api` pods: Spring MVC on embedded
Tomcat with `spring.threads.virtual.enabled=true`. Every request runs on a virtual thread mounted on one
of the pod's 4 carrier threads (a ForkJoinPool sized by the pod's CPUs); a virtual thread that blocks on
I/O unmounts, one that blocks inside `synchronized` stays pinned. Per request the handler reads the
user's recent purchases from Postgres through HikariCP (pool 10, the JDBC span starts once a connection
is had), runs a kNN query on Elasticsearch (3 data nodes, 3 shards of 2 copies, adaptive replica
selection on the coordinating node; the Apache async client ends the span on its reactor thread),
parses the hits, looks up 200 candidates' features in a per-pod Caffeine cache (expireAfterWrite 60 s),
fetches the misses in one gRPC call to `feature-service` (5 backends, a round-robin channel per pod; a
blocking stub runs its callbacks on the calling virtual thread, so the call ends when the thread gets a
carrier again), tokenizes and scores the candidates with an ONNX Runtime cross-encoder behind a per-pod
`synchronized` wrapper (entering a contended monitor pins the waiting virtual thread on JDK 21; the
holder waits for the session's future inside it: pinned again), hands an impression record (~100 KB)
to the Kafka producer (linger 10 ms, buffer.memory 2 MB: `send()` blocks when the buffer is full) and
writes the response. Every stretch of Java code needs a carrier: a request ready to run waits for one.

Runtime: ZGC's sub-millisecond safepoints (every thread), allocation stalls (only threads that
allocate, and they hold their carrier), CFS periods of 100 ms (quota 4 CPUs), a tiered JIT.

Healthy noise: jitter everywhere; 2 % of requests open a new upstream connection at the ingress; a
few % Caffeine misses from the cache's steady state; 1 % large queries; 0.5 % slow purchases queries
and feature calls; ES refreshes and cold segments; ZGC pauses; throttling in ~1 % of periods; the
synchronized wrapper's queue on bursts.

Conventions by seed (seed % 3): 0: OTLP/JSON, new semconv, instances by pod name, ingress spans, manual
`features` / `rerank` spans, JFR events (jdk.VirtualThreadPinned over 20 ms, jdk.ZAllocationStall) on the
server span. 1: Jaeger, old semconv, instances as pod ip:port, no ingress spans, no manual spans, JFR
events. 2: Zipkin v2, old semconv, endpoints, ingress spans, manual spans, no JFR events.

Mechanisms (scenario: truth):
- `carrier-pinning`: a canary pod runs a larger cross-encoder (~2.2x); the wrapper's monitor queue
  grows (JFR: jdk.VirtualThreadPinned) and its waiters stay pinned on their carriers, so other work on
  that pod waits to be mounted when all 4 are held: lock_contention at the rerank span on the canary
  (accept queueing: virtual threads wait for the monitor and for a carrier; side compute_bound,
  slow_dependency: client spans end late). Limit: requests are booked in arrival order and a pinned
  stretch needs a carrier gap free of steps booked before it, so all four carriers are seldom pinned
  at once here: the non-model steps' waits on the canary are only a little longer than elsewhere.
- `zgc-allocation-stalls`: a burst of large queries (big ES responses parsed into objects) for a quarter
  of the run; the heap fills faster than ZGC frees it and allocating threads stall 5-80 ms: gc_pause
  (side large_payload, queueing).
- `es-segment-merge`: data node 1 merges segments (HNSW graphs) for half the run: its shard copies
  answer ~6x slower and it coordinates slowly; ARS moves some traffic away once its EWMA has risen:
  slow_dependency at the ES span.
- `caffeine-expiry-wave`: a bulk preload wrote the hot items at one moment; 60 s later (at 30 % of the
  run) they expire together: misses surge, feature calls carry ~100+ keys: cache_miss (side
  slow_dependency, queueing).
- `hikari-slow-plan`: the purchases query's plan flips to a sequential scan (~110 ms) at 25 %: the
  query is slow and the pool of 10 runs out on bursts: slow_dependency at the JDBC span (accept
  queueing: the pool wait before the span).
- `kafka-buffer-full`: a slow follower in the ISR holds every acks=all produce request: the buffer fills
  and `send()` blocks the request thread: slow_dependency at the producer span (accept queueing).
- `cfs-throttling`: on two pods ZGC's workers (sized by the node's CPUs) and C2 threads spend the quota
  in 30-70 ms for 2-4 periods a GC cycle: every thread waits to the period's end: cpu_throttling.
- `deploy-cold-jit`: a rolling deploy from 25 %; new pods run interpreted / C1 code (~4.5x CPU time,
  decaying over ~300 requests) and grow ONNX's arena: cold_start on the new pods.
- `grpc-bad-backend`: feature-service backend 3 waits ~36 ms more a call on its store:
  every fifth call of each round-robin channel: slow_dependency at feature-service's GetFeatures on
  that backend.
- Two causes: `carrier-pinning+hikari-slow-plan`, `caffeine-expiry-wave+grpc-bad-backend`,
  `es-segment-merge+kafka-buffer-full`.
"""

from __future__ import annotations

import math
import random
from typing import Any

from reference_pipeline.simulate import spring_loom_jvm as jvm
from reference_pipeline.simulate import spring_loom_spans as sp
from reference_pipeline.simulate.trace_table import (
    NS_PER_MS,
    NS_PER_S,
    Cause,
    TraceTable,
    lognormal_ms,
    poisson_arrivals,
)

FAMILY = "spring-loom"
SINGLES = ("carrier-pinning", "zgc-allocation-stalls", "es-segment-merge", "caffeine-expiry-wave",
           "hikari-slow-plan", "kafka-buffer-full", "cfs-throttling", "deploy-cold-jit", "grpc-bad-backend")
PAIRS = ("carrier-pinning+hikari-slow-plan", "caffeine-expiry-wave+grpc-bad-backend",
         "es-segment-merge+kafka-buffer-full")
SCENARIOS = ("steady", *SINGLES, *PAIRS)
BACKENDS, BAD_BACKEND = 5, 3
_SETUPS = (
    {"fmt": "otlp-json", "semconv": "new", "ident": "pod", "ingress": True, "manual": True, "jfr": True,
     "pods": 4, "rps": 170.0, "feature_cores": 3},
    {"fmt": "jaeger", "semconv": "old", "ident": "ipport", "ingress": False, "manual": False, "jfr": True,
     "pods": 3, "rps": 130.0, "feature_cores": 2},
    {"fmt": "zipkin", "semconv": "old", "ident": "endpoint", "ingress": True, "manual": True, "jfr": False,
     "pods": 5, "rps": 210.0, "feature_cores": 4},
)


def setup(seed: int) -> dict[str, Any]:
    return dict(_SETUPS[seed % 3])


def style(seed: int) -> sp.Style:
    s = setup(seed)
    return sp.Style(s["semconv"], s["ident"], s["ingress"], s["manual"], s["jfr"])


def special_pods(seed: int) -> dict[str, tuple[int, ...]]:
    """The pods a cause acts on: the canary (larger model), the throttled ones."""
    n = setup(seed)["pods"]
    return {"canary": (n - 1,), "throttled": (0, 2)}


def deploy_at(k: int, pods: int, run_ns: float) -> float:
    """When the rolling deploy replaces pod k."""
    return (0.25 + 0.5 * k / pods) * run_ns


def truth(scenario: str, seed: int) -> tuple[Cause, ...]:
    if scenario not in SCENARIOS:
        raise ValueError(f"unknown {FAMILY} scenario {scenario!r}; one of {', '.join(SCENARIOS)}")
    s, st, special = setup(seed), style(seed), special_pods(seed)
    api = tuple(st.label(sp.API, k) for k in range(s["pods"]))
    new = tuple(st.label(sp.API, k, 1) for k in range(s["pods"]))
    causes = {
        "carrier-pinning": Cause("lock_contention", "model_forward", st.rerank_span(), sp.API,
                                 tuple(api[k] for k in special["canary"]), accept=("queueing",),
                                 side=("compute_bound", "slow_dependency")),
        "zgc-allocation-stalls": Cause("gc_pause", None, sp.ROOT, sp.API, api,
                                       side=("large_payload", "queueing")),
        "es-segment-merge": Cause("slow_dependency", "downstream", st.es, sp.API, api),
        "caffeine-expiry-wave": Cause("cache_miss", "feature_hydration", st.features_span(), sp.API, api,
                                      side=("slow_dependency", "queueing")),
        "hikari-slow-plan": Cause("slow_dependency", "feature_hydration", st.jdbc, sp.API, api,
                                  accept=("queueing",)),
        "kafka-buffer-full": Cause("slow_dependency", "downstream", st.kafka, sp.API, api,
                                   accept=("queueing",)),
        "cfs-throttling": Cause("cpu_throttling", None, sp.ROOT, sp.API,
                                tuple(api[k] for k in special["throttled"]), side=("queueing",)),
        "deploy-cold-jit": Cause("cold_start", None, sp.ROOT, sp.API, new,
                                 side=("compute_bound", "queueing")),
        "grpc-bad-backend": Cause("slow_dependency", "feature_hydration", sp.GRPC, sp.FEATURES,
                                  (st.label(sp.FEATURES, BAD_BACKEND),)),
    }
    return tuple(causes[part] for part in scenario.split("+") if part != "steady")


def _warm(n: int) -> float:
    return 1.0


def _cold(n: int) -> float:
    """A new JVM's CPU time multiple: interpreted and C1 code until C2 has compiled the hot paths."""
    return 1.0 + 3.5 * math.exp(-n / 300.0)


def _ms(rng: random.Random, median: float, sigma: float = 0.3) -> float:
    return lognormal_ms(rng, median, sigma)


def generate(scenario: str, requests: int, seed: int, **opts: Any) -> TraceTable:
    truth(scenario, seed)
    s = {**setup(seed), **opts}
    parts = set(scenario.split("+")) - {"steady"}
    rng = random.Random(seed * 1_000_003 + 3232)
    table = TraceTable(seed, 0x532)
    st = style(seed)
    res = sp.Resources(table, st)
    n_pods, rps = s["pods"], s["rps"]
    run_s = requests / rps
    run = run_s * NS_PER_S
    arrivals = [(t, False) for t in poisson_arrivals(rng, rps, requests)]
    burst = (0.3 * run, 0.55 * run)
    if "zgc-allocation-stalls" in parts:  # a crawler's large queries on top of the traffic
        rate = 0.5 * rps
        arrivals += [(burst[0] + t, True) for t in poisson_arrivals(rng, rate, int(rate * 0.25 * run_s))]
    arrivals.sort()
    horizon = arrivals[-1][0] + 30 * NS_PER_S
    special = special_pods(seed)
    alloc = (burst[0] + 0.02 * run, burst[1]) if "zgc-allocation-stalls" in parts else None
    pods: dict[tuple[int, int], jvm.Pod] = {}
    for k in range(n_pods):
        pods[(k, 0)] = jvm.make_pod(rng, horizon, 4, "cfs-throttling" in parts and k in special["throttled"],
                                    alloc, _warm)
        if "carrier-pinning" in parts and k in special["canary"]:
            pods[(k, 0)].model_factor = 2.2
        pods[(k, 0)].sessions = 10_000
        if "deploy-cold-jit" in parts:
            pods[(k, 1)] = jvm.make_pod(rng, horizon, 4, False, alloc, _cold)
    for (k, _gen), pod in pods.items():
        pod.rr = (3 * k) % BACKENDS
    catalog = jvm.Catalog(seed)
    per_pod = rps / n_pods
    wave = 0.3 * run if "caffeine-expiry-wave" in parts else None
    caches = {key: jvm.Caffeine(catalog, per_pod * 200, wave) for key in pods}
    es = jvm.Elastic((0.15 * run, 0.75 * run) if "es-segment-merge" in parts else None)
    features = jvm.FeatureService([jvm.Slots(s["feature_cores"]) for _ in range(BACKENDS)],
                                  BAD_BACKEND if "grpc-bad-backend" in parts else None)
    flip = 0.25 * run if "hikari-slow-plan" in parts else math.inf
    slow_isr = (0.1 * run, 0.6 * run) if "kafka-buffer-full" in parts else None
    fill = per_pod * jvm.RECORD / NS_PER_S  # bytes per ns a pod's producer takes in
    for n, (t0, heavy) in enumerate(arrivals):
        if n % 64 == 0:
            for pod in pods.values():
                pod.prune(t0)
            for backend in features.backends:
                backend.prune(t0)
        k = rng.randrange(n_pods)
        gen = 1 if "deploy-cold-jit" in parts and t0 >= deploy_at(k, n_pods, run) else 0
        pod, cache = pods[(k, gen)], caches[(k, gen)]
        heavy = heavy or rng.random() < 0.01
        jit = pod.jit(pod.served)
        pod.served += 1
        # the ingress reuses an upstream keep-alive connection, or (2 %: the pool's churn) opens one
        connect = _ms(rng, 1.6, 0.4) if rng.random() < 0.02 else 0.0
        hop = _ms(rng, 0.25) + connect
        # Tomcat's poller hands the request to a new virtual thread: the span starts once it is mounted
        root_s, t = pod.cpu_step(t0 + hop, _ms(rng, 0.35) * jit, False)
        # HikariCP: the JDBC span starts once a connection is had; the result is read on the thread
        query = jvm.purchases_ms(rng, t >= flip)
        conn_s, _ = pod.hikari.book(t, lambda a, q=query: a + q + 0.25 * NS_PER_MS)
        jdbc_s = conn_s + _ms(rng, 0.05)
        _, jdbc_e = pod.cpu_step(pod.cpu.settle(jdbc_s + query), _ms(rng, 0.12) * jit, False)
        # Elasticsearch: the reactor thread ends the span; parsing the hits allocates
        es_s = jdbc_e + _ms(rng, 0.05)
        es_ms, coordinator = es.query(rng, es_s, heavy)
        es_e = pod.cpu.settle(es_s + es_ms)
        stalled: list[tuple[float, float]] = []
        a, t = pod.cpu_step(es_e, _ms(rng, 9.0 if heavy else 2.2, 0.2) * jit, True)
        stalled += pod.alloc_only.overlapping(a, t)
        # Caffeine, then one gRPC call for the misses
        keys = catalog.candidates(215)
        feat_s, t = pod.cpu_step(t, _ms(rng, 0.5) * jit, False)
        misses = cache.lookup(keys, feat_s)
        grpc = None
        if len(misses):
            backend = pod.rr % BACKENDS
            pod.rr += 1
            g_s = t + _ms(rng, 0.03)
            srv = features.serve(rng, backend, g_s + _ms(rng, 0.3), len(misses))
            reply = srv[1] + _ms(rng, 0.3) + 0.004 * NS_PER_MS * len(misses)
            a, t = pod.cpu_step(pod.cpu.settle(reply), (0.15 + 0.012 * len(misses)) * NS_PER_MS * jit, True)
            stalled += pod.alloc_only.overlapping(a, t)
            cache.put(misses, t)
            grpc = sp.Grpc(g_s, t, srv, backend, len(misses))
        feat_e = t + _ms(rng, 0.03)
        # rerank: tokenize, then the synchronized ONNX session (pinned from the monitor's entry)
        onnx = _ms(rng, 9.0, 0.15) * pod.model_factor * (2.5 if pod.sessions < 12 else 1.0)
        pod.sessions += 1
        rr_s, entered, left = pod.rerank(feat_e, _ms(rng, 2.4, 0.2) * jit, onnx)
        stalled += pod.alloc_only.overlapping(rr_s, entered)
        a, rr_e = pod.cpu_step(left, _ms(rng, 0.4) * jit, True)
        stalled += pod.alloc_only.overlapping(a, rr_e)
        # the impression record to Kafka; a full buffer parks the thread until there is room
        a, k_s = pod.cpu_step(rr_e, _ms(rng, 0.6) * jit, True)
        stalled += pod.alloc_only.overlapping(a, k_s)
        back = jvm.kafka_send(pod, k_s, slow_isr, fill)
        if back > k_s:
            _, k_e = pod.cpu_step(pod.cpu.settle(back), _ms(rng, 0.05), False)
        else:
            k_e = k_s + _ms(rng, 0.06)
        a, t = pod.cpu_step(k_e, _ms(rng, 0.5) * jit, True)
        stalled += pod.alloc_only.overlapping(a, t)
        root_e = t + _ms(rng, 0.05)
        sp.write_request(table, res, sp.Timeline(
            k, gen, (t0, root_e + _ms(rng, 0.2)), connect / NS_PER_MS, (root_s, root_e), (jdbc_s, jdbc_e),
            (es_s, es_e), (feat_s, feat_e), grpc, (rr_s, rr_e), (entered, left), (k_s, k_e), len(keys),
            len(misses), heavy, coordinator, sorted(set(stalled)), rng.randrange(1, 5_000_000)))
    return table
