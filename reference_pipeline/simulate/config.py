"""The simulator's knobs and the scenarios that turn them.

Every duration is in milliseconds. A `(median, sigma)` pair is a log-normal: the median of the
distribution and the standard deviation of its logarithm. Each scenario changes the mechanism, never
the output: a bigger GC rate, a lock held longer, a cache that starts empty, a heavier-tailed
dependency; what that does to the spans follows from the model in `model.py`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from reference_pipeline import span_model

# span_model's scenarios plus the simulator's own (a subset of clients behind a slow network).
SCENARIOS: tuple[str, ...] = (*span_model.SCENARIOS, "network-jitter")
NAMINGS = ("reference", "alt")  # see naming.py
# pipeline: the reference pipeline's span tree (named by NAMINGS); the others render the same mechanisms
# as services of other shapes, for held-out accuracy checks: gateway (gateway.py: a two-tier gRPC
# service), region (region.py: a caller in another region wraps the server), readthrough
# (readthrough.py: a read-through cache whose misses add a fallback call), queue-worker
# (queue_worker.py: request-reply through a message queue to a worker)
TOPOLOGIES = ("pipeline", "gateway", "region", "readthrough", "queue-worker")
FORMATS = ("otlp-json", "jaeger")  # see writers.py

LogNormal = tuple[float, float]

# 2026-01-01T00:00:00Z: a fixed start keeps the output byte-identical for a given seed.
DEFAULT_START_NS = 1_767_225_600_000_000_000


@dataclass(frozen=True)
class SimConfig:
    scenario: str = "steady"
    requests: int = 4000
    seed: int = 0
    start_ns: int = DEFAULT_START_NS
    topology: str = "pipeline"  # one of TOPOLOGIES
    gc_events: bool = True  # report GC pauses as span events (the gateway topology can leave them out)
    gateway_ms: LogNormal = (0.12, 0.4)  # gateway topology: the gateway's own work (authorisation)

    # load: open-loop Poisson arrivals at `rps`, or at `load` × capacity when rps is None
    rps: float | None = None
    load: float = 0.5
    # bursts: (start as a fraction of the nominal run length requests/rps, length in seconds, rate as a
    # multiple of capacity); a burst lasts at most a tenth of the nominal run
    bursts: tuple[tuple[float, float, float], ...] = ()
    clients: int = 8  # load-generator hosts
    slow_clients: int = 0  # how many of them sit behind a slow network
    net_ms: LogNormal = (0.35, 0.4)  # one way, loadgen <-> server
    slow_net_ms: LogNormal = (30.0, 0.7)

    # servers: `workers` instances (processes), each with one model worker, its cache and its lock
    workers: int = 3
    max_batch: int = 8
    max_wait_ms: float = 5.0
    device: str = "cpu"
    gpu_name: str = ""
    dtype: str = "fp32"
    torch_version: str = "2.13.0"
    forward_base_ms: float = 10.0  # forward = base + per_item × batch size, times log-normal noise
    forward_per_item_ms: float = 2.5
    forward_sigma: float = 0.06

    # request content and the cheap stages
    text_chars: LogNormal = (300.0, 0.7)
    receive_ms: float = 0.04  # + per kB of body
    receive_per_kb_ms: float = 0.02
    parse_ms: float = 0.08  # + per character
    parse_per_char_ms: float = 0.0002
    tokenize_ms: float = 0.05  # + per character
    tokenize_per_char_ms: float = 0.0012
    stage_sigma: float = 0.3
    gap_ms: LogNormal = (0.015, 0.5)  # scheduling gaps between stages (the root's self time)
    serialize_ms: float = 0.06
    postprocess_ms: LogNormal = (0.15, 0.3)

    # feature hydration: entity popularity is Zipf(zipf_s) over `entities`; a TTL + LRU cache per process
    entities: int = 5000
    zipf_s: float = 1.1
    cache_capacity: int = 10000
    cache_ttl_s: float = 3600.0
    cache_jitter: float = 0.2  # TTLs spread by ± this fraction
    cache_prefill: bool = True
    cache_hit_ms: LogNormal = (0.02, 0.4)
    store_ms: LogNormal = (4.0, 0.5)  # one feature-store read (profile + windowed aggregates)
    store_pool: int = 4  # connections per process; reads beyond them wait in the store client

    # postprocessing takes the score monitor's lock on every request
    lock_hold_ms: LogNormal = (0.03, 0.3)
    lock_convoy: float = 0.0  # hold grows by this fraction per waiter (cache-line and handoff cost)

    # downstream /enrich
    downstream_fraction: float = 1.0
    downstream_ms: LogNormal = (1.5, 0.35)
    downstream_net_ms: LogNormal = (0.25, 0.4)
    downstream_pareto: tuple[float, float] | None = None  # (scale ms, alpha): heavy-tailed extra delay
    downstream_instances: int = 2

    # garbage collection: (rate per second of process time, duration range ms, generation)
    gc_minor_rate: float = 2.0
    gc_minor_ms: LogNormal = (0.5, 0.6)
    gc_major_rate: float = 0.0
    gc_major_ms: tuple[float, float] = (30.0, 150.0)

    # cold start: each process starts cold; `restarts` rolls every instance once mid-run
    warm_start: bool = True
    restarts: bool = False
    restart_downtime_s: float = 1.0
    cold_forward_ms: float = 300.0  # extra on the first forward, decaying with the batch index
    cold_forward_decay: float = 1.0
    cold_tokenize_ms: float = 60.0  # extra on the first tokenize, decaying with the request index
    cold_tokenize_decay: float = 6.0

    def capacity_rps(self) -> float:
        """Requests per second all instances serve with full batches."""
        per_batch_ms = self.forward_base_ms + self.forward_per_item_ms * self.max_batch
        return self.workers * self.max_batch * 1000.0 / per_batch_ms

    def arrival_rps(self) -> float:
        return self.rps if self.rps is not None else self.load * self.capacity_rps()


# Hardware setups for comparisons: what the forward pass costs and what the resource says.
HARDWARE: dict[str, dict] = {
    "cpu-fp32": {"device": "cpu", "dtype": "fp32", "forward_base_ms": 10.0, "forward_per_item_ms": 2.5},
    "cpu-int8": {"device": "cpu", "dtype": "int8", "forward_base_ms": 6.0, "forward_per_item_ms": 1.2},
    "gpu-fp32": {"device": "cuda", "gpu_name": "NVIDIA H100 80GB HBM3", "dtype": "fp32",
                 "forward_base_ms": 2.5, "forward_per_item_ms": 0.3},
    "gpu-bf16": {"device": "cuda", "gpu_name": "NVIDIA H100 80GB HBM3", "dtype": "bf16",
                 "forward_base_ms": 1.8, "forward_per_item_ms": 0.12},
}


# What a topology changes in the model (scenario changes win over these). The gateway's model server
# reads features from a local Redis (a round trip, not a dict lookup) and a PostgreSQL table on a miss;
# the region family's caller is ~38 ms away over a steady WAN link (a worse one for network-jitter's
# slow callers); the read-through cache is a Redis round trip in front of a slower MySQL query.
TOPOLOGY_CHANGES: dict[str, dict] = {
    "gateway": {"cache_hit_ms": (0.25, 0.35), "store_ms": (5.0, 0.5)},
    "region": {"net_ms": (38.0, 0.03), "slow_net_ms": (70.0, 0.5)},
    "readthrough": {"cache_hit_ms": (0.3, 0.3), "store_ms": (9.0, 0.45)},
    "queue-worker": {},
}


def _scenario_changes(name: str) -> dict:
    """A scenario's changes; `a+b` plants both causes (their changes merged: two-cause runs)."""
    if "+" in name:
        out: dict = {}
        for part in name.split("+"):
            out.update(_one_scenario(part))
        return out
    return _one_scenario(name)


def _one_scenario(name: str) -> dict:
    if name == "steady":
        return {}
    if name == "burst":
        return {"bursts": ((0.3, 2.0, 1.6),)}
    if name == "gc-pressure":
        return {"gc_major_rate": 1.0, "gc_minor_rate": 6.0}
    if name == "lock-contention":
        return {"lock_hold_ms": (1.2, 0.35), "lock_convoy": 0.08}
    if name == "cold-cache":
        return {"cache_prefill": False, "cache_capacity": 100}
    if name == "key-expiry":
        # a hot key set (per-merchant features, say): every key is read far more often than its TTL
        return {"cache_jitter": 0.0, "cache_ttl_s": None, "entities": 60, "zipf_s": 0.6}
    if name == "slow-downstream":
        return {"downstream_pareto": (2.0, 1.2)}
    if name == "cold-start":
        return {"warm_start": False, "restarts": True, "cache_prefill": False}
    if name == "network-jitter":
        return {"slow_clients": 2}
    raise ValueError(f"unknown scenario {name!r}; one of {', '.join(SCENARIOS)}")


def scenario_config(scenario: str = "steady", requests: int = 4000, seed: int = 0,
                    hardware: str | None = None, **overrides) -> SimConfig:
    """The configuration of one scenario on one hardware setup (default cpu-fp32); keyword overrides
    of SimConfig fields win (None values are ignored)."""
    changes = _scenario_changes(scenario)
    if hardware is not None and hardware not in HARDWARE:
        raise ValueError(f"unknown hardware {hardware!r}; one of {', '.join(HARDWARE)}")
    changes = {**HARDWARE[hardware or "cpu-fp32"], **{k: v for k, v in changes.items() if v is not None}}
    topology = overrides.get("topology")
    if topology not in (None, *TOPOLOGIES):
        raise ValueError(f"unknown topology {topology!r}; one of {', '.join(TOPOLOGIES)}")
    changes = {**TOPOLOGY_CHANGES.get(topology or "pipeline", {}), **changes}
    config = replace(SimConfig(), scenario=scenario, requests=requests, seed=seed, **changes)
    config = replace(config, **{k: v for k, v in overrides.items() if v is not None})
    if config.requests < 1:
        raise ValueError("requests must be >= 1")
    if config.workers < 1 or config.max_batch < 1 or config.max_wait_ms < 0:
        raise ValueError("workers and max_batch must be >= 1 and max_wait_ms >= 0")
    if "key-expiry" in scenario.split("+") and "cache_ttl_s" not in overrides:
        # every key is filled at once with one TTL: they all expire together 30% of the way in, are
        # refetched within a short window (a stampede), and so expire together again one TTL later
        nominal_s = config.requests / config.arrival_rps()
        config = replace(config, cache_ttl_s=max(1.0, nominal_s * 0.3))
    return config
