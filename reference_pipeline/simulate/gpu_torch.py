"""Blind family `gpu-torch`: an image + text product-classification service on GPUs, in Python
(gpu_torch_pod.py: one frontend process as a discrete-event model; gpu_torch_physics.py: the GIL, the
copy engine, the model's cost, CPython's collector, the I/O; gpu_torch_spans.py: the conventions).

DOCSTRING
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
        "cache-leak": Cause("gc_pause", "preprocessing", st.decode, sp.FE, fe, side=("queueing",)),
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
            miss_p = 0.75 - 0.45 * (at - 0.3) / 0.7
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
    max_batch, max_wait = (32, 60.0) if "batcher-max-wait" in parts else (s["max_batch"], s["max_wait_ms"])
    knobs = Knobs(s["threads"], max_batch, max_wait, s["db_pool"], TIMEOUT_MS, TAXONOMY_PODS,
                  0.02 if "allocator-fragmentation" in parts else 0.0015,
                  90.0 if "allocator-fragmentation" in parts else 25.0)
    pods = []
    for j in range(s["pods"]):
        mine = [r for r in reqs if r.pod == j]
        shared = []
        if "gpu-cotenant" in parts and j == cotenant_pod(seed):
            shared = [(0.25 * run_ns, 0.5 * run_ns), (0.65 * run_ns, 0.85 * run_ns)]
        capped = (0.3 + 0.05 * j) * run_ns if "power-capping" in parts else None
        gpu = Gpu(shared, capped, rng.uniform(1.34, 1.4))
        leak = 2500.0 if "cache-leak" in parts else 0.0
        pauses = collections(rng, [r.send for r in mine], horizon, 450_000.0, leak)
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
