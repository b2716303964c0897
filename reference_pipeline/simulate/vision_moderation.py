"""Blind family `vision-moderation`: an image-moderation API. A Go gateway authenticates the caller
against a Redis rate limiter, downloads the image from object storage, decodes and resizes it, asks an
NVIDIA Triton Inference Server (an ensemble of two models behind dynamic batchers), writes the verdict
to Postgres through PgBouncer and publishes an audit event to Kafka without waiting for it.

Shape, per request (CLIENT spans name their peer):

- `moderation-gateway` (Go 1.22, 6-10 pods, GOMAXPROCS = the node's 8 cores, a CFS quota of 6 cores):
  root SERVER span (`POST /v1/moderate`, or the gRPC method `moderation.v1.Moderation/Check` on the
  seeds whose API is gRPC); `ratelimit.Allow` > `EVALSHA` (Redis); `blob.Fetch` > `S3.GetObject` (the
  SDK's span ends at the response headers: first byte; the body is read in blob.Fetch's own time, so
  transfer grows with `http.response.body.size` / `http.response_content_length`); `image.Decode`
  and `image.Resize` (CPU, growing with `image.width` x `image.height`); `ModelInfer` (gRPC CLIENT to
  Triton, `server.address` / `net.peer.name` = the Triton pod); `verdicts.Save` > `BEGIN`,
  `INSERT moderation.verdicts`, `COMMIT` (pgx through PgBouncer); a Kafka PRODUCER span that may end
  after the response.
- `triton-inference-server` (2-3 pods, one GPU each): on seed 0 its OpenTelemetry trace mode exports
  `moderation_ensemble` (SERVER) > `vit_embedder` / `safety_head` > `queue`, `compute_input`,
  `compute_infer`, `compute_output`; on seed 2 each composing model's span has one `compute` child with
  COMPUTE_INPUT_END / COMPUTE_OUTPUT_START events (queue time = the gap before it); seed 1 does not trace
  Triton at all. The embedder's batcher: preferred sizes 4 and 8 (max 8), max_queue_delay 2 ms.

Conventions by seed (mod 3): 0: OTLP/JSON, new semconv, `service.instance.id` (+ k8s.pod.name), Go GC
reported as `go.gc` events on the spans in flight (gctrace's numbers); 1: Jaeger, old semconv,
`hostname` + `ip`, gRPC API, no GC reporting, Triton untraced; 2: Zipkin v2, old semconv, endpoint
ip:port, no GC reporting, Triton's compute spans only. Healthy noise: GC cycles every ~0.8 s (mark
~40 ms, STW < 0.5 ms, small assists), S3 first-byte tail, 0.2 % original-size uploads, a slow Redis
call now and then, rare TCP retransmission timeouts, the batcher's own waits.

Mechanisms (truth per scenario; `inst` = the pods it acts on):

- `gc-assist` (gc_pause, preprocessing, image.Decode, gateway, all pods): from 35 % of the run a
  release allocates float32 intermediates per request (+32 B per pixel) and grows a pointerful dedupe
  cache; GC cycles run back to back and allocating work (decode, resize, the request's marshalling)
  runs 2-8x slower during marks: mark assists and the assist queue. Stop-the-world phases stay < 1 ms.
- `cpu-throttle` (cpu_throttling, preprocessing, image.Decode, gateway, all pods): the CPU limit is
  right-sized from 6 cores to 1 while GOMAXPROCS stays at 8: busy periods spend the quota early and the whole
  process stalls until the 100 ms period ends.
- `triton-queueing` (queueing, queue, Triton's `queue` span / `vit_embedder` on seed 2 / ModelInfer on
  seed 1): a traffic surge (30 % more than the embedders can batch) for ~15 % of the run: requests wait
  in the batcher's queue, longer the longer the surge lasts. On seed 1 Triton is untraced: a wait
  inside a dependency's call cannot be told from the dependency being slow (accept slow_dependency).
- `triton-cold` (cold_start, model_forward, `compute_infer` / `compute` / ModelInfer on seed 1, the new
  Triton pod): a replica added at 40 % of the run takes its round-robin share of the calls; its
  first executions take ~350 ms more (CUDA context, lazy module loading, TensorRT's first runs),
  halving about every batch; requests queue behind them (side: queueing).
- `pgbouncer-exhaustion` (lock_contention, downstream, BEGIN, gateway, all pods): commits slow to
  ~85 ms (WAL fsync on a throttled volume) for 40 % of the run; PgBouncer's transaction pool of 14-24
  server connections is held through each commit and the next transactions wait for one at BEGIN
  (side: slow_dependency).
- `large-images` (large_payload, preprocessing, image.Decode, gateway, all pods): from 30 % of the
  run a client release uploads originals (12 MP, 4-6 MB) for 40 % of requests: the body transfer and
  decode/resize grow with the size attributes (side: gc_pause: the allocation grows with them).
- `s3-region-tail` (slow_dependency, feature_hydration, S3.GetObject, gateway, all pods): the
  us-east-2 bucket's first byte gets a heavy tail (a quarter of its reads + Pareto 100 ms, alpha 1.8).
- `node-packet-loss` (network, model_forward, ModelInfer, gateway, the pod on the bad node): its calls
  lose segments that only a retransmission timeout (200 ms, doubled on a second loss) recovers: gaps
  between the CLIENT span and Triton's SERVER span, longer Redis / S3 / Postgres calls.
- pairs: `large-images+s3-region-tail`, `cpu-throttle+triton-queueing`,
  `pgbouncer-exhaustion+node-packet-loss`, `gc-assist+triton-cold`.
"""

from __future__ import annotations

from typing import Any

from reference_pipeline.simulate.trace_table import Cause, TraceTable
from reference_pipeline.simulate.vision_moderation_flow import simulate
from reference_pipeline.simulate.vision_moderation_spans import (
    EMBEDDER,
    GATEWAY,
    MODEL_INFER,
    S3_GET,
    TRITON,
    instance_label,
)

FAMILY = "vision-moderation"
SCENARIOS = (
    "steady", "gc-assist", "cpu-throttle", "triton-queueing", "triton-cold", "pgbouncer-exhaustion",
    "large-images", "s3-region-tail", "node-packet-loss", "large-images+s3-region-tail",
    "cpu-throttle+triton-queueing", "pgbouncer-exhaustion+node-packet-loss", "gc-assist+triton-cold",
)
_SEEDS = (
    {"fmt": "otlp-json", "semconv": "new", "api": "http", "pods": 8, "rps": 240.0, "tritons": 2,
     "triton_spans": "full", "gc_events": True, "pool": 20},
    {"fmt": "jaeger", "semconv": "old", "api": "grpc", "pods": 10, "rps": 320.0, "tritons": 3,
     "triton_spans": "none", "gc_events": False, "pool": 24},
    {"fmt": "zipkin", "semconv": "old", "api": "http", "pods": 6, "rps": 170.0, "tritons": 2,
     "triton_spans": "compute", "gc_events": False, "pool": 14},
)
LOSSY_POD = 1  # the gateway pod on the node with the bad NIC


def setup(seed: int) -> dict[str, Any]:
    return dict(_SEEDS[seed % 3])


def gateway_pods(seed: int) -> list[tuple[str, str, str, int]]:
    """(pod name, instance id, ip, port) of each gateway pod."""
    return [(f"moderation-gateway-7c9f4d{seed % 3}b-{'xkqzr'[k % 5]}{k}m{k * 7 % 10}",
             f"{(seed * 131 + k * 977) % 65536:04x}e3a1-9b2c-4f1e-8d{k:02d}-5a7e{seed:02d}c0ffee{k:02d}",
             f"10.52.{k // 4}.{18 + 9 * k}", 8080) for k in range(setup(seed)["pods"])]


def triton_pods(seed: int, cold: bool) -> list[tuple[str, str, str, int]]:
    n = setup(seed)["tritons"] + (1 if cold else 0)
    return [(f"triton-moderation-{seed % 3}6d8f-{k}", f"4f7a{k:02d}b1-triton-{seed:02d}-{k:04d}",
             f"10.53.{k}.{40 + 11 * k}", 8001) for k in range(n)]


def labels(seed: int, pods: list[tuple[str, str, str, int]], service: str) -> tuple[str, ...]:
    s = setup(seed)
    return tuple(instance_label(s, {"service.instance.id": uid} if s["fmt"] == "otlp-json" else
                                {"hostname": name}, ip, port) for name, uid, ip, port in pods)


def truth(scenario: str, seed: int) -> tuple[Cause, ...]:
    s = setup(seed)
    gw = labels(seed, gateway_pods(seed), GATEWAY)
    untraced = s["triton_spans"] == "none"
    tritons = () if untraced else labels(seed, triton_pods(seed, "triton-cold" in scenario), TRITON)
    queue_span = {"full": "queue", "compute": EMBEDDER, "none": MODEL_INFER}[s["triton_spans"]]
    infer_span = {"full": "compute_infer", "compute": "compute", "none": MODEL_INFER}[s["triton_spans"]]
    triton_service = GATEWAY if untraced else TRITON
    causes = {
        "gc-assist": Cause("gc_pause", "preprocessing", "image.Decode", GATEWAY, gw),
        "cpu-throttle": Cause("cpu_throttling", "preprocessing", "image.Decode", GATEWAY, gw),
        "triton-queueing": Cause("queueing", "queue", queue_span, triton_service, tritons[: s["tritons"]],
                                 accept=("slow_dependency",) if untraced else ()),
        "triton-cold": Cause("cold_start", "model_forward", infer_span, triton_service, tritons[-1:],
                             side=("queueing",)),
        "pgbouncer-exhaustion": Cause("lock_contention", "downstream", "BEGIN", GATEWAY, gw,
                                      side=("slow_dependency",)),
        "large-images": Cause("large_payload", "preprocessing", "image.Decode", GATEWAY, gw,
                              side=("gc_pause",)),
        "s3-region-tail": Cause("slow_dependency", "feature_hydration", S3_GET, GATEWAY, gw),
        "node-packet-loss": Cause("network", "model_forward", MODEL_INFER, GATEWAY, (gw[LOSSY_POD],)),
    }
    if scenario == "steady":
        return ()
    parts = scenario.split("+")
    if scenario not in SCENARIOS:
        raise ValueError(f"unknown {FAMILY} scenario {scenario!r}; one of {', '.join(SCENARIOS)}")
    return tuple(causes[p] for p in parts)


def generate(scenario: str, requests: int, seed: int, **opts: Any) -> TraceTable:
    truth(scenario, seed)
    s = {**setup(seed), **opts}
    cold = "triton-cold" in scenario
    return simulate(set(scenario.split("+")) - {"steady"}, requests, seed, s, gateway_pods(seed),
                    triton_pods(seed, cold), LOSSY_POD)
