"""Blind family `scala-akka`: a food-delivery app's ETA prediction in Scala on an Akka Cluster
(scala_akka_cluster.py: the physics; scala_akka_spans.py: the conventions).

Shape: an AWS ALB (no spans; on some seeds its `X-Amzn-Trace-Id` header recorded on the server span)
sends `GET /v1/orders/{orderId}/eta` to one of the `eta-api` pods (Akka HTTP; 6-8 pods, each a member
of one Akka Cluster). The route asks (ask pattern, 300 ms timeout) the order's restaurant entity and
its courier entity (cluster sharding: entity -> shard -> node; an entity on another node is reached
over Artery remoting, +0.3-1 ms each way) and, beside them, reads the restaurant's prep-time statistics
from PostgreSQL over JDBC (on a dedicated blocking dispatcher). An entity handles its mailbox one
message at a time on its node's default dispatcher (a fork-join pool, one thread per core, that also
runs the routes and every future's callbacks); a restaurant's message costs more with its open
orders. An entity that is not in memory (first message after a start, or after its shard moved) is
recovered first: its latest snapshot, then its journal events after it, 100 per page, from Cassandra
(akka-persistence-cassandra). Then the route searches couriers near the restaurant in Redis
(`GEOSEARCH` from 2 km, the radius doubled, up to 16 km, until 8 of the returned couriers are free: all
returned are scored) and asks the traffic service for speeds (HTTP, 250 ms request timeout, behind an
Akka circuit breaker: 5 consecutive failures open it for 30 s, then one trial call; open, the code
falls back to an in-process table of historical speeds), assembles features, predicts with XGBoost4J
in process (JNI, a native pool of one thread per core: `EtaModel.predict`, a manual span) and publishes
the ETA to Kafka (acks=all, linger 5 ms) before it responds. JVM: G1 (4 GB heap), a tiered JIT;
containers under a CFS quota (100 ms period).

Healthy noise: jitter everywhere; G1 young pauses every ~1.5 s; a CFS-throttled period now and then; a
few entities not in memory (a courier starting a shift) recovered on their first ask; the odd slow
JDBC query; 4 % of searches on the city's edge growing their radius once or twice; Redis fork stalls;
the odd slow traffic call. The prep-time query (~16 ms) is the slowest step of a steady request.

Conventions by seed (seed % 3): 0: OTLP/JSON, new semconv, instances by pod name (service.instance.id),
ask spans exported, G1 pauses as span events (a JFR bridge). 1: Jaeger JSON, old semconv (the root is
`akka.request`), instances by the Akka node's host:port, no ask spans, no GC events, the ALB header.
2: Zipkin v2, new semconv, instances are endpoints (ip:port), ask spans, no GC events, the ALB header.

Mechanisms (scenario: truth):
- `hot-restaurant-lunch`: a lunch rush (1.4x arrivals in the middle 40 % of the run) with one chain
  restaurant's share rising until its entity is asked ~10 % more than one mailbox serves (each message
  ~8 ms with its open orders): asks to it wait in its mailbox, asks to every other entity do not.
  lock_contention (one message at a time: a serialized critical section), accept queueing, stage
  feature_hydration, the restaurant ask span (the server span where asks are not exported), every pod
  (its asks come from all of them).
- `jdbc-on-dispatcher`: a canary build on one pod runs the prep-time query on the default dispatcher:
  each blocks a dispatcher thread for the query; when they hold them all, every route, callback and
  entity on that pod waits for a thread: queueing, stage None, the server span, that pod.
- `shard-rebalance`: a pod joins at 30 % of the run (a fresh JVM); the coordinator moves 1/(N+1) of the
  shards to it (a hand-off buffering their messages ~0.25 s), and each of their entities is recovered
  on the new pod at its first message (snapshot + journal pages): cold_start, accept cache_miss, stage
  feature_hydration, span `SELECT akka.messages`, the new pod (side queueing, slow_dependency).
- `traffic-breaker`: the traffic service degrades from 25 % of the run (its median from 60 to 500 ms):
  slow calls, then timeouts, then the breaker opens and requests take the fast fallback:
  slow_dependency, accept timeout_retry, stage downstream, the traffic client span, every pod.
- `sparse-geo-radius`: 40 % of orders from a sparse suburb where most couriers are busy: the radius
  doubles to 8-16 km, hundreds of couriers come back and are scored: large_payload, accept
  compute_bound, stage model_forward, `EtaModel.predict` (`eta.candidates.count`), every pod.
- `g1-old-gen`: one pod's old generation near full: G1 mixed collections every ~0.3 s (60-200 ms) and
  an occasional full collection: gc_pause, stage None, the server span, that pod (side queueing).
- `cfs-throttling`: two pods' CPU limit lowered below the JIT + GC threads' bursts: in over half of
  their 100 ms periods the quota runs out 20-70 ms before the period ends: cpu_throttling, stage None,
  the server span, those pods (side queueing).
- `deploy-cold-jit`: a rolling deploy replaces three pods from 35 % of the run: the new JVMs run
  interpreted and C1 code at first (Scala code ~10x slower, decaying with the requests served; the
  native model is not JIT-compiled) and recover the entities of the shards handed to them:
  cold_start, stage None, the server span, the new pods (side queueing, cache_miss).
- `kafka-leader-move`: the leader of a third of the topic's partitions moves at 40 % of the run; sends
  to them wait for the metadata refresh and the new ISR (acks=all) for ~18 % of the run:
  slow_dependency, stage downstream, the producer span, every pod.
- `artery-noisy-link`: a lossy link between two pods: half the Artery messages between them wait
  15-70 ms for retransmission: network, stage feature_hydration, the ask spans (the server span where
  asks are not exported), those two pods.
- Two causes: `hot-restaurant-lunch+traffic-breaker` (the lunch rush also overloads the traffic
  service), `deploy-cold-jit+cfs-throttling` (a deploy rolling while two other pods run under a cut limit),
  `artery-noisy-link+g1-old-gen`.
"""

from __future__ import annotations

import random
from typing import Any

from reference_pipeline.simulate import scala_akka_spans as sp
from reference_pipeline.simulate.scala_akka_flow import simulate
from reference_pipeline.simulate.trace_table import Cause, TraceTable

FAMILY = "scala-akka"
SINGLES = ("hot-restaurant-lunch", "jdbc-on-dispatcher", "shard-rebalance", "traffic-breaker",
           "sparse-geo-radius", "g1-old-gen", "cfs-throttling", "deploy-cold-jit", "kafka-leader-move",
           "artery-noisy-link")
PAIRS = ("hot-restaurant-lunch+traffic-breaker", "deploy-cold-jit+cfs-throttling",
         "artery-noisy-link+g1-old-gen")
SCENARIOS = ("steady", *SINGLES, *PAIRS)
_SETUPS = (
    {"fmt": "otlp-json", "semconv": "new", "ident": "pod", "asks": True, "gc_events": True, "alb": False,
     "nodes": 6, "cores": 2, "rps": 360.0, "traffic_pods": 3},
    {"fmt": "jaeger", "semconv": "old", "ident": "hostport", "asks": False, "gc_events": False, "alb": True,
     "nodes": 8, "cores": 2, "rps": 480.0, "traffic_pods": 2},
    {"fmt": "zipkin", "semconv": "new", "ident": "endpoint", "asks": True, "gc_events": False, "alb": True,
     "nodes": 7, "cores": 2, "rps": 420.0, "traffic_pods": 3},
)


def setup(seed: int) -> dict[str, Any]:
    return dict(_SETUPS[seed % 3])


def style(seed: int) -> sp.Style:
    s = setup(seed)
    return sp.Style(s["semconv"], s["ident"], s["asks"], s["gc_events"], s["alb"])


def special_nodes(seed: int) -> dict[str, tuple[int, ...]]:
    """Which pods each pod-local mechanism acts on (indexes; a joined or deployed pod is new)."""
    n = setup(seed)["nodes"]
    return {"jdbc": (seed % n,), "gc": ((seed + 2) % n,), "link": ((seed + 3) % n, (seed + 5) % n),
            "throttled": (seed % (n - 3), (seed + 2) % (n - 3)), "joined": (n,),
            "deployed": (n, n + 1, n + 2), "replaced": (n - 3, n - 2, n - 1)}


def truth(scenario: str, seed: int) -> tuple[Cause, ...]:
    if scenario not in SCENARIOS:
        raise ValueError(f"unknown {FAMILY} scenario {scenario!r}; one of {', '.join(SCENARIOS)}")
    s, st, where = setup(seed), style(seed), special_nodes(seed)
    n = s["nodes"]

    def pods(idx, generation: int = 0) -> tuple[str, ...]:
        return tuple(st.label(sp.API, k, generation) for k in idx)

    every = pods(range(n))
    ask = st.ask("Restaurant") if st.asks else st.root
    causes = {
        "hot-restaurant-lunch": Cause("lock_contention", "feature_hydration", ask, sp.API, every,
                                      accept=("queueing",)),
        "jdbc-on-dispatcher": Cause("queueing", None, st.root, sp.API, pods(where["jdbc"])),
        "shard-rebalance": Cause("cold_start", "feature_hydration", sp.JOURNAL, sp.API, pods(where["joined"]),
                                 accept=("cache_miss",), side=("queueing", "slow_dependency")),
        "traffic-breaker": Cause("slow_dependency", "downstream", st.traffic_client, sp.API, every,
                                 accept=("timeout_retry",)),
        "sparse-geo-radius": Cause("large_payload", "model_forward", sp.PREDICT, sp.API, every,
                                   accept=("compute_bound",)),
        "g1-old-gen": Cause("gc_pause", None, st.root, sp.API, pods(where["gc"]), side=("queueing",)),
        "cfs-throttling": Cause("cpu_throttling", None, st.root, sp.API, pods(where["throttled"]),
                                side=("queueing",)),
        "deploy-cold-jit": Cause("cold_start", None, st.root, sp.API, pods(where["deployed"], 1),
                                 side=("queueing", "cache_miss")),
        "kafka-leader-move": Cause("slow_dependency", "downstream", st.producer, sp.API, every),
        "artery-noisy-link": Cause("network", "feature_hydration", ask if st.asks else st.root, sp.API,
                                   pods(where["link"])),
    }
    return tuple(causes[part] for part in scenario.split("+") if part != "steady")


def generate(scenario: str, requests: int, seed: int, **opts: Any) -> TraceTable:
    truth(scenario, seed)
    s = {**setup(seed), **opts}
    parts = set(scenario.split("+")) - {"steady"}
    rng = random.Random(seed * 1_000_003 + 3131)
    table = TraceTable(seed, 0x5CA)
    simulate(rng, table, style(seed), s, parts, requests, special_nodes(seed))
    return table
