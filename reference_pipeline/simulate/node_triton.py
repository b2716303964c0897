"""Blind family `node-triton`: a content-moderation API, a Node.js BFF in front of NVIDIA Triton
(node_triton_sim.py: the physics; node_triton_spans.py: the conventions; node_triton_flow.py: one
request's BFF steps).

Shape: `comments-api` (Go, 2 pods, traced) posts each comment or image to `POST /v1/moderate` over
long-lived keep-alive connections (96 of them) through a k8s Service: kube-proxy (iptables) picks a
`moderation-bff` pod at random per connection, and a connection stays on its pod. `moderation-bff` is
Node.js 20 + Fastify, one process per pod (3-5 pods), auto-instrumented (http, fastify, ioredis, pg,
grpc, dns on some seeds). One JavaScript thread runs every callback to completion: the request event
(the SERVER span starts there), body parse + schema validation + a synchronous sha256 of the content,
each reply's callback (a CLIENT span ends when its callback runs), JSON.stringify of the response.
libuv's threadpool (UV_THREADPOOL_SIZE 4) runs dns.lookup (getaddrinfo under ndots:5) and zlib (the
@fastify/compress onSend hook gzips responses over 1 KB). V8 pauses the thread for scavenges (1-5 ms,
~0.6 s apart) and the final pause of a mark-compact (~25 s apart). Per request: ioredis `get` of the
content hash's verdict (hit ~60 %); on a miss, Triton's `text_moderation` or `image_moderation`
ensemble (gRPC channel per BFF pod on seed 0, HTTP keep-alive agent otherwise) and `setex` of the
verdict; in parallel, for content with links or from a new author (35 %), a reputation API over
HTTPS (keep-alive agent, maxSockets 24, sockets closed by its LB after 4 s idle or 100 requests: a new
socket pays dns.lookup, TCP and TLS; client timeout 250 ms from the call's start, one retry); then a
node-postgres audit INSERT through a pool of 10 (`pg-pool.connect` waits for one); then the gzipped
response.

Triton (2 pods, 2 GPUs each: A10G, L40S or L4 by seed): the ensemble's CPU step (tokenizer: 4 Python
instances; image_preprocess: 2) then its GPU model behind a dynamic batcher (text_classifier on GPU 0:
preferred 8, max 32, max queue delay 2 ms; vision_classifier on GPU 1: preferred 4, max 16, 4 ms); a
batch costs about its items (large models saturate the GPU from a few items); two models placed on
one GPU time-slice its SMs. Triton's OTel spans: InferRequest > ensemble > model spans with
QUEUE_START / COMPUTE_* as events (seed 1) or a `compute` child span (seed 0); none on seed 2.

Healthy noise: jitter everywhere; 40 % verdict misses; image bodies (base64, ~600 KB) cost ~1-2 ms of
parse and hash; scavenges and mark-compacts; 0.3 % slow Redis replies, 0.5 % slow commits, the
reputation API's tail; the odd new socket to the reputation API; uneven connections per pod.

Conventions by seed (seed % 3): 0: OTLP/JSON, new semconv, service.instance.id = pod, gRPC to Triton,
Triton child spans, dns + hook spans, GC as `v8.gc` span events. 1: Jaeger, old semconv,
host.name + process.pid, HTTP, Triton events, hook spans, no dns spans, no GC events. 2: Zipkin v2,
old semconv, ip:port endpoints, HTTP, no Triton spans, dns spans, no hook spans, GC annotations.

Mechanisms (scenario: truth):
- `large-json-bodies`: 0.8 % of requests are bulk thread imports (3-14 MB of nested JSON, parsed at
  ~70 MB/s: 40-200 ms on the one thread); the request itself is slow and every callback of its process
  waits: large_payload at the server span, stage parsing, accept compute_bound, side queueing.
- `gzip-threadpool`: from 30 % of the run 30 % of the requests ask `explain=true` (~2 MB of
  token attributions): gzip of those fills the 4 threadpool threads, every response's compression and
  every new socket's dns.lookup waits behind them: queueing at the compress hook (the server span
  where hooks are not exported), stage serialization, accept large_payload, side network.
- `heap-limit-gc`: one pod's old space near --max-old-space-size from 30 %: mark-compacts of 120-420 ms
  back to back (0.3-0.7 s apart): gc_pause at that pod, side queueing.
- `model-reload`: a new text_classifier version from the repository (poll mode) at 30 % (one pod after
  another, 5 % of the run apart), no model_warmup: the first run creates its context and loads
  kernels (+250-450 ms), each new shape range loads more (+25-70 ms), then slower runs for seconds:
  cold_start at text_classifier (the BFF's client span without Triton spans).
- `batcher-delay`: text_classifier's preferred batch 32 with max_queue_delay 100 ms, for a traffic
  that fills a few per 100 ms: queueing, stage queue, at text_classifier.
- `shared-gpu`: from 30 % vision_classifier's instance group moves to GPU 0 beside text_classifier:
  their kernels time-slice and interfere (each runs 1.7x longer): compute_bound at text_classifier,
  accept queueing.
- `verdict-eviction`: the verdict cache flushed at 30 % (an eviction wave): hits 60 % -> ~0 %,
  recovering as content is seen again; the misses run the models: cache_miss at the Triton client span.
- `audit-pool`: audit commits wait for a remote synchronous standby from 30 % (~60 ms): the pool of 10
  runs out, `pg-pool.connect` waits: queueing, accept slow_dependency.
- `reputation-timeouts`: the reputation API slows at 30 % (median 150 ms): calls over 250 ms are
  aborted (socket destroyed) and retried once (another idle socket, or a new connection):
  timeout_retry, accept slow_dependency.
- `keepalive-skew`: after a rollout one pod holds most keep-alive connections (a half to four fifths
  of the requests, by seed, so that its JavaScript thread is ~88 % busy): its event loop runs near
  saturation and requests wait before its server span starts: queueing at that pod.
- Pairs: `reputation-timeouts+heap-limit-gc`, `verdict-eviction+batcher-delay`,
  `keepalive-skew+model-reload` (a release day: the BFF rolled out, a model version pushed).
"""

from __future__ import annotations

import random
from typing import Any

from reference_pipeline.simulate import node_triton_spans as sp
from reference_pipeline.simulate.node_triton_flow import GC_POD, HOT_POD, Bff, run_bff
from reference_pipeline.simulate.node_triton_sim import (
    BatchConfig,
    Exec,
    Lanes,
    batch_model,
    cold_factor,
    cpu_model,
)
from reference_pipeline.simulate.trace_table import NS_PER_MS, NS_PER_S, Cause, TraceTable, poisson_arrivals

FAMILY = "node-triton"
SINGLES = ("large-json-bodies", "gzip-threadpool", "heap-limit-gc", "model-reload", "batcher-delay",
           "shared-gpu", "verdict-eviction", "audit-pool", "reputation-timeouts", "keepalive-skew")
PAIRS = ("reputation-timeouts+heap-limit-gc", "verdict-eviction+batcher-delay", "keepalive-skew+model-reload")
SCENARIOS = ("steady", *SINGLES, *PAIRS)
CHANGE = 0.3  # the share of the run after which a time-bound cause acts
_SETUPS = (
    {"fmt": "otlp-json", "semconv": "new", "ident": "instance-id", "transport": "grpc", "triton": "children",
     "dns": True, "hooks": True, "gc": True, "bff_pods": 4, "triton_pods": 2, "rps": 440.0,
     "gpu": "NVIDIA A10G", "gpu_item_ms": 5.0},
    {"fmt": "jaeger", "semconv": "old", "ident": "host-pid", "transport": "http", "triton": "events",
     "dns": False, "hooks": True, "gc": False, "bff_pods": 5, "triton_pods": 2, "rps": 520.0,
     "gpu": "NVIDIA L40S", "gpu_item_ms": 5.0},
    {"fmt": "zipkin", "semconv": "old", "ident": "endpoint", "transport": "http", "triton": "none",
     "dns": True, "hooks": False, "gc": True, "bff_pods": 3, "triton_pods": 2, "rps": 330.0,
     "gpu": "NVIDIA L4", "gpu_item_ms": 6.5},
)


def setup(seed: int) -> dict[str, Any]:
    return dict(_SETUPS[seed % 3])


def style(seed: int) -> sp.Style:
    s = setup(seed)
    return sp.Style(s["semconv"], s["ident"], s["transport"], s["triton"], s["dns"], s["hooks"], s["gc"])


def truth(scenario: str, seed: int) -> tuple[Cause, ...]:
    if scenario not in SCENARIOS:
        raise ValueError(f"unknown {FAMILY} scenario {scenario!r}; one of {', '.join(SCENARIOS)}")
    s, st = setup(seed), style(seed)
    bff = tuple(st.label(sp.BFF, k) for k in range(s["bff_pods"]))
    traced = st.triton != "none"
    triton = tuple(st.label(sp.TRITON, j) for j in range(s["triton_pods"]))
    model = st.model_span("text")
    where = (sp.TRITON, triton) if traced else (sp.BFF, bff)
    causes = {
        "large-json-bodies": Cause("large_payload", "parsing", st.root, sp.BFF, bff,
                                   accept=("compute_bound",), side=("queueing",)),
        "gzip-threadpool": Cause("queueing", "serialization", sp.COMPRESS if st.hooks else st.root, sp.BFF,
                                 bff, accept=("large_payload",), side=("network",)),
        "heap-limit-gc": Cause("gc_pause", None, st.root, sp.BFF, (bff[GC_POD],), side=("queueing",)),
        "model-reload": Cause("cold_start", "model_forward" if traced else "downstream", model, *where,
                              side=("queueing", "slow_dependency")),
        "batcher-delay": Cause("queueing", "queue" if traced else "downstream", model, *where,
                               side=("slow_dependency",)),
        "shared-gpu": Cause("compute_bound", "model_forward" if traced else "downstream", model, *where,
                            accept=("queueing",), side=("slow_dependency",)),
        "verdict-eviction": Cause("cache_miss", "downstream", st.infer_client, sp.BFF, bff,
                                  side=("queueing", "slow_dependency")),
        "audit-pool": Cause("queueing", "downstream", sp.POOL, sp.BFF, bff, accept=("slow_dependency",)),
        "reputation-timeouts": Cause("timeout_retry", "downstream", "GET", sp.BFF, bff,
                                     accept=("slow_dependency",)),
        "keepalive-skew": Cause("queueing", "queue", st.root, sp.BFF, (bff[HOT_POD],)),
    }
    return tuple(causes[part] for part in scenario.split("+") if part != "steady")


def _configs(s: dict[str, Any], parts: set[str]) -> tuple[BatchConfig, BatchConfig]:
    """text_classifier's and vision_classifier's batchers; per-item costs of the seed's GPU (large
    models: the GPU is saturated from a few items, a batch costs about its items)."""
    per_item = s["gpu_item_ms"]
    text = (BatchConfig(64, 32, 100.0 * NS_PER_MS, 3.0, per_item) if "batcher-delay" in parts
            else BatchConfig(32, 8, 2.0 * NS_PER_MS, 3.0, per_item))
    return text, BatchConfig(16, 4, 4.0 * NS_PER_MS, 8.0, per_item)


CONTENTION = 1.7  # two models' kernels time-sliced on one GPU (and evicting each other's L2) run slower


def _pod(rng: random.Random, calls: list[tuple[float, int, str, int]], s: dict[str, Any], parts: set[str],
         change: float, switch: float | None) -> dict[int, list[Exec]]:
    """One Triton pod: each call's [CPU step, GPU step]. calls: (arrival, key, kind, chars)."""
    gpus = (Lanes(1), Lanes(1))
    shared = "shared-gpu" in parts
    seen: set[int] = set()
    text_cfg, vision_cfg = _configs(s, parts)

    def contended(t: float) -> float:
        return CONTENTION if shared and t >= change else 1.0

    def text_slow(t: float, size: int) -> tuple[float, float]:
        factor, added = cold_factor(switch, t, seen, size, rng)
        return factor * contended(t), added

    out: dict[int, list[Exec]] = {}
    for kind in ("text", "image"):
        work = [(t, key, (1.1 + 0.0004 * chars if kind == "text" else 3.5) * NS_PER_MS)
                for t, key, k, chars in calls if k == kind]
        first = cpu_model(work, 4 if kind == "text" else 2, rng)
        arrivals = [(ex.end + 0.05 * NS_PER_MS, key) for key, ex in first.items()]
        if kind == "text":
            second = batch_model(arrivals, text_cfg, lambda t: gpus[0], text_slow, rng)
            for ex in second.values():
                ex.version = 2 if switch is not None and ex.start >= switch else 1
        else:
            second = batch_model(arrivals, vision_cfg, lambda t: gpus[1],
                                 lambda t, size: (contended(t), 0.0), rng)
            for ex in second.values():
                ex.version = 1
        for key, ex in first.items():
            ex.version = 1
            out[key] = [ex, second[key]]
    return out


def run_triton(rng: random.Random, calls: dict[int, tuple[float, int, str, int]], s: dict[str, Any],
               parts: set[str], change: float) -> dict[int, list[Exec]]:
    """Each call's steps on its Triton pod: key -> [CPU step, GPU step]. calls: key -> (arrival, pod,
    kind, chars). A new text_classifier version reaches each pod's repository poll in turn (5 % of
    the run apart)."""
    out: dict[int, list[Exec]] = {}
    for j in range(s["triton_pods"]):
        mine = [(t, key, kind, chars) for key, (t, pod, kind, chars) in calls.items() if pod == j]
        switch = change * (1.0 + j / 6.0) if "model-reload" in parts else None
        out.update(_pod(rng, mine, s, parts, change, switch))
    return out


def generate(scenario: str, requests: int, seed: int, **opts: Any) -> TraceTable:
    truth(scenario, seed)
    s = {**setup(seed), **opts}
    parts = set(scenario.split("+")) - {"steady"}
    rng = random.Random(seed * 1_000_003 + 2525)
    table = TraceTable(seed, 0x25A)
    st = style(seed)
    res = sp.Resources(table, st)
    arrivals = poisson_arrivals(rng, s["rps"], requests)
    run_ns = requests / s["rps"] * NS_PER_S
    horizon = arrivals[-1] + 30 * NS_PER_S
    bff = Bff(rng, s, st, parts, CHANGE * run_ns, run_ns, horizon)
    timelines = run_bff(bff, arrivals, lambda calls: run_triton(rng, calls, s, parts, CHANGE * run_ns))
    for tl in timelines:
        sp.write_request(table, res, tl)
    return table
