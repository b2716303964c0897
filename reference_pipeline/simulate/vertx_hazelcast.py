"""Blind family `vertx-hazelcast`: a JVM product-recommendation scoring service (vertx_hazelcast_flow.py:
one request's path; vertx_hazelcast_physics.py: event loops, pools, ZGC, JIT, near cache, Hazelcast,
Envoy, the model server; vertx_hazelcast_spans.py: the conventions; vertx_hazelcast_write.py: the spans).
Every request is a sequence of steps run in time order (a generator per request), so each shared
resource (a loop, a pool, a partition thread, Envoy's counters, the batcher) sees its calls in order.

Shape: `reco-gateway` (Eclipse Vert.x on Java 21, 4-6 pods of 2-4 cores, 2 event loops per core)
serves `GET /v1/recommendations/:userId` behind an Envoy sidecar (`reco-gateway-envoy`). A connection
is pinned to one event loop; every piece of a request's handler work (parsing, callbacks, assembling
candidates, blending, writing) runs on that loop, one thing at a time. Per request: the user's
features from a Hazelcast IMap (no near cache) and, through `executeBlocking` on the 20-thread worker
pool, the user's recent events from PostgreSQL (JDBC); then ~60 candidate items' features by `getAll`
through the client's per-pod LRU near cache (misses go to the owning members: one operation per
partition, each on its member's partition thread (partition mod 8), all in parallel; their
deserialisation runs on the loop); `CandidateAssembler.assemble`
(allocation-heavy CPU on the loop); `ModelInfer` over gRPC through Envoy's egress (a circuit breaker on
outstanding requests: 503 `UO` at once when full; outlier detection: 5 consecutive 5xx eject a host for
30 s) to `model-server` (3-4 Triton-like hosts: a dynamic batcher, two model instances per GPU; the
client retries UNAVAILABLE / INTERNAL with exponential backoff, 4 attempts, then falls back to an
unscored order); `RankBlender.blend` on the loop. A second route, `GET /v1/users/:userId/history`, runs
one heavy query on the same worker pool. The JVM runs ZGC (allocating threads stall when the collector
falls behind) and a tiered JIT (invocation-counted: a new process runs interpreted, then C1, then C2).

Healthy noise: jitter everywhere; ~4 % near-cache misses (the Zipf tail of 200 k items, TTL expiry);
1 % slow PostgreSQL statements; rare 1-3 ms allocation stalls; Hazelcast member GC pauses; the history
route's trickle on the worker pool; the model server's batching at ~60-70 % load (its queue is most of
a steady request's tail); an occasional breaker overflow and retry.

Conventions by seed (seed % 3): 0: OTLP/JSON, new semconv, the agent's random `service.instance.id`
per JVM, Envoy spans, Hazelcast as `@WithSpan` INTERNAL spans (`UserFeatureStore.get`,
`ItemFeatureStore.getAll`), the model server's `compute` span and batcher timestamps, allocation stalls
as events `jvm.gc.zgc.allocation_stall`, a new JVM's tier-up compilations of the hot path as events
`jvm.jit.compilation` on `CandidateAssembler.assemble`, thread details. 1: Jaeger, old semconv, host.name +
process.pid, Envoy spans, no Hazelcast spans, no model-server internals, no GC events, thread details.
2: Zipkin v2, old semconv, endpoints (ip:port), no Envoy spans, Hazelcast as manual CLIENT spans
(`IMap.get`, `IMap.getAll`), model-server internals, stalls as annotations `ZGC Allocation Stall`, no
thread details.

Mechanisms (scenario: truth):
- `eventloop-blocking-jdbc`: a new GDPR consent check runs a synchronous JDBC query on the event loop
  for 4 % of requests (median 45 ms): every request pinned to that loop waits (its reading, its
  callbacks): queueing, stage queue, the Vert.x SERVER span (side slow_dependency).
- `worker-pool-burst`: a mobile release hammers the history route asking a year of events (~60 ms
  queries through executeBlocking, against ~8 ms for the web app's usual 30 days) past the pools'
  capacity for 10 % of the run; the recommendation route's JDBC job waits in the pool's queue before
  its span starts: queueing, feature_hydration, the JDBC span.
- `zgc-allocation-stalls`: a leak on one pod raises the live set from 20 % of the run; allocating
  threads stall 10-200 ms, more often as the heap fills: gc_pause at that pod (side queueing).
- `rolling-deploy-cold-jit`: a rolling deploy replaces the pods one at a time; each new JVM runs its
  hot paths interpreted, then C1, then C2, and pays first-use costs: cold_start at
  `CandidateAssembler.assemble` on the new pods (side queueing).
- `near-cache-invalidation`: a bulk `putAll` on the item-features map from 30 % to 55 % of the run
  sends invalidations that empty every pod's near cache (and invalidate most entries put back while
  it runs); the update keeps the partition threads ~60 % busy, and a getAll that misses fans out to
  ~40 partition threads and waits for the slowest: cache_miss, feature_hydration, the items' getAll span
  (the SERVER span where Hazelcast is not traced) (side slow_dependency).
- `partition-migration`: a member restarts (leaves at 20 % of the run, rejoins at 45 %): its
  partitions' backups are promoted (~0.4 s), then partitions migrate back when it rejoins (10 at a
  time, ~0.24 s each); an operation on a migrating partition is retried after
  the client's 1 s retry pause: slow_dependency at the getAll / SERVER span, accept timeout_retry.
- `breaker-overflow-burst`: a 2.6x burst for 12 % of the run saturates the model servers; Envoy's
  breaker rejects calls at once (503 UO) and the client retries with backoff: timeout_retry at
  `ModelInfer` (CLIENT), accept queueing (side slow_dependency).
- `outlier-ejection`: one model-server host's GPU fails from 30 % of the run (fast INTERNAL errors);
  each Envoy ejects it after 5 consecutive 5xx and the other hosts run near saturation: queueing at the
  model server's SERVER span on the other hosts (side timeout_retry, slow_dependency).
- `batcher-max-delay`: max_queue_delay raised from 0.3 to 25 ms with traffic at 30 %: batches never
  fill, the first request of each batch waits out the whole delay: queueing at model-server (side
  slow_dependency).
- `larger-model`: model version 4 (10.5 -> 14.2 ms per request in a batch, 2 -> 3 ms per batch):
  compute_bound at `compute` (the SERVER span without internals) (side queueing, slow_dependency).
- Two causes: `zgc-allocation-stalls+outlier-ejection`, `rolling-deploy-cold-jit+larger-model` (one
  release of both), `near-cache-invalidation+partition-migration` (one maintenance window).

Truth instances: as the store names them (service.instance.id, host.name:process.pid, ip:port); gateway
causes name the pods that exist from the start, the cold JIT the pods the deploy made.
"""

from __future__ import annotations

import random
from typing import Any

from reference_pipeline.simulate import vertx_hazelcast_spans as sp
from reference_pipeline.simulate.trace_table import NS_PER_S, Cause, TraceTable, poisson_arrivals
from reference_pipeline.simulate.vertx_hazelcast_flow import World, simulate
from reference_pipeline.simulate.vertx_hazelcast_physics import WORKER_POOL

FAMILY = "vertx-hazelcast"
SINGLES = (
    "eventloop-blocking-jdbc",
    "worker-pool-burst",
    "zgc-allocation-stalls",
    "rolling-deploy-cold-jit",
    "near-cache-invalidation",
    "partition-migration",
    "breaker-overflow-burst",
    "outlier-ejection",
    "batcher-max-delay",
    "larger-model",
)
PAIRS = (
    "zgc-allocation-stalls+outlier-ejection",
    "rolling-deploy-cold-jit+larger-model",
    "near-cache-invalidation+partition-migration",
)
SCENARIOS = ("steady", *SINGLES, *PAIRS)
BROKEN_HOST = 0
_SETUPS = (
    {
        "fmt": "otlp-json",
        "style": sp.Style("new", "uuid", True, "withspan", True, "otlp", True, jit_events=True),
        "pods": 4,
        "cores": 2,
        "members": 3,
        "hosts": 3,
        "rps": 300.0,
        "max_pending": 8,
    },
    {
        "fmt": "jaeger",
        "style": sp.Style("old", "host-pid", True, None, False, None, True),
        "pods": 5,
        "cores": 3,
        "members": 4,
        "hosts": 3,
        "rps": 290.0,
        "max_pending": 8,
    },
    {
        "fmt": "zipkin",
        "style": sp.Style("old", "endpoint", False, "manual", True, "annotation", False),
        "pods": 6,
        "cores": 2,
        "members": 5,
        "hosts": 4,
        "rps": 440.0,
        "max_pending": 6,
    },
)


def setup(seed: int) -> dict[str, Any]:
    return dict(_SETUPS[seed % 3])


def style(seed: int) -> sp.Style:
    return _SETUPS[seed % 3]["style"]


def zgc_pod(seed: int) -> int:
    return 1 % setup(seed)["pods"]


def truth(scenario: str, seed: int) -> tuple[Cause, ...]:
    if scenario not in SCENARIOS:
        raise ValueError(f"unknown {FAMILY} scenario {scenario!r}; one of {', '.join(SCENARIOS)}")
    s, st = setup(seed), style(seed)
    res = sp.Resources(TraceTable(seed, 0), st, seed)
    old = tuple(res.label(sp.GATEWAY, 0, k) for k in range(s["pods"]))
    new = tuple(res.label(sp.GATEWAY, 1, k) for k in range(s["pods"]))
    hosts = tuple(res.label(sp.MODEL, 0, h) for h in range(s["hosts"]))
    items = st.hz_span(1) or sp.ROOT
    causes = {
        "eventloop-blocking-jdbc": Cause(
            "queueing", "queue", sp.ROOT, sp.GATEWAY, old, side=("slow_dependency",)
        ),
        "worker-pool-burst": Cause("queueing", "feature_hydration", sp.EVENTS_SPAN, sp.GATEWAY, old),
        "zgc-allocation-stalls": Cause(
            "gc_pause", "preprocessing", sp.ROOT, sp.GATEWAY, (old[zgc_pod(seed)],), side=("queueing",)
        ),
        "rolling-deploy-cold-jit": Cause(
            "cold_start", "preprocessing", sp.ASSEMBLE, sp.GATEWAY, new, side=("queueing",)
        ),
        "near-cache-invalidation": Cause(
            "cache_miss", "feature_hydration", items, sp.GATEWAY, old, side=("slow_dependency",)
        ),
        "partition-migration": Cause(
            "slow_dependency", "feature_hydration", items, sp.GATEWAY, old, accept=("timeout_retry",)
        ),
        "breaker-overflow-burst": Cause(
            "timeout_retry",
            "model_forward",
            sp.INFER,
            sp.GATEWAY,
            old,
            accept=("queueing",),
            side=("slow_dependency",),
        ),
        "outlier-ejection": Cause(
            "queueing",
            "model_forward",
            sp.INFER,
            sp.MODEL,
            tuple(h for i, h in enumerate(hosts) if i != BROKEN_HOST),
            side=("timeout_retry", "slow_dependency"),
        ),
        "batcher-max-delay": Cause(
            "queueing", "model_forward", sp.INFER, sp.MODEL, hosts, side=("slow_dependency",)
        ),
        "larger-model": Cause(
            "compute_bound",
            "model_forward",
            st.model_span(),
            sp.MODEL,
            hosts,
            side=("queueing", "slow_dependency"),
        ),
    }
    return tuple(causes[part] for part in scenario.split("+") if part != "steady")


def generate(scenario: str, requests: int, seed: int, **opts: Any) -> TraceTable:
    truth(scenario, seed)
    s = {**setup(seed), **opts}
    parts = frozenset(scenario.split("+")) - {"steady"}
    rng = random.Random(seed * 1_000_003 + 2424)
    table = TraceTable(seed, 0x24A)
    rps = s["rps"] * (0.3 if "batcher-max-delay" in parts else 1.0)
    run_s = requests / rps
    bursts = ((0.4 * run_s, 0.12 * run_s, 2.6),) if "breaker-overflow-burst" in parts else ()
    arrivals = poisson_arrivals(rng, rps, requests, bursts)
    run_ns = run_s * NS_PER_S
    world = World.build(
        rng, s, parts, run_ns, arrivals[-1] + 30 * NS_PER_S, seed, table, zgc_pod(seed), BROKEN_HOST
    )
    events = [(t, 0) for t in arrivals]
    rate = 0.06 * rps  # the history route's own traffic (the web app's 30 days)
    events += [(t, 1) for t in poisson_arrivals(rng, rate, max(1, int(rate * run_s)))]
    if "worker-pool-burst" in parts:
        flood = 1.4 * s["pods"] * WORKER_POOL / 0.060  # history queries of ~60 ms: 1.4x the pools' capacity
        events += [(0.35 * run_ns + t, 3) for t in poisson_arrivals(rng, flood, int(flood * 0.1 * run_s))]
    events += [(t, 2) for t in world.update_jobs(rng)]
    simulate(world, rng, sorted(events))
    return table
