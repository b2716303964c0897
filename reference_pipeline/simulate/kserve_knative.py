"""Blind family `kserve-knative`: fraud/risk scoring of card payments served by KServe on Knative
Serving (kserve_knative_sim.py: the engine and the machinery; kserve_knative_flow.py: one request;
kserve_knative_spans.py: the conventions).

Shape: `payments-api` (Kotlin, Ktor on Netty with coroutines, G1; 4 pods) serves
`POST /v1/payments/authorize`: it calls the `fraud-xgb` InferenceService through the Istio ingress
gateway (2 pods; retries a refused or reset attempt on another pod, up to 2 retries, a jittered
25 ms-based backoff), then inserts the authorization into Postgres. The InferenceService's
**transformer** (the KServe Python model server: uvicorn, one asyncio loop per worker process, 1
per pod, 2 on seed 1; 3 pods behind a queue-proxy with containerConcurrency 0) parses the request
(pydantic, V2 or V1 protocol), preprocesses (a gRPC `GetOnlineFeatures` to a Go feature service over
Redis: a missing key is read from the slow offline history table; then feature assembly, on the loop
or in a 2-process ProcessPool), calls the **predictor** and postprocesses. The predictor revision
(an XGBoost model with TreeSHAP reason codes, ~17 ms a request, the KServe model server: 2 worker
processes per pod, containerConcurrency 4, target 2 at 70 %, min-scale 2, max-scale 10) is reached
through Knative's activator
(target-burst-capacity 200 keeps it in the path): its throttler holds a request until a ready pod
has a free slot. The KPA samples concurrency (in flight plus held in the activator) every 0.5 s,
decides every 2 s on a 60 s stable and a 6 s panic window, panics at twice the ready pods; a new pod
is scheduled, pulls the image (cached on some nodes), downloads the model from S3, loads it and
passes its probe (6-15 s), and its first requests are cold (scale-down is not modelled: the run ends
before a stable window passes). The payments API head-samples 30-40 % of its traces (by seed): the
untraced requests load every tier all the same (65 requests/s or so in all).

Healthy noise: jitter; Poisson arrivals in slow waves (1.15-1.35x); cross-zone hops; 0.2 % of Redis
keys missing (a ~22 ms history read); G1 young pauses (3-12 ms); the transformer's small full
collections (~12 ms every ~8 s).

Conventions by seed (seed % 3): 0: OTLP/JSON, new semconv, pods as `service.instance.id`, KServe's
`preprocess`/`predict`/`postprocess`, Knative's `activator_proxy`/`throttler_try`/`queue_proxy`
spans, the feature service's server span, V2 protocol, CPython collections as `python.gc` events, no
JVM events. 1: Jaeger JSON, old semconv, host.name + process.pid per worker process (2 per
transformer pod), semconv-style `{op} fraud-xgb` spans, no Knative spans, the Istio gateway's span,
the feature service's span, V1 protocol, collections as gen2 counters, G1 pauses as
`jdk.GarbageCollection` events. 2: Zipkin v2, old semconv, endpoint IPs, KServe names, Knative spans,
no gateway or feature-service spans, V2, preprocessing in a ProcessPool, no runtime data.

Mechanisms (scenario: truth):
- `panic-scale-up`: a merchant's flash sale: ~180 requests/s for a quarter of the run: the predictor's
  slots fill, requests wait in the activator, the KPA panics and adds pods that become ready 6-15 s
  later and serve their first requests cold: cold_start, stage queue, at `throttler_try` (Knative
  spans) or the transformer's call; accept queueing.
- `canary-slow-model`: revision 00008 (a deeper model: 3.2x the predict + SHAP time) takes 10 % of
  the traffic on its own pod: compute_bound at the predictor's `predict`, the canary pod; accept
  slow_dependency.
- `concurrency-one`: the revision copied a batch template: containerConcurrency 1, max-scale 2: the
  activator holds requests for the one slot of each pod: queueing at `throttler_try` / the call.
- `loop-blocking`: new velocity features in pure Python (~7 ms median, heavy tail) run on the
  transformer's event loop; every coroutine of that process waits behind them (in a ProcessPool on
  seed 2: its 2 workers queue): compute_bound at `preprocess`, accept queueing, side slow_dependency.
- `redis-evictions`: the feature Redis at maxmemory evicts (allkeys-lru after a new feature view):
  20 % of keys miss and are read from the history table: cache_miss at `GetOnlineFeatures` (the
  feature service's span, else the transformer's client span); accept slow_dependency.
- `omp-throttling`: one predictor pod lands on a 32-vCPU node: XGBoost's OpenMP uses 32 threads that
  spin under the pod's 2-CPU quota: periods spent in ms, then throttled: cpu_throttling at the
  predictor's `predict`, that pod.
- `python-gc`: an unbounded per-merchant cache in transformer pods 0 and 1: full collections of
  ~120 ms every ~1.2 s stop their loops: gc_pause at the transformer's server span, those pods.
- `jvm-gc`: an idempotency-key cache leak on payments-api pods 1 and 2: a full old generation makes
  evacuation failures (35-90 ms young pauses every 0.25-0.6 s) and full collections (280-520 ms every
  3-5 s): gc_pause at the root span, those pods.
- `large-batch`: a rescoring job sends 100-400-row batches (1.2 % of requests) as JSON: their parse
  blocks the transformer's loop and their SHAP holds a predictor process: large_payload at the
  transformer's server span; accept compute_bound; side queueing.
- `termination-retry`: node consolidation evicts the 3 transformer pods one at a time (replacements
  ready 7-11 s later); the model server exits at SIGTERM while the gateway still routes there:
  refused for 1.6-2.2 s, then the pod's IP is gone and SYNs go unanswered for 0.9-1.5 s more (the
  mesh's 250 ms connect timeout); in-flight requests are reset (their spans die unexported); the
  gateway retries on another pod after a jittered backoff: timeout_retry at the gateway's span
  (seed 1) or the payments API's call; accept network.
- Two causes: `panic-scale-up+redis-evictions`, `jvm-gc+loop-blocking`,
  `canary-slow-model+termination-retry`: each at its own service.
"""

from __future__ import annotations

import random
from typing import Any

from reference_pipeline.simulate import kserve_knative_flow as fl
from reference_pipeline.simulate import kserve_knative_spans as sp
from reference_pipeline.simulate.kserve_knative_sim import (
    Kpa,
    Loop,
    Quota,
    Sim,
    Slots,
    Throttler,
    gen2_collections,
)
from reference_pipeline.simulate.trace_table import (
    NS_PER_MS,
    NS_PER_S,
    Cause,
    Stalls,
    TraceTable,
    merge_intervals,
    poisson_arrivals,
    random_pauses,
)

FAMILY = "kserve-knative"
SINGLES = ("panic-scale-up", "canary-slow-model", "concurrency-one", "loop-blocking", "redis-evictions",
           "omp-throttling", "python-gc", "jvm-gc", "large-batch", "termination-retry")
PAIRS = ("panic-scale-up+redis-evictions", "jvm-gc+loop-blocking", "canary-slow-model+termination-retry")
SCENARIOS = ("steady", *SINGLES, *PAIRS)
API_PODS, TRANSFORMER_PODS, FEATURE_PODS, ACTIVATORS, MIN_SCALE = 4, 3, 3, 2, 2
GC_API_PODS, GC_TRANSFORMER_PODS, THROTTLED_POD, EVICTED = (1, 2), (0, 1), 1, (0, 1, 2)
_SETUPS = (
    {"fmt": "otlp-json", "semconv": "new", "ident": "pod", "names": "kserve", "protocol": "v2",
     "knative": True, "gateway": False, "feature_spans": True, "py_gc": "events", "jvm_gc": "none",
     "workers": 1, "pool": False, "rps": 65.0, "sample": 0.33},
    {"fmt": "jaeger", "semconv": "old", "ident": "pid", "names": "semconv", "protocol": "v1",
     "knative": False, "gateway": True, "feature_spans": True, "py_gc": "attrs", "jvm_gc": "events",
     "workers": 2, "pool": False, "rps": 62.0, "sample": 0.4},
    {"fmt": "zipkin", "semconv": "old", "ident": "ip", "names": "kserve", "protocol": "v2",
     "knative": True, "gateway": False, "feature_spans": False, "py_gc": "none", "jvm_gc": "none",
     "workers": 1, "pool": True, "rps": 72.0, "sample": 0.3},
)


def setup(seed: int) -> dict[str, Any]:
    return dict(_SETUPS[seed % 3])


def style(seed: int) -> sp.Style:
    s = setup(seed)
    return sp.Style(s["semconv"], s["ident"], s["names"], s["protocol"], s["knative"], s["gateway"],
                    s["feature_spans"], s["py_gc"], s["jvm_gc"])


def _pods(prefix: str, n: int) -> tuple[str, ...]:
    return tuple(sp.pod_name(prefix, k) for k in range(n))


def instances(seed: int, service: str, which: tuple[int, ...] | None = None) -> tuple[str, ...]:
    """The labels of a service's instances (of the pods `which`, or all of them) in the seed's style."""
    st, s = style(seed), setup(seed)
    pods = {sp.API: _pods(sp.API_PODS, API_PODS),
            sp.TRANSFORMER: _pods(sp.TRANSFORMER_PODS, TRANSFORMER_PODS),
            sp.FEATURES: _pods(sp.FEATURE_PODS, FEATURE_PODS), sp.GATEWAY: fl.GATEWAY_PODS,
            sp.PREDICTOR: _pods(sp.predictor_pods(sp.STABLE), MIN_SCALE)}[service]
    pids = (1,) if service in (sp.API, sp.GATEWAY, sp.FEATURES) else (
        tuple(range(7, 7 + s["workers"])) if service == sp.TRANSFORMER else (7, 8))
    chosen = pods if which is None else tuple(pods[k] for k in which)
    return tuple(dict.fromkeys(st.label(p, pid) for p in chosen for pid in pids))


def canary_instances(seed: int) -> tuple[str, ...]:
    st = style(seed)
    return tuple(dict.fromkeys(st.label(sp.pod_name(sp.predictor_pods(sp.CANARY), 0), pid) for pid in (7, 8)))


def truth(scenario: str, seed: int) -> tuple[Cause, ...]:
    if scenario not in SCENARIOS:
        raise ValueError(f"unknown {FAMILY} scenario {scenario!r}; one of {', '.join(SCENARIOS)}")
    st = style(seed)
    tr = instances(seed, sp.TRANSFORMER)
    if st.knative:
        wait: tuple[str, str, tuple[str, ...]] = (sp.THROTTLER_TRY, sp.ACTIVATOR, tuple(
            st.label(p) for p in _pods(sp.ACTIVATOR_PODS, ACTIVATORS)))
    else:
        wait = (st.http_client, sp.TRANSFORMER, tr)
    feat = (sp.FEATURES, instances(seed, sp.FEATURES)) if st.feature_spans else (sp.TRANSFORMER, tr)
    retry = ((sp.GATEWAY_SPAN, sp.GATEWAY, instances(seed, sp.GATEWAY)) if st.gateway
             else (st.http_client, sp.API, instances(seed, sp.API)))
    causes = {
        "panic-scale-up": Cause("cold_start", "queue", wait[0], wait[1], wait[2], accept=("queueing",)),
        "canary-slow-model": Cause("compute_bound", "model_forward", st.step("predict"), sp.PREDICTOR,
                                   canary_instances(seed), accept=("slow_dependency",)),
        "concurrency-one": Cause("queueing", "queue", *wait),
        "loop-blocking": Cause("compute_bound", "preprocessing", st.step("preprocess"), sp.TRANSFORMER, tr,
                               accept=("queueing",), side=("slow_dependency",)),
        "redis-evictions": Cause("cache_miss", "feature_hydration", sp.GET_FEATURES, *feat,
                                 accept=("slow_dependency",)),
        "omp-throttling": Cause("cpu_throttling", "model_forward", st.step("predict"), sp.PREDICTOR,
                                instances(seed, sp.PREDICTOR, (THROTTLED_POD,))),
        "python-gc": Cause("gc_pause", None, st.route, sp.TRANSFORMER,
                           instances(seed, sp.TRANSFORMER, GC_TRANSFORMER_PODS)),
        "jvm-gc": Cause("gc_pause", None, sp.AUTHORIZE, sp.API, instances(seed, sp.API, GC_API_PODS)),
        "large-batch": Cause("large_payload", None, st.route, sp.TRANSFORMER, tr, accept=("compute_bound",),
                             side=("queueing",)),
        "termination-retry": Cause("timeout_retry", "ingress", *retry, accept=("network",)),
    }
    return tuple(causes[part] for part in scenario.split("+") if part != "steady")


def _waves(rng: random.Random, run_s: float) -> tuple[tuple[float, float, float], ...]:
    """The day's slow waves: a few stretches of 1.15-1.35x traffic."""
    out, t = [], rng.uniform(2.0, 6.0)
    while t < run_s:
        length = rng.uniform(2.0, 5.0)
        out.append((t, length, rng.uniform(1.15, 1.35)))
        t += length + rng.uniform(4.0, 9.0)
    return tuple(out)


def generate(scenario: str, requests: int, seed: int, **opts: Any) -> TraceTable:
    truth(scenario, seed)
    s = {**setup(seed), **opts}
    parts = set(scenario.split("+")) - {"steady"}
    rng = random.Random(seed * 1_000_003 + 3838)
    table = TraceTable(seed, 0x38B)
    st = style(seed)
    res = sp.Resources(table, st)
    run_s = requests / s["sample"] / s["rps"]
    bursts = _waves(rng, run_s)
    if "panic-scale-up" in parts:
        bursts = ((0.25 * run_s, 0.25 * run_s, 180.0 / s["rps"]),)  # a flash sale: ~180 requests/s
    arrivals = poisson_arrivals(rng, s["rps"], int(requests / s["sample"] * 1.4) + 100, bursts)
    traced = [rng.random() < s["sample"] for _ in arrivals]
    last = [k for k, x in enumerate(traced) if x][requests - 1]
    arrivals, traced = arrivals[:last + 1], traced[:last + 1]
    horizon = arrivals[-1] + 30 * NS_PER_S
    sim = Sim()
    api_pauses = {}
    for k, pod in enumerate(_pods(sp.API_PODS, API_PODS)):
        if "jvm-gc" in parts and k in GC_API_PODS:  # a full old gen: evacuation failures, full GCs
            pauses = (random_pauses(rng, horizon, (0.25, 0.6), (35.0, 90.0))
                      + random_pauses(rng, horizon, (3.0, 5.0), (280.0, 520.0)))
        else:
            pauses = random_pauses(rng, horizon, (1.0, 2.2), (3.0, 12.0))
        api_pauses[pod] = merge_intervals(pauses)
    tpods = []
    for k, pod in enumerate(_pods(sp.TRANSFORMER_PODS, TRANSFORMER_PODS)):
        leak = "python-gc" in parts and k in GC_TRANSFORMER_PODS
        pauses = [gen2_collections(rng, horizon, 1.2 if leak else 8.0, 120.0 if leak else 12.0, 0.3)
                  for _ in range(s["workers"])]
        tp = fl.TPod(pod, [Loop(Stalls(p)) for p in pauses], [7 + w for w in range(s["workers"])], pauses,
                     Slots(2) if s["pool"] else None)
        if "termination-retry" in parts and k in EVICTED:
            tp.killed = (0.25 + 0.25 * EVICTED.index(k)) * run_s * NS_PER_S
            tp.blackhole = tp.killed + rng.uniform(1.6, 2.2) * NS_PER_S
            tp.stale = tp.blackhole + rng.uniform(0.9, 1.5) * NS_PER_S
        tpods.append(tp)
    replacements = []
    for tp in tpods:
        if tp.killed is not None:
            fresh = fl.TPod(sp.pod_name(sp.TRANSFORMER_PODS, 50 + len(replacements)),
                            [Loop(Stalls([])) for _ in range(s["workers"])], list(tp.pids),
                            [[] for _ in range(s["workers"])], Slots(2) if s["pool"] else None,
                            ready=tp.killed + rng.uniform(7.0, 11.0) * NS_PER_S)
            replacements.append(fresh)
    cc = 1 if "concurrency-one" in parts else 4
    throttlers = {sp.STABLE: Throttler(rng)}
    for k in range(MIN_SCALE):
        pod = fl.new_pod(sp.pod_name(sp.predictor_pods(sp.STABLE), k), cc, 0.0, sp.STABLE)
        if "omp-throttling" in parts and k == THROTTLED_POD:
            pod.quota = Quota(200.0, 32.0)
        throttlers[sp.STABLE].pods.append(pod)
    if "canary-slow-model" in parts:
        throttlers[sp.CANARY] = Throttler(rng)
        throttlers[sp.CANARY].pods.append(fl.new_pod(sp.pod_name(sp.predictor_pods(sp.CANARY), 0), 4, 0.0,
                                                     sp.CANARY))
    kpa = Kpa(min(cc, 2) * 0.7, MIN_SCALE, 2 if cc == 1 else 10)
    steady_conc = s["rps"] * 0.02
    kpa.samples = [(-k * 0.5 * NS_PER_S, steady_conc * rng.uniform(0.6, 1.4)) for k in range(1, 121)]
    miss = 0.2 if "redis-evictions" in parts else 0.002
    heavy = 7.0 if "loop-blocking" in parts else 0.0
    w = fl.World(sim, rng, parts, {p: Stalls(v) for p, v in api_pauses.items()}, api_pauses,
                 tpods + replacements, list(_pods(sp.FEATURE_PODS, FEATURE_PODS)),
                 list(_pods(sp.ACTIVATOR_PODS, ACTIVATORS)), throttlers, kpa, miss, heavy,
                 {sp.STABLE: 17.0, sp.CANARY: 17.0 * 3.2})
    sim.start(fl.autoscaler(w, arrivals[-1] + 5 * NS_PER_S, cc, 0.4), 0.0)
    api_names = _pods(sp.API_PODS, API_PODS)
    batch_p = 0.012 if "large-batch" in parts else 0.0
    records = []
    for t, kept in zip(arrivals, traced, strict=True):
        rows = rng.randint(100, 400) if rng.random() < batch_p else 1
        size = int(rows * rng.uniform(1100, 1400)) if rows > 1 else rng.randint(1400, 2600)
        rec = sp.Record(rng.choice(api_names), rows, size)
        if kept:  # the payments API's head sampler: the untraced requests load every tier all the same
            records.append(rec)
        sim.start(fl.request(w, rec), t)
    sim.run()
    for rec in records:
        sp.write_request(table, res, rec)
    return table


__all__ = ["NS_PER_MS", "SCENARIOS", "generate", "setup", "truth"]
