"""Blind family `go-ray`: a product-search relevance API, a Go gateway in front of a Feast feature server
and a Ray Serve cross-encoder (go_ray_runtime.py: the gateway's Go runtime under its CPU quota;
go_ray_serve.py: Feast, Redis and Ray Serve; go_ray_spans.py: the conventions).

Shape: `search-gw` (Go, net/http + grpc-go, 3-5 pods, GOMAXPROCS=32 under a 2-core CFS quota: 200 ms of
CPU per 100 ms period) receives `POST /v1/search`, parses it (`search.parseRequest`), asks `feature-server`
(Feast's Python server, `POST /get-online-features`) for the user's and candidates' features (one
pipelined `HMGET` per shard of a 3-primary Redis online store; a row missing or past its TTL is fetched
by the offline materialisation call `feast.materialize_missing` > `POST`, then written back with `HSET`),
then calls `ranker` (Ray Serve; gRPC `ranker.v1.Ranker/Rank`, or HTTP `POST /rank` on the HTTP seed) with
a 250 ms per-try timeout and up to 3 tries on UNAVAILABLE / DEADLINE_EXCEEDED (exponential backoff from
25 ms, 20 % jitter). Ray's proxy actor (one per GPU node; a gateway pod's gRPC channel stays on one proxy,
HTTP spreads) takes the call; its router gives it to a replica with fewer than max_ongoing_requests (8)
in flight (two random choices, the less loaded), else the call waits in the router's queue inside the
proxy's SERVER span, before the replica's span (`Ranker.__call__ ray.remote_worker`) starts. A replica is
one Python process: `@serve.batch` (max_batch_size 8, batch_wait_timeout_s 0.005) collects calls until the
batch is full or the timeout since its first member; the batch (`Ranker.rank_batch` > `CrossEncoder.forward`)
tokenises (GIL) and runs the GPU forward while the replica's event loop is blocked; the results (a JSON
list of top_k scored items) are serialised one by one. Back on the gateway the response is decoded
(`search.decodeRanking`) and the answer encoded (`search.encodeResponse`), both allocation-heavy.

Go's GC is concurrent and reported only through metrics: no span events on any seed. During a mark phase a
goroutine that allocates is drafted into mark assist (and parked when the background workers lag); the 8
dedicated mark workers (GOMAXPROCS/4) burn the same CPU quota. The CFS model is per period: requests' CPU
(~4.2 ms each, more with larger responses) + mark workers + a carried-over backlog; over the quota, the
process stalls until the period's end.

Healthy noise: jitter everywhere; a GC cycle every ~0.6 s per pod on a 70 MB heap (~9 ms marks); 0.4 %
of users and 0.3 % of item rows missing from the online store; Redis BGSAVE forks; 0.15 % of tries
refused by a draining proxy (UNAVAILABLE, retried); the odd Python GC in a replica's batch.

Conventions by seed (seed % 3): 0: OTLP/JSON, new semconv, the OTel operator's `service.instance.id`
(Ray actors by their names), gRPC, Ray's batch and forward spans exported. 1: Jaeger JSON, old semconv,
host.name + process.pid, HTTP to Ray's proxy, the batch span exported. 2: Zipkin v2, old semconv,
endpoints (ip:port), gRPC, only the proxy and replica spans.

Mechanisms (scenario: truth):
- `cfs-peaks`: traffic peaks (5-7x for 0.25 s every 1.5 s); the gateway's demand passes its quota, more
  so in periods where a GC cycle's mark workers run: cpu_throttling at search-gw (side gc_pause).
- `heap-growth-gc`: an unbounded result cache grows the gateway's live heap from 70 MB (15 % of the run)
  to ~600 MB (55 %) under GOMEMLIMIT=640MiB: cycles come ~3x as often and mark ~6x longer; allocating
  work meeting a mark is stretched by assists or parked until it ends: gc_pause at search-gw. The 8
  dedicated mark workers burn the 2-core quota too (throttled 5-10 % of the time, marks stretched by
  it): accept cpu_throttling, the same process-wide stall seen through the quota.
- `router-saturation`: an untraced batch-scoring client sends heavy calls (1000 pairs, ~140 per s per
  replica) for 30 % of the run; replicas sit at max_ongoing_requests and calls wait in the router
  queue: queueing at the ranker's proxy span (side slow_dependency, timeout_retry).
- `autoscale-cold`: the deployment autoscales (target_ongoing_requests 0.75, upscale delay 0.5 s over a
  1 s look-back, max +2: compressed to the run's length); a sustained 1.6x rise adds two replicas which
  load the model (~0.75 s) and then run slow first batches (lazy CUDA modules, cudnn autotune: ~0.85 s,
  then x(1 + 3 e^-n/4)): cold_start at the new replicas (side queueing, timeout_retry: the first
  batch outlasts the per-try timeout).
- `batch-wait-timeout`: batch_wait_timeout_s 0.005 -> 0.1: calls wait in the replica for a batch to
  fill: queueing at the replica span.
- `ttl-expiry-wave`: the nightly materialisation failed: from 30 % of the run user rows are past their
  TTL; each user's first request falls back to the offline call: cache_miss at Feast (side
  slow_dependency).
- `redis-slow-disk`: one Redis primary's node has a degraded disk: AOF writes block its event loop
  (60-250 ms every ~0.6 s) and it serves 2.5x slower; every request reads from it: slow_dependency at
  Feast's HMGET (side queueing).
- `flaky-replica-retries`: one replica's GPU hangs (Xid errors, 0.3-1.0 s every ~0.8-2 s); calls on it pass
  their per-try timeout and are retried: timeout_retry at the gateway's ranker client span (side
  slow_dependency).
- `topk-payload`: clients ask top_k 300 instead of 50: 6x the response (serialisation on the replica,
  transfer, decode and encode on the gateway, more allocation): large_payload at search.decodeRanking
  (side gc_pause, cpu_throttling).
- `cross-zone-pod`: one gateway pod rescheduled into another zone: ~1.8 ms more RTT and 0.4 % segment loss
  (fast retransmits, 200 ms RTOs on lost tails): network at its ranker client span (side timeout_retry).
- Two causes: `heap-growth-gc+redis-slow-disk`, `cfs-peaks+autoscale-cold`, `cross-zone-pod+ttl-expiry-wave`.
"""

from __future__ import annotations

import random
from typing import Any

from reference_pipeline.simulate import go_ray_flow as flow
from reference_pipeline.simulate import go_ray_spans as sp
from reference_pipeline.simulate.trace_table import Cause, TraceTable

FAMILY = "go-ray"
SINGLES = ("cfs-peaks", "heap-growth-gc", "router-saturation", "autoscale-cold", "batch-wait-timeout",
           "ttl-expiry-wave", "redis-slow-disk", "flaky-replica-retries", "topk-payload", "cross-zone-pod")
PAIRS = ("heap-growth-gc+redis-slow-disk", "cfs-peaks+autoscale-cold", "cross-zone-pod+ttl-expiry-wave")
SCENARIOS = ("steady", *SINGLES, *PAIRS)
SLOW_SHARD, FLAKY_REPLICA = flow.SLOW_SHARD, flow.FLAKY_REPLICA
_SETUPS = (
    {"fmt": "otlp-json", "semconv": "new", "ident": "instance-id", "transport": "grpc", "internals": "full",
     "gw_pods": 3, "feast_pods": 3, "nodes": 4, "rps": 250.0},
    {"fmt": "jaeger", "semconv": "old", "ident": "host-pid", "transport": "http", "internals": "batch",
     "gw_pods": 4, "feast_pods": 2, "nodes": 3, "rps": 230.0},
    {"fmt": "zipkin", "semconv": "old", "ident": "endpoint", "transport": "grpc", "internals": "none",
     "gw_pods": 5, "feast_pods": 3, "nodes": 4, "rps": 290.0},
)


def setup(seed: int) -> dict[str, Any]:
    return dict(_SETUPS[seed % 3])


def style(seed: int) -> sp.Style:
    s = setup(seed)
    return sp.Style(s["semconv"], s["ident"], s["transport"], s["internals"])


def zone_pod(seed: int) -> int:
    return 1 % setup(seed)["gw_pods"]


def truth(scenario: str, seed: int) -> tuple[Cause, ...]:
    if scenario not in SCENARIOS:
        raise ValueError(f"unknown {FAMILY} scenario {scenario!r}; one of {', '.join(SCENARIOS)}")
    s, st = setup(seed), style(seed)
    gw = tuple(st.label(sp.GW, k) for k in range(s["gw_pods"]))
    feast = tuple(st.label(sp.FEAST, m) for m in range(s["feast_pods"]))
    used = range(min(s["gw_pods"], s["nodes"])) if st.transport == "grpc" else range(s["nodes"])
    proxies = tuple(st.label(sp.RANKER, -n - 1) for n in used)  # a pod's gRPC channel stays on one
    replicas = tuple(st.label(sp.RANKER, j, j) for j in range(s["nodes"]))
    new = tuple(st.label(sp.RANKER, j, j % s["nodes"]) for j in range(s["nodes"], s["nodes"] + 2))
    causes = {
        "cfs-peaks": Cause("cpu_throttling", None, st.root, sp.GW, gw, side=("gc_pause", "queueing")),
        "heap-growth-gc": Cause("gc_pause", None, st.root, sp.GW, gw, accept=("cpu_throttling",)),
        "router-saturation": Cause("queueing", "queue", st.proxy, sp.RANKER, proxies,
                                   side=("slow_dependency", "timeout_retry")),
        "autoscale-cold": Cause("cold_start", "model_forward", st.compute_span(), sp.RANKER, new,
                                side=("queueing", "timeout_retry")),
        "batch-wait-timeout": Cause("queueing", "queue", sp.REPLICA, sp.RANKER, replicas),
        "ttl-expiry-wave": Cause("cache_miss", "feature_hydration", sp.FALLBACK, sp.FEAST, feast,
                                 side=("slow_dependency",)),
        "redis-slow-disk": Cause("slow_dependency", "feature_hydration", sp.HMGET, sp.FEAST, feast,
                                 side=("queueing",)),
        "flaky-replica-retries": Cause("timeout_retry", "downstream", st.ranker_client, sp.GW, gw,
                                       side=("slow_dependency",)),
        "topk-payload": Cause("large_payload", "postprocessing", sp.DECODE, sp.GW, gw,
                              side=("gc_pause", "cpu_throttling")),
        "cross-zone-pod": Cause("network", "downstream", st.ranker_client, sp.GW, (gw[zone_pod(seed)],),
                                side=("timeout_retry",)),
    }
    return tuple(causes[part] for part in scenario.split("+") if part != "steady")


def generate(scenario: str, requests: int, seed: int, **opts: Any) -> TraceTable:
    truth(scenario, seed)
    s = {**setup(seed), **opts}
    parts = set(scenario.split("+")) - {"steady"}
    rng = random.Random(seed * 1_000_003 + 2020)
    table = TraceTable(seed, 0x20A)
    return flow.simulate(rng, table, style(seed), s, parts, requests, zone_pod(seed))
