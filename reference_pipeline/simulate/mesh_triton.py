"""Blind family `mesh-triton`: an Istio service mesh in front of a GPU model server. Written from the
mechanics of the real systems only (issue 25), by a writer who had not read the diagnosis.

Shape: every pod has an Envoy sidecar. A request enters through the Istio ingress gateway and reaches
`score` (Rust, axum on tokio, 3-4 pods): `load_user_features` reads a Redis Cluster (`HMGET` then
`LRANGE` on `user:{uid}:*`, one hash slot per user, 6 masters; redis traffic bypasses the sidecar),
`build_infer_request` assembles the candidates' tensors (~240 candidates, ~280 B each),
`inference.GRPCInferenceService/ModelInfer` calls Triton (`triton-ranker`, 2 pods, one GPU each, a
cross-encoder `ranker_xenc` behind the dynamic batcher: preferred batch sizes 4 and 8, max 8, a max
queue delay of 1-4 ms; instance_group count 1 or 2 on the GPU; compute grows with the padded
candidates), `rerank`, then `POST` to `policy` (Python FastAPI, 4 pods) under Envoy's retry policy
(perTryTimeout 80 ms, 2 retries on 5xx/reset to another host, 0-25 ms jittered backoff; no
outlierDetection in the DestinationRule). Envoy: LEAST_REQUEST (two random choices) per sidecar, a
few hundred µs per proxy hop, and an mTLS handshake on each new upstream connection (the mesh's
plugged-in CA issues RSA-4096 workload keys: ~6.5 ms per signature, the server half on the upstream
sidecar's two worker threads).

Conventions by seed (setup):
- seed 0: OTLP/JSON; sidecar and gateway spans exported (component=proxy, upstream_cluster,
  response_flags, request_size; the gateway's span is the CLIENT root); Triton's trace (OpenTelemetry
  mode) as an `InferRequest` SERVER span whose model span carries REQUEST_START ... REQUEST_END as
  events; instances by k8s.pod.name (with k8s.node.name); new semconv (server.address, db.query.text).
- seed 1: Jaeger; no proxy spans (the mesh's tracing is off; apps trace themselves, the first span is
  score's); Triton's timestamps as child spans (`queue`, `compute` > `compute_input`,
  `compute_infer`, `compute_output`); instances by host.name; old semconv (net.peer.*, db.statement,
  http.method).
- seed 2: Zipkin v2; proxy spans exported; Triton's trace absent (only its sidecar's inbound span
  shows the server side); instances by endpoint ip:port; new semconv; names lower-cased.

Healthy noise: RDB forks stall a shard 5-25 ms about once a minute, 0.4 % of requests open a new
connection (a handshake), 1.2 % of policy calls are slow (a few per thousand pass the per-try timeout
and are retried), batching waits up to the queue delay, jitter everywhere.

Mechanisms (truth):
- `triton-queue-burst`: arrivals x3.5 for 8 % of the run; the batcher's queue grows while the
  arrival rate is over what the GPUs finish -> queueing at Triton's queue (stage queue).
- `redis-resharding`: a new master joins; slots move one by one from shard 2: MIGRATE batches of
  large feature hashes block the source (RESTORE the target) ~110 ms at a time; a key of the slot in
  flight that already moved answers ASK, a slot moved since the client's last map answers MOVED (an
  errored span, then the command again to the new owner) -> slow_dependency at the Redis commands.
- `triton-cold-scaleout`: load x1.6 from a quarter of the run; the HPA's new Triton pod (model
  loaded before it is ready) joins at 45 %: CUDA context on its first batch, cudnn.benchmark on each
  new batch shape, a decaying warm-up factor -> cold_start at that pod (queueing behind the slow
  batches and on the old pods before it joined: side).
- `mtls-handshake-churn`: a mesh-wide DestinationRule set maxRequestsPerConnection: 1: every hop
  (gateway->score, score->triton, score->policy) opens a connection and pays an mTLS handshake ->
  network on the hop to Triton (the outbound sidecar's span, or the gRPC call where none is exported).
- `policy-per-try-timeout`: one policy pod's handler takes ~115 ms; tries to it are cut at 80 ms
  (its inbound span: status 0, DC; its handler runs on) and retried on another pod after a backoff
  and a new connection -> timeout_retry at score's policy call (slow_dependency, network: side).
- `cfs-throttling`: score's CPU limit is 80m (8 ms per 100 ms period; a request needs ~3.5 ms of CPU);
  once a period's quota is spent every thread stops until the boundary, the work left over starts the
  next period -> cpu_throttling at score (Rust: no GC to report).
- `candidate-growth`: a client rollout (30 % -> 60 % of the run, 90 % of requests at the end) sends
  2.3x the candidates: tensors, bytes and GPU compute grow with them -> large_payload at the inference
  call (queueing and compute_bound at Triton: side).
- `noisy-neighbour`: score's first pod shares its node with a batch job (CPU steal): CPU work x3.5 and
  a wake-up delay (~2 ms median) on every await -> compute_bound at that pod; `unexplained_tail` is
  accepted: steal time is in no span, nothing in the trace names the neighbour, only that pod's steps
  are slower.
Pairs: `triton-queue-burst+redis-resharding`, `cfs-throttling+policy-per-try-timeout`,
`candidate-growth+mtls-handshake-churn`.
"""

from __future__ import annotations

import random
from typing import Any

from reference_pipeline.simulate.mesh_triton_flow import Plan, simulate
from reference_pipeline.simulate.mesh_triton_physics import redis_addresses
from reference_pipeline.simulate.mesh_triton_spans import (
    GATEWAY,
    POLICY,
    PORTS,
    SCORE,
    SIDECAR_PORT,
    TRITON,
    Emitter,
    instance_label,
    names,
    resource,
    sidecar_service,
)
from reference_pipeline.simulate.trace_table import Cause, TraceTable

FAMILY = "mesh-triton"
SINGLE = (
    "triton-queue-burst",
    "redis-resharding",
    "triton-cold-scaleout",
    "mtls-handshake-churn",
    "policy-per-try-timeout",
    "cfs-throttling",
    "candidate-growth",
    "noisy-neighbour",
)
PAIRS = (
    "triton-queue-burst+redis-resharding",
    "cfs-throttling+policy-per-try-timeout",
    "candidate-growth+mtls-handshake-churn",
)
SCENARIOS = ("steady", *SINGLE, *PAIRS)
_SETUPS = (
    {
        "fmt": "otlp-json",
        "proxies": True,
        "triton": "events",
        "identity": "k8s.pod.name",
        "semconv": "new",
        "rps": 45.0,
        "pods": 3,
        "gpu_instances": 1,
        "queue_delay_ms": 2.0,
    },
    {
        "fmt": "jaeger",
        "proxies": False,
        "triton": "spans",
        "identity": "host.name",
        "semconv": "old",
        "rps": 60.0,
        "pods": 4,
        "gpu_instances": 2,
        "queue_delay_ms": 1.0,
    },
    {
        "fmt": "zipkin",
        "proxies": True,
        "triton": None,
        "identity": "endpoint",
        "semconv": "new",
        "rps": 38.0,
        "pods": 3,
        "gpu_instances": 1,
        "queue_delay_ms": 4.0,
    },
)
_IP_BLOCK = {GATEWAY: 0, SCORE: 1, TRITON: 2, POLICY: 3}
_COUNT = {GATEWAY: 2, SCORE: 0, TRITON: 3, POLICY: 4}


def setup(seed: int) -> dict[str, Any]:
    return dict(_SETUPS[seed % 3])


def pod_names(seed: int, service: str) -> list[str]:
    """Pod names as Kubernetes draws them (a replica set hash, then five characters)."""
    rng = random.Random(seed * 131 + _IP_BLOCK[service])
    letters = "bcdfghjklmnpqrstvwxz2456789"
    replica_set = "".join(rng.choice(letters) for _ in range(9 if service != GATEWAY else 10))
    count = _COUNT[service] or setup(seed)["pods"]
    return [
        f"{service}-{replica_set}-" + "".join(rng.choice(letters) for _ in range(5)) for _ in range(count)
    ]


def pod_ip(service: str, k: int) -> str:
    return f"10.48.{_IP_BLOCK[service]}.{11 + k}"


def labels(seed: int, service: str, sidecar: bool = False) -> tuple[str, ...]:
    s = setup(seed)
    port = SIDECAR_PORT if sidecar else PORTS[service]
    return tuple(
        instance_label(s, pod, pod_ip(service, k), port) for k, pod in enumerate(pod_names(seed, service))
    )


def truth(scenario: str, seed: int) -> tuple[Cause, ...]:
    if scenario not in SCENARIOS:
        raise ValueError(f"unknown {FAMILY} scenario {scenario!r}; one of {', '.join(SCENARIOS)}")
    s, n = setup(seed), names(setup(seed))
    score = labels(seed, SCORE)
    if s["triton"] is not None:
        triton_at: tuple[str, str, tuple[str, ...]] = (n["model"], TRITON, labels(seed, TRITON))
        queue_span = n["model"] if s["triton"] == "events" else n["queue"]
        compute_span = n["model"] if s["triton"] == "events" else n["compute"]
    else:  # no Triton trace: its sidecar's inbound span is the server side the run has
        triton_at = (n["proxy_triton"], sidecar_service(TRITON), labels(seed, TRITON, sidecar=True))
        queue_span = compute_span = n["proxy_triton"]
    old_tritons = triton_at[2][:2]
    causes = {
        "triton-queue-burst": Cause("queueing", "queue", queue_span, triton_at[1], old_tritons),
        "redis-resharding": Cause("slow_dependency", "feature_hydration", n["hmget"], SCORE, score),
        "triton-cold-scaleout": Cause(
            "cold_start", "model_forward", compute_span, triton_at[1], triton_at[2][2:], side=("queueing",)
        ),
        "mtls-handshake-churn": (
            Cause(
                "network", "downstream", n["proxy_triton"], sidecar_service(SCORE), labels(seed, SCORE, True)
            )
            if s["proxies"]
            else Cause("network", "downstream", n["infer"], SCORE, score)
        ),
        "policy-per-try-timeout": Cause(
            "timeout_retry", "downstream", n["policy_call"], SCORE, score, side=("slow_dependency", "network")
        ),
        "cfs-throttling": Cause("cpu_throttling", "preprocessing", n["build"], SCORE, score),
        "candidate-growth": Cause(
            "large_payload", "model_forward", n["infer"], SCORE, score, side=("queueing", "compute_bound")
        ),
        "noisy-neighbour": Cause(
            "compute_bound", "preprocessing", n["build"], SCORE, score[:1], accept=("unexplained_tail",)
        ),
    }
    return tuple(causes[part] for part in scenario.split("+") if part != "steady")


def plan(scenario: str) -> Plan:
    parts = set(scenario.split("+"))
    return Plan(
        bursts=((0.40, 0.08, 3.5),)
        if "triton-queue-burst" in parts
        else ((0.25, 10.0, 1.6),)
        if "triton-cold-scaleout" in parts
        else (),
        cold_at=0.45 if "triton-cold-scaleout" in parts else None,
        growth="candidate-growth" in parts,
        quota_ms=8.0 if "cfs-throttling" in parts else None,
        steal_pod=0 if "noisy-neighbour" in parts else None,
        churn="mtls-handshake-churn" in parts,
        slow_policy=1 if "policy-per-try-timeout" in parts else None,
        reshard="redis-resharding" in parts,
    )


def _resources(table: TraceTable, s: dict[str, Any], seed: int, tritons: int) -> dict[str, list[int]]:
    node_rng = random.Random(seed * 17 + 3)
    nodes = [
        f"gke-ml-prod-pool-{p}-{node_rng.getrandbits(32):08x}-{node_rng.getrandbits(16):04x}"
        for p in ("cpu", "cpu", "cpu", "gpu", "gpu", "gpu")
    ]
    out: dict[str, list[int]] = {}
    language = {SCORE: "rust", TRITON: "cpp", POLICY: "python", GATEWAY: "cpp"}
    for service in (GATEWAY, SCORE, TRITON, POLICY):
        pods = pod_names(seed, service)[: tritons if service == TRITON else None]
        for k, pod in enumerate(pods):
            node = nodes[3 + k % 3] if service == TRITON else nodes[k % 3]
            ip = pod_ip(service, k)
            if service != GATEWAY and (service != TRITON or s["triton"] is not None):
                out.setdefault(service, []).append(
                    resource(table, s, service, pod, node, ip, PORTS[service], language[service])
                )
            if s["proxies"]:
                out.setdefault(sidecar_service(service), []).append(
                    resource(table, s, sidecar_service(service), pod, node, ip, SIDECAR_PORT, "cpp")
                )
    return out


def generate(scenario: str, requests: int, seed: int, **opts: Any) -> TraceTable:
    truth(scenario, seed)
    s = {**setup(seed), **opts}
    p = plan(scenario)
    tritons = 3 if p.cold_at is not None else 2
    reqs = simulate(s, p, requests, seed)
    table = TraceTable(seed, 0x16E5)
    res = _resources(table, s, seed, tritons)
    emitter = Emitter(table, s, res, redis_addresses())
    for r in reqs:
        emitter.emit(r)
    return table
