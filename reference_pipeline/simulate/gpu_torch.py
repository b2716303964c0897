"""Blind family `gpu-torch`: an image + text product-classification service on GPUs, in Python
(gpu_torch_pod.py: one frontend process as a discrete-event model; gpu_torch_physics.py: the GIL, the
copy engine, the model's cost, CPython's collector, the I/O; gpu_torch_spans.py: the conventions).

Shape: `catalog-enricher` (a Go service, traced on seeds 0 and 1) calls
`classify.v1.ProductClassifier/Classify` on `classify-frontend`: a Python gRPC server (grpcio, a
thread pool of 8-16 workers, one process per pod, 2-4 pods, one NVIDIA L4 each; the GIL shared by
every thread). An RPC that finds no free pool thread waits in grpc's queue, before its SERVER span
starts. A pool thread then, in order: decodes the JPEG with Pillow (libjpeg-turbo drops the GIL in the
decoder: ~22 % of the work keeps it) and converts it to float32 (`image.decode`); copies the full-size
tensor to the GPU from pageable memory (12 bytes a pixel, ~2.9 GB/s through the driver's staging
buffer; pageable copies from every thread go through the one copy engine in turn: `image.to_device`);
tokenises the title (`tokenize`, GIL held); reads merchant features from Redis (`GET`; a miss reads
Postgres through a psycopg_pool of 4-5 connections, `SELECT`, and writes back with `SET`); enqueues to
the in-process batcher thread and waits on a Future (`batch.wait`). The batcher takes up to
`max_batch` requests once the oldest has waited `max_wait` (or the batch is full) and the previous
batch is done; it collates (GIL), pads the batch to a captured CUDA-graph size and the titles to a
sequence bucket (32/64/128 compiled and captured at start-up; 256 not: titles are truncated
there), runs the
torch.compile'd model (`model.forward`, one span per request over its batch; CUDA-event GPU time as
`gpu.time_ms` on seeds 0 and 2: events around the kernels, after any compile or allocator
retry) and synchronises. A bucket not seen before recompiles (Dynamo traces
in the batcher thread holding the GIL ~30 % of the time, Inductor compiles in its workers: ~1.8 s); a
new (padded batch, bucket) shape is captured (~70 ms). The caching allocator, when it finds no block,
frees its cache (cudaFree synchronises the device: in-flight copies wait) and mallocs again. The
threads wake, post-process (`postprocess`), resolve the category path at `taxonomy-service`
(requests over a keep-alive pool, read timeout 300 ms, one retry; the server finishes an abandoned
call) and hand the result to the Kafka producer (`... send` / `publish ...`: fire and forget, the span
ends at the delivery callback, often after the response). CPython's collections hold the GIL and stop
every thread (gen1 ~1.6 ms every ~1 s; gen2 when the long-lived objects pending exceed a quarter of
the heap, ~48 ns per tracked object).

Healthy noise: jitter everywhere; 2 % Redis misses; 1 % cold Postgres pages; a few slow taxonomy
calls; gen1 collections and a healthy gen2 every 10-20 s (~22 ms); a rare allocator retry (25 ms);
0.2 % CMYK uploads.

Conventions by seed (seed % 3): 0: OTLP/JSON, new semconv (`server.address`, `db.query.text`,
`http.request.method`, messaging `publish`), instances by `service.instance.id`, fine spans, CUDA-event
times and cumulative `torch.cuda.num_alloc_retries` on the forward span, collections as `gc.collect`
span events (gc.callbacks), recompiles as `torch.compile.recompile` events, a traced caller.
1: Jaeger JSON, old semconv (`net.peer.name`, `db.statement`), host.name + process.pid, coarse spans
(one `preprocess` for decode + copy + tokenise), wall time only, no collections reported, a traced
caller. 2: Zipkin v2, old semconv, endpoints (ip:port), fine spans, CUDA-event times, collections and
recompiles as annotations, no traced caller (the SERVER span is the root).

Mechanisms (scenario: truth):
- `shape-recompiles`: a traffic-mix change from 30 % of the run: 15 % of titles are long (truncated at
  256 tokens): each pod's first batch with one recompiles for the 256 bucket (~1.8 s: that batch and
  every request queued behind it wait; grpc's queue fills) and captures graphs for each new padded
  size; long batches also cost more. cold_start at `model.forward` (side queueing).
- `gpu-cotenant`: a training job time-slices one pod's card for 45 % of the run in two windows:
  kernels take twice as long there, batches back up. compute_bound at `model.forward` on that pod
  (side queueing).
- `power-capping`: from 30-45 % of the run every card reaches its power limit and lowers its clocks
  over 8 % of the run: kernels 34-40 % slower for the rest of it. compute_bound at `model.forward`, all pods
  (side queueing).
- `allocator-fragmentation`: variable image sizes fragment the caching allocator: ~2-4 % of batches
  (more for bigger ones) free the cache and retry, a ~90 ms synchronising stall in the forward that
  also holds copies in flight. gc_pause at `model.forward` (the vocabulary's name for a memory-
  management stop; no runtime event says so), side queueing.
- `image-growth`: a new seller app uploads full-size photos from 25 % of the run (55 % of requests,
  median 6 MP instead of 0.55): decode and, most, the pageable copy grow with the pixels (`h2d.bytes`,
  `image.width`), and the copies queue on the copy engine. large_payload at `image.to_device`
  (`preprocess` on seed 1).
- `decode-burst`: a bulk import adds 50 % traffic for 15 % of the run; 40 % of the requests in that
  window are CMYK / ICC-profiled JPEGs whose colour conversion keeps the GIL (~24 ms a megapixel or
  more, 88 % held): every thread's Python
  waits on the GIL, decodes stretch far past their CPU time, the pool threads run out (grpc queue).
  lock_contention at `image.decode` (`preprocess` on seed 1), also accepting compute_bound (CPU-bound
  decode is what holds the lock); side queueing.
- `cache-leak`: a per-request cache that is never evicted (since a deploy hours before: 1.2 M tracked
  objects at the start) grows the heap 3,000 objects a request: gen2 collections come every quarter
  of growth and last 60-150 ms, stopping every thread;
  in-flight forwards (whose end the batcher thread records after the pause) carry most of it.
  gc_pause at `model.forward` (side queueing). Reported as span events on seeds 0 and 2 only.
- `redis-evictions`: an eviction wave from 30 % of the run: 80 % of merchant lookups miss (falling to
  30 % as the cache refills) and read Postgres with cold buffers (~30 ms, heavy tail) through the
  small pool. cache_miss at the `SELECT` span (side slow_dependency, queueing).
- `taxonomy-slowdown`: a bad rollout on one of two taxonomy pods for half the run (median 220 ms,
  heavy tail): calls to it hit the 300 ms read timeout (error, `requests.exceptions.ReadTimeout`) and
  are made again. timeout_retry at the requests CLIENT span, also accepting slow_dependency (side
  queueing).
- `batcher-max-wait`: max_wait configured at 80 ms instead of 3-5: at this traffic a batch never fills,
  so every request waits ~80 ms for its batch to close. queueing at `batch.wait`.
- Pairs: `shape-recompiles+allocator-fragmentation` (new shapes fragment the allocator),
  `image-growth+gpu-cotenant`, `redis-evictions+taxonomy-slowdown`.

Truth instances: the frontend pods as the store names them.
"""

from __future__ import annotations

import random
from typing import Any

from reference_pipeline.simulate import gpu_torch_spans as sp
from reference_pipeline.simulate.gpu_torch_physics import Gpu, collections
from reference_pipeline.simulate.gpu_torch_pod import Knobs, Pod, Request
from reference_pipeline.simulate.trace_table import NS_PER_S, Cause, TraceTable, poisson_arrivals

FAMILY = "gpu-torch"
SINGLES = ("shape-recompiles", "gpu-cotenant", "power-capping", "allocator-fragmentation", "image-growth",
           "decode-burst", "cache-leak", "redis-evictions", "taxonomy-slowdown", "batcher-max-wait")
PAIRS = ("shape-recompiles+allocator-fragmentation", "image-growth+gpu-cotenant",
         "redis-evictions+taxonomy-slowdown")
SCENARIOS = ("steady", *SINGLES, *PAIRS)
_SETUPS = (
    {"fmt": "otlp-json", "semconv": "new", "ident": "instance-id", "coarse": False, "gpu_events": True,
     "gc_events": True, "upstream": True, "pods": 3, "threads": 16, "rps": 150.0, "max_batch": 16,
     "max_wait_ms": 4.0, "db_pool": 4},
    {"fmt": "jaeger", "semconv": "old", "ident": "host-pid", "coarse": True, "gpu_events": False,
     "gc_events": False, "upstream": True, "pods": 2, "threads": 12, "rps": 110.0, "max_batch": 16,
     "max_wait_ms": 5.0, "db_pool": 5},
    {"fmt": "zipkin", "semconv": "old", "ident": "endpoint", "coarse": False, "gpu_events": True,
     "gc_events": True, "upstream": False, "pods": 4, "threads": 8, "rps": 180.0, "max_batch": 8,
     "max_wait_ms": 3.0, "db_pool": 4},
)
TIMEOUT_MS = 300.0
TAXONOMY_PODS, UPSTREAM_PODS = 2, 2


def setup(seed: int) -> dict[str, Any]:
    return dict(_SETUPS[seed % 3])


def style(seed: int) -> sp.Style:
    s = setup(seed)
    return sp.Style(s["semconv"], s["ident"], s["coarse"], s["gpu_events"], s["gc_events"], s["upstream"])


def cotenant_pod(seed: int) -> int:
    return 1 % setup(seed)["pods"]


def truth(scenario: str, seed: int) -> tuple[Cause, ...]:
    if scenario not in SCENARIOS:
        raise ValueError(f"unknown {FAMILY} scenario {scenario!r}; one of {', '.join(SCENARIOS)}")
    s, st = setup(seed), style(seed)
    fe = tuple(st.label(sp.FE, j) for j in range(s["pods"]))
    causes = {
        "shape-recompiles": Cause("cold_start", "model_forward", sp.FORWARD, sp.FE, fe, side=("queueing",)),
        "gpu-cotenant": Cause("compute_bound", "model_forward", sp.FORWARD, sp.FE, (fe[cotenant_pod(seed)],),
                              side=("queueing",)),
        "power-capping": Cause("compute_bound", "model_forward", sp.FORWARD, sp.FE, fe, side=("queueing",)),
        "allocator-fragmentation": Cause("gc_pause", "model_forward", sp.FORWARD, sp.FE, fe,
                                         side=("queueing",)),
        "image-growth": Cause("large_payload", "preprocessing", st.copy, sp.FE, fe),
        "decode-burst": Cause("lock_contention", "preprocessing", st.decode, sp.FE, fe,
                              accept=("compute_bound",), side=("queueing",)),
        "cache-leak": Cause("gc_pause", "model_forward", sp.FORWARD, sp.FE, fe, side=("queueing",)),
        "redis-evictions": Cause("cache_miss", "feature_hydration", st.query, sp.FE, fe,
                                 side=("slow_dependency", "queueing")),
        "taxonomy-slowdown": Cause("timeout_retry", "downstream", st.taxonomy, sp.FE, fe,
                                   accept=("slow_dependency",), side=("queueing",)),
        "batcher-max-wait": Cause("queueing", "queue", sp.WAIT, sp.FE, fe),
    }
    return tuple(causes[part] for part in scenario.split("+") if part != "steady")


def _requests(rng: random.Random, s: dict[str, Any], parts: set[str], run_ns: float, requests: int
              ) -> list[Request]:
    run_s = run_ns / NS_PER_S
    bursts = ((0.4 * run_s, 0.15 * run_s, 1.5),) if "decode-burst" in parts else ()
    sends = poisson_arrivals(rng, s["rps"], requests, bursts)
    out = []
    for t in sends:
        at = t / run_ns
        in_burst = bool(bursts) and 0.4 <= at < 0.55
        heavy = rng.random() < (0.4 if in_burst else 0.002)
        mp = min(24.0, 0.55 * rng.lognormvariate(0.0, 0.5))
        if "image-growth" in parts and at > 0.25 and rng.random() < 0.55:
            mp = min(24.0, 6.0 * rng.lognormvariate(0.0, 0.35))  # the new seller app's full-size photos
        tokens = int(min(120, max(6, 38 * rng.lognormvariate(0.0, 0.45))))
        if "shape-recompiles" in parts and at > 0.3 and rng.random() < 0.15:
            tokens = int(min(256, 170 * rng.lognormvariate(0.0, 0.3)))  # long titles (truncated at 256)
        miss_p = 0.02
        if "redis-evictions" in parts and at > 0.3:
            miss_p = 0.8 - 0.5 * (at - 0.3) / 0.7
        miss = rng.random() < miss_p
        out.append(Request(rng.randrange(s["pods"]), t, mp, heavy, tokens, miss,
                           miss and miss_p > 0.1))
    return out


def generate(scenario: str, requests: int, seed: int, **opts: Any) -> TraceTable:
    truth(scenario, seed)
    s = {**setup(seed), **opts}
    parts = set(scenario.split("+")) - {"steady"}
    rng = random.Random(seed * 1_000_003 + 2323)
    table = TraceTable(seed, 0x23A)
    st = style(seed)
    res = sp.Resources(table, st)
    run_ns = requests / s["rps"] * NS_PER_S
    reqs = _requests(rng, s, parts, run_ns, requests)
    horizon = reqs[-1].send + 30 * NS_PER_S
    slow = (0.3 * run_ns, 0.8 * run_ns) if "taxonomy-slowdown" in parts else None
    max_wait = 80.0 if "batcher-max-wait" in parts else s["max_wait_ms"]
    knobs = Knobs(s["threads"], s["max_batch"], max_wait, s["db_pool"], TIMEOUT_MS, TAXONOMY_PODS,
                  0.02 if "allocator-fragmentation" in parts else 0.0015,
                  90.0 if "allocator-fragmentation" in parts else 25.0)
    pods = []
    for j in range(s["pods"]):
        mine = [r for r in reqs if r.pod == j]
        shared = []
        if "gpu-cotenant" in parts and j == cotenant_pod(seed):
            shared = [(0.25 * run_ns, 0.5 * run_ns), (0.65 * run_ns, 0.85 * run_ns)]
        capped = (0.3 + 0.05 * j) * run_ns if "power-capping" in parts else None
        gpu = Gpu(shared, capped, rng.uniform(1.34, 1.4), 0.08 * run_ns)
        leaking = "cache-leak" in parts  # leaking since the deploy, hours before: the heap has grown
        pauses = collections(rng, [r.send for r in mine], horizon, 1_200_000.0 if leaking else 450_000.0,
                             3000.0 if leaking else 0.0)
        pod = Pod(rng, knobs, gpu, pauses)
        pod.run(mine, [r.send + 0.3e6 * rng.lognormvariate(0.0, 0.3) for r in mine], slow)
        pods.append(pod)
    reported: dict[int, list] = {}
    if st.gc_events:
        for j, pod in enumerate(pods):
            mine = sorted((r for r in reqs if r.pod == j), key=lambda r: r.start)
            k = 0
            for a, b, gen, objects in pod.pauses:
                while k < len(mine) and mine[k].end < a:
                    k += 1
                owner = next((r for r in mine[k:k + 64] if r.start <= a < r.end), None)
                if owner is not None:
                    reported.setdefault(id(owner), []).append(sp.gc_event(a, b, gen, objects))
    for r in reqs:
        sp.write_request(table, res, r, rng.randrange(UPSTREAM_PODS), rng.randrange(1000, 99_999),
                         reported.get(id(r), []))
    return table
