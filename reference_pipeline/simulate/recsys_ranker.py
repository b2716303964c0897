"""Blind family `recsys-ranker`: a held-out blind family of issue 25 until its first score of session 4
(bench/RESULTS.md, the honest figure), an open check since.

A recommendation endpoint on the JVM in front of a GPU model server. Shape:

- `envoy-ingress` (2 pods; traced on seeds where seed % 4 != 2): a CLIENT span `router ranker-api
  egress` per request, Envoy's tags (`upstream_cluster`, `http.url`, `upstream_address`). Where it is
  not traced, ranker-api captures the ingress' `X-Request-Start` header
  (`http.request.header.x-request-start`, "t=<epoch s>").
- `ranker-api` (Spring Boot on Tomcat, 8 worker threads per pod (1 vCPU pods), HikariCP with 4
  connections (the database's connection limit shared out between pods and services); 3-5 pods, the
  instance is the pod: `k8s.pod.name` = `host.name`, pid 1; in Zipkin the endpoint's ip:port): SERVER
  `GET /v2/recommendations`, then `CandidateService.fetchCandidates`
  (Caffeine in process, then a Lettuce `GET` on Redis, then on a double miss a JDBC `SELECT
  recsys.candidates` and a Redis `SET`; `candidates.source` says which answered),
  `SeenItemsRepository.findRecent` (JDBC `SELECT recsys.seen_items`), `FeatureClient.getFeatures` (gRPC
  CLIENT `recsys.features.v1.FeatureService/GetFeatures`, one per attempt), gRPC CLIENT
  `inference.GRPCInferenceService/ModelInfer`, and `ResponseAssembler.serialize` (Jackson, one DTO of
  ~1.5 kB per item returned).
- `feature-svc` (Go, otelgrpc, 3 pods): the SERVER span and a gocql CLIENT `SELECT
  features.item_features` (Cassandra, not traced itself).
- `model-server` (a Triton-like server, one GPU and one execution instance per pod, 2-3 pods): the
  SERVER span, the dynamic batcher's wait (its own INTERNAL span `dynamic_batcher.queue` on even seeds,
  `inference.queue.duration_us` / `inference.compute.duration_us` attributes on the SERVER span on odd
  ones) and `model.execute` with the batch's size. The model server also serves an untraced co-tenant
  (a re-ranking job, ~100 requests/s per pod) whose requests share its batches.

Files: OTLP/JSON lines, Jaeger JSON, Zipkin v2 by seed % 3. GC reporting on the ranker's SERVER span by
(seed + seed // 3) % 3: span events `jvm.gc.pause` (`jvm.gc.name`, `jvm.gc.action`, `jvm.gc.cause`,
`jvm.gc.duration_ms`; Zipkin: annotations), GarbageCollectorMXBean deltas over the request
(`jvm.gc.collections.delta`, `jvm.gc.collection_time_ms.delta`), or nothing.

Mechanisms, one per scenario (`steady` plants none; healthy runs have G1 young pauses of 3-12 ms, 2 %
of segments not cached, 0.3 % of Cassandra reads slow):

- `ranker-gc`: an old generation that fills; G1 mixed pauses of 40-180 ms every 0.4-1.5 s per pod, one in
  eight a full GC of 300-600 ms. A paused JVM runs no thread: every ranker-api span in flight on that
  pod is stretched (CPU steps resume after the pause, replies are read after it); feature-svc and the
  model server are not. side: queueing (requests that reach a pod during a pause wait in Tomcat's
  accept queue and are released together).
- `thread-pool-burst`: two traffic bursts at 1.6-1.7x the pods' capacity; requests wait for a Tomcat
  worker thread before the handler starts: the ingress CLIENT start -> ranker SERVER start gap (and the
  X-Request-Start age) grows in the bursts. queueing, stage queue.
- `pool-exhaustion`: a release turned on open-session-in-view: the JDBC connection taken by the first
  query is held until the response is written, so 4 connections serve 8 threads (at 60-80 % of the
  pool's capacity then): getConnection() waits for a connection other requests hold: a gap in
  `SeenItemsRepository.findRecent` before its JDBC span. lock_contention; side queueing (threads
  waiting for connections fill Tomcat's pool too).
- `slow-features`: 8 % of Cassandra reads take ~70 ms (compaction, tombstone scans) under a 2 s
  deadline: feature-svc's SERVER span and its gocql span are slow. slow_dependency at feature-svc.
- `cache-stampede`: a config refresh a third into the run clears every pod's Caffeine cache and bumps
  the Redis key version: misses on both levels, and every request for a segment that reaches Redis
  before the first Postgres read of it is written back goes to Postgres too (no coalescing). Postgres
  slows with the concurrent candidate reads. cache_miss; side slow_dependency (Postgres's own time
  grows with the stampede), lock_contention (the fallback reads take Hikari connections) and queueing
  (the slow requests hold Tomcat's threads).
- `batcher-queue`: the co-tenant's traffic bursts to 1.25x a pod's batched capacity: requests wait in
  the dynamic batcher (`dynamic_batcher.queue` / queue duration) while batches run full. queueing at
  model-server, stage queue.
- `autoscale-burst`: a long burst (1.35x capacity) queues at Tomcat's threads; the HPA adds two pods
  a third of the way in. Their first requests are slow (interpreted code and C1 before C2, lazily
  initialised beans: the first ~600 ms, then CPU steps 25x slower decaying by 4 % a request; an empty
  Caffeine cache). Two causes: queueing on the old pods, cold_start on the new ones.
- `feature-deadline`: the same Cassandra tail, under a 30 ms deadline with Resilience4j retries (3
  attempts, 5 ms apart): the first attempt ends at the deadline with DEADLINE_EXCEEDED (error status,
  `rpc.grpc.status_code` 4), as does feature-svc's SERVER span (the deadline travels as grpc-timeout),
  and a second CLIENT span to feature-svc follows. timeout_retry at ranker-api; side slow_dependency.
- `large-responses`: a new app version asks for 200-500 items per page, its share of requests growing
  from 0 to 60 % through the run: serialisation (Jackson, then Tomcat's gzip: ~35 us an item) and
  `http.response.body.size` grow with `recsys.response.items`. large_payload, stage serialization.
- `network-jitter`: the ranker-api pods on one node (a lossy overlay) see 4 % of their network crossings
  delayed ~30 ms and 26 % by ~1.5 ms, whatever the load: client/server gaps of their calls to
  feature-svc and the model server, and longer Redis/Postgres calls. network at ranker-api, those pods.
- `heavy-model`: a larger model version: a batch runs 22 ms + 0.35 ms per request instead of 2 ms +
  0.3 ms. compute_bound at model-server, stage model_forward; side queueing (requests wait for the
  longer batch before theirs).
- `ranker-gc+slow-features`, `large-responses+feature-deadline`: both causes at once.

No cause lists `accept`: each mechanism leaves evidence that tells it from its neighbours (the GC pauses
end at random times, not on CFS period boundaries; cache misses carry `candidates.source` and a
Postgres fallback; the cut attempts end at one duration with an error).
"""

from __future__ import annotations

import random
from typing import Any

from reference_pipeline.simulate.recsys_calls import (
    EXECUTE,
    FEATURE_RPC,
    FETCH,
    MODEL_RPC,
    QUEUE_SPAN,
    ROOT,
    SEEN,
    SEGMENTS,
    SERIALIZE,
    ranker_ip,
)
from reference_pipeline.simulate.recsys_flow import Batcher, CandidateCache, g1_pauses, open_loop
from reference_pipeline.simulate.recsys_request import RankerRun
from reference_pipeline.simulate.trace_table import (
    NS_PER_S,
    Cause,
    Stalls,
    TraceTable,
    WorkerPool,
    poisson_arrivals,
)

FAMILY = "recsys-ranker"
RANKER, FEATURES, MODEL, INGRESS = "ranker-api", "feature-svc", "model-server", "envoy-ingress"
SCENARIOS = (
    "steady",
    "ranker-gc",
    "thread-pool-burst",
    "pool-exhaustion",
    "slow-features",
    "cache-stampede",
    "batcher-queue",
    "autoscale-burst",
    "feature-deadline",
    "large-responses",
    "network-jitter",
    "heavy-model",
    "ranker-gc+slow-features",
    "large-responses+feature-deadline",
)
FORMATS = ("otlp-json", "jaeger", "zipkin")
GC_STYLES = ("events", "jmx", "none")
THREADS, HIKARI = 8, 4
REQ_MS = 14.0  # a request's mean time on a worker thread in a steady run (sizes the load)
LOADS = (0.4, 0.35, 0.45)
POD_SUFFIX = ("x2k9p", "m4qtz", "b7wnc", "r8hjd", "t3vfl", "k6gys", "p9zqe")
COTENANT_RPS = 100.0
MODEL_COST = {"normal": (2.0, 0.3), "heavy": (22.0, 0.35)}  # batch ms: base, per request


def setup(seed: int) -> dict[str, Any]:
    size = (seed // 2) % 3
    pods = (3, 4, 5)[size]
    return {
        "fmt": FORMATS[seed % 3],
        "pods": pods,
        "model_pods": (2, 2, 3)[size],
        "feature_pods": 3,
        "load": LOADS[(seed + 1) % 3],
        "gc_style": GC_STYLES[(seed + seed // 3) % 3],
        "ingress_traced": seed % 4 != 2,
        "queue_span": seed % 2 == 0,
    }


def _labels(s: dict[str, Any], kind: str, ks: range) -> tuple[str, ...]:
    """Instance labels: pod names (OTLP, Jaeger: k8s.pod.name), or a Zipkin endpoint's ip:port."""
    zipkin = s["fmt"] == "zipkin"
    if kind == RANKER:
        return tuple(f"{ranker_ip(k)}:8080" if zipkin else f"ranker-api-6f8d7c-{POD_SUFFIX[k]}" for k in ks)
    if kind == FEATURES:
        return tuple(f"10.53.0.{10 + k}:50051" if zipkin else f"feature-svc-84d6b-{k}" for k in ks)
    return tuple(f"10.54.0.{10 + k}:8001" if zipkin else f"model-server-gpu-{k}" for k in ks)


def lossy_pods(s: dict[str, Any]) -> list[int]:
    """The ranker pods on node 0 (pod k runs on node k % 3): the node with the lossy overlay."""
    return [k for k in range(s["pods"]) if k % 3 == 0]


def truth(scenario: str, seed: int) -> tuple[Cause, ...]:
    if scenario not in SCENARIOS:
        raise ValueError(f"unknown {FAMILY} scenario {scenario!r}; one of {', '.join(SCENARIOS)}")
    s = setup(seed)
    old = _labels(s, RANKER, range(s["pods"]))
    models = _labels(s, MODEL, range(s["model_pods"]))
    queue_span = QUEUE_SPAN if s["queue_span"] else MODEL_RPC
    causes = {
        "ranker-gc": Cause("gc_pause", None, ROOT, RANKER, old, side=("queueing",)),
        "thread-pool-burst": Cause("queueing", "queue", ROOT, RANKER, old),
        "pool-exhaustion": Cause(
            "lock_contention", "feature_hydration", SEEN, RANKER, old, side=("queueing",)
        ),
        "slow-features": Cause(
            "slow_dependency",
            "downstream",
            FEATURE_RPC,
            FEATURES,
            _labels(s, FEATURES, range(s["feature_pods"])),
        ),
        "cache-stampede": Cause(
            "cache_miss",
            "feature_hydration",
            FETCH,
            RANKER,
            old,
            side=("slow_dependency", "lock_contention", "queueing"),
        ),
        "batcher-queue": Cause("queueing", "queue", queue_span, MODEL, models),
        "feature-deadline": Cause(
            "timeout_retry", "downstream", FEATURE_RPC, RANKER, old, side=("slow_dependency",)
        ),
        "large-responses": Cause("large_payload", "serialization", SERIALIZE, RANKER, old),
        "network-jitter": Cause(
            "network", "downstream", FEATURE_RPC, RANKER, tuple(old[k] for k in lossy_pods(s))
        ),
        "heavy-model": Cause("compute_bound", "model_forward", EXECUTE, MODEL, models, side=("queueing",)),
    }
    if scenario == "steady":
        return ()
    if scenario == "autoscale-burst":
        return (
            causes["thread-pool-burst"],
            Cause("cold_start", None, ROOT, RANKER, _labels(s, RANKER, range(s["pods"], s["pods"] + 2))),
        )
    return tuple(causes[part] for part in scenario.split("+"))


def _resources(
    table: TraceTable, rng: random.Random, s: dict[str, Any], pods: int
) -> tuple[list[int], list[int], list[int], list[int]]:
    sdk = {
        "telemetry.sdk.name": "opentelemetry",
        "k8s.namespace.name": "recsys",
        "service.namespace": "recsys",
    }
    envoy = [
        table.resource(
            {
                "service.name": INGRESS,
                "k8s.pod.name": f"envoy-ingress-6c9f4-{k}",
                "host.name": f"envoy-ingress-6c9f4-{k}",
                "telemetry.sdk.language": "cpp",
                **sdk,
            },
            f"10.50.0.{10 + k}",
            10000,
        )
        for k in range(2)
    ]
    names = _labels({**s, "fmt": "otlp-json"}, RANKER, range(pods))
    ranker = [
        table.resource(
            {
                "service.name": RANKER,
                "service.version": "3.18.2",
                "k8s.pod.name": name,
                "host.name": name,
                "process.pid": 1,
                "k8s.node.name": f"gke-recsys-pool-{k % 3}",
                "process.runtime.name": "OpenJDK Runtime Environment",
                "process.runtime.version": "21.0.5+11-LTS",
                "telemetry.sdk.language": "java",
                "telemetry.distro.name": "opentelemetry-java-instrumentation",
                **sdk,
            },
            ranker_ip(k),
            8080,
        )
        for k, name in enumerate(names)
    ]
    features = [
        table.resource(
            {
                "service.name": FEATURES,
                "k8s.pod.name": name,
                "host.name": name,
                "process.pid": rng.randrange(7, 40),
                "telemetry.sdk.language": "go",
                **sdk,
            },
            f"10.53.0.{10 + k}",
            50051,
        )
        for k, name in enumerate(_labels({**s, "fmt": "otlp-json"}, FEATURES, range(s["feature_pods"])))
    ]
    model = [
        table.resource(
            {
                "service.name": MODEL,
                "k8s.pod.name": name,
                "host.name": name,
                "process.pid": 1,
                "telemetry.sdk.language": "cpp",
                "gpu.model": "NVIDIA L4",
                **sdk,
            },
            f"10.54.0.{10 + k}",
            8001,
        )
        for k, name in enumerate(_labels({**s, "fmt": "otlp-json"}, MODEL, range(s["model_pods"])))
    ]
    return envoy, ranker, features, model


def _service_ms(parts: set[str]) -> float:
    """A request's mean time on a worker thread (the load is a share of the pods' capacity)."""
    extra = (34.0 if "heavy-model" in parts else 0.0) + (5.0 if "large-responses" in parts else 0.0)
    extra += 6.0 if parts & {"slow-features", "feature-deadline"} else 0.0
    return (REQ_MS + extra) * (1.1 if "ranker-gc" in parts else 1.0)


def generate(scenario: str, requests: int, seed: int, **opts: Any) -> TraceTable:
    truth(scenario, seed)
    s = {**setup(seed), **opts}
    parts = set(scenario.split("+"))
    rng = random.Random(seed * 1_000_081 + 73)
    table = TraceTable(seed, 0x5EC5)
    capacity = s["pods"] * THREADS * 1000.0 / _service_ms(parts)  # requests/s the Tomcat pools can serve
    rps = s["load"] * capacity
    nominal = requests / rps  # s
    bursts: tuple[tuple[float, float, float], ...] = ()
    if "thread-pool-burst" in parts:
        bursts = (
            (0.25 * nominal, 0.06 * nominal, 1.7 / s["load"]),
            (0.65 * nominal, 0.05 * nominal, 1.6 / s["load"]),
        )
    autoscale = "autoscale-burst" in parts
    if autoscale:
        bursts = ((0.3 * nominal, 0.25 * nominal, 1.35 / s["load"]),)
    arrivals = poisson_arrivals(rng, rps, requests, bursts)
    horizon = arrivals[-1] + 5 * NS_PER_S
    pods = s["pods"] + (2 if autoscale else 0)
    envoy, ranker, features, model = _resources(table, rng, s, pods)
    ready = [0.0] * s["pods"]
    if autoscale:
        scale_at = (bursts[0][0] + 0.35 * bursts[0][1]) * NS_PER_S
        ready += [scale_at, scale_at + rng.uniform(0.1, 0.25) * bursts[0][1] * NS_PER_S]
    cache = CandidateCache(
        s["pods"], SEGMENTS, arrivals[len(arrivals) // 3] if "cache-stampede" in parts else float("inf")
    )
    for _ in range(pods - s["pods"]):
        cache.add_pod()
    base, per_item = MODEL_COST["heavy" if "heavy-model" in parts else "normal"]
    batchers = [
        Batcher(
            base,
            per_item,
            {
                "inference.model.name": "ranker_dlrm",
                "inference.model.version": "8-xl" if "heavy-model" in parts else "7",
                "gpu.device.id": 0,
            },
        )
        for _ in range(s["model_pods"])
    ]
    cot_bursts: tuple[tuple[float, float, float], ...] = ()
    if "batcher-queue" in parts:
        full = 32 * 1000.0 / (base + per_item * 32)  # a pod's batched capacity, requests/s
        multiple = (1.25 * full - rps / s["model_pods"]) / COTENANT_RPS
        cot_bursts = ((0.3 * nominal, 0.08 * nominal, multiple), (0.7 * nominal, 0.06 * nominal, multiple))
    cotenant = [open_loop(rng, COTENANT_RPS, horizon, cot_bursts) for _ in range(s["model_pods"])]
    lossy = [("network-jitter" in parts and k in lossy_pods(s)) for k in range(pods)]
    start_large = 0.15 * nominal * NS_PER_S
    span_large = max(arrivals[-1] - start_large, 1.0)

    def large_share(t: float) -> float:
        if "large-responses" not in parts:
            return 0.0
        return 0.6 * min(max((t - start_large) / span_large, 0.0), 1.0)

    run = RankerRun(
        table,
        rng,
        s,
        parts,
        envoy,
        ranker,
        features,
        model,
        [Stalls(g1_pauses(rng, horizon, "ranker-gc" in parts)) for _ in range(pods)],
        [WorkerPool(THREADS) for _ in range(pods)],
        [WorkerPool(HIKARI) for _ in range(pods)],
        ready,
        lossy,
        cache,
        batchers,
        cotenant,
        large_share,
    )
    for t0 in arrivals:
        run.request(t0)
    return table
