"""One request of the blind family `kserve-knative` (kserve_knative.py) as a process of the engine in
kserve_knative_sim.py: the Kotlin payments API (G1 pauses stop its threads), the Istio ingress
gateway (retries a reset or refused attempt on another pod after a jittered backoff), the
transformer's queue-proxy and event loop (parse, preprocess with the feature service's gRPC call,
the call to the predictor, postprocess), the feature service (Redis, a slow fallback on a miss), the
activator's throttler and the predictor pod's worker process; and the autoscaler's loop.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from reference_pipeline.simulate import kserve_knative_spans as sp
from reference_pipeline.simulate.kserve_knative_sim import (
    Event,
    Kpa,
    Loop,
    Pod,
    Proc,
    Sim,
    Slots,
    Throttler,
    pod_start_ns,
)
from reference_pipeline.simulate.trace_table import NS_PER_MS, NS_PER_S, Stalls, lognormal_ms


@dataclass
class TPod:
    """A transformer pod: its worker processes' loops (and pids), a ProcessPool or not; `killed` is
    when its user container exits (SIGTERM on eviction), `stale` when the gateway stops sending."""

    name: str
    loops: list[Loop]
    pids: list[int]
    pauses: list[list[tuple[float, float]]]
    pool: Slots | None = None
    ready: float = 0.0
    killed: float | None = None
    stale: float | None = None
    blackhole: float | None = None  # from then on the pod's IP is gone: SYNs go unanswered


@dataclass
class World:
    sim: Sim
    rng: random.Random
    parts: set[str]
    api: dict[str, Stalls]
    api_pauses: dict[str, list[tuple[float, float]]]
    tpods: list[TPod]
    features: list[str]
    activators: list[str]
    throttlers: dict[str, Throttler]
    kpa: Kpa
    miss_p: float
    heavy_ms: float
    predict_ms: dict[str, float]
    cold_pods: set[str] = field(default_factory=set)
    connect_timeout: float = 0.25 * NS_PER_S  # the mesh DestinationRule's connectTimeout
    booted: int = 0

    def hop(self) -> float:
        return lognormal_ms(self.rng, 0.3, 0.3) + (0.6 * NS_PER_MS if self.rng.random() < 0.2 else 0.0)


def _route(w: World, tried: set[str]) -> TPod:
    now = w.sim.now
    ok = [p for p in w.tpods if p.ready <= now and (p.stale is None or now < p.stale) and p.name not in tried]
    return w.rng.choice(ok or [p for p in w.tpods if p.ready <= now and p.killed is None])


def request(w: World, rec: sp.Record) -> Proc:
    sim, rng = w.sim, w.rng
    api = w.api[rec.api_pod]
    yield api.settle(sim.now) - sim.now
    root_s = sim.now
    yield api.run(sim.now, lognormal_ms(rng, 0.4, 0.3) + rec.rows * 0.012 * NS_PER_MS) - sim.now
    client_s = sim.now
    yield w.hop()
    tried: set[str] = set()
    gw_s, gw_pod = sim.now, rng.choice(GATEWAY_PODS)
    while True:
        rec.attempts += 1
        pod = _route(w, tried)
        yield w.hop()
        dead = pod.killed is not None and sim.now >= pod.killed
        if dead and pod.blackhole is not None and sim.now >= pod.blackhole:
            yield w.connect_timeout  # the SYN goes to an IP nobody answers
        elif dead:
            yield lognormal_ms(rng, 0.8, 0.3)  # connection refused: 503 from the gateway's try
        else:
            done = Event()
            sim.start(transformer(w, pod, rec, done), sim.now)
            got = yield done.wait(None if pod.killed is None else pod.killed - sim.now)
            if got is not None:
                break
            yield lognormal_ms(rng, 0.3, 0.3)  # the reset reaches the gateway
        rec.failed += 1
        tried.add(pod.name)
        if rec.attempts >= 3:
            break
        yield rng.uniform(0.0, 25.0 * NS_PER_MS) * (2 ** (rec.attempts - 1))  # jittered backoff
    yield w.hop()
    rec.gateway = (gw_pod, gw_s, sim.now)
    yield w.hop()
    client_e = api.run(sim.now, lognormal_ms(rng, 0.15, 0.3) + rec.rows * 0.008 * NS_PER_MS)
    yield client_e - sim.now
    db_s = api.settle(sim.now + lognormal_ms(rng, 0.05, 0.3))
    db_e = api.settle(db_s + lognormal_ms(rng, 1.4, 0.35))
    yield db_e - sim.now
    root_e = api.run(sim.now, lognormal_ms(rng, 0.2, 0.3))
    yield root_e - sim.now
    rec.root, rec.client, rec.db = (root_s, root_e), (client_s, client_e), (db_s, db_e)
    rec.jvm_gc = [(a, b) for a, b in w.api_pauses[rec.api_pod] if root_s <= a < root_e]


GATEWAY_PODS = tuple(sp.pod_name(sp.GATEWAY_PODS, k) for k in range(2))


def transformer(w: World, pod: TPod, rec: sp.Record, done: Event) -> Proc:
    sim, rng = w.sim, w.rng
    k = rng.randrange(len(pod.loops))  # the kernel hands the connection to one worker process
    loop = pod.loops[k]
    qp_s = sim.now
    yield lognormal_ms(rng, 0.12, 0.3)  # queue-proxy (containerConcurrency 0: no limit)
    parse = lognormal_ms(rng, 0.35, 0.25) + rec.rows * 0.09 * NS_PER_MS * rng.lognormvariate(0.0, 0.1)
    srv_s, _ = yield from loop.cpu(sim, parse)
    pre_s, _ = yield from loop.cpu(sim, lognormal_ms(rng, 0.12, 0.3))
    feat_s = sim.now
    yield w.hop()
    feat_srv = None
    fpod = rng.choice(w.features)
    f_s = sim.now
    keys = 3 * max(rec.rows, 1)
    redis = lognormal_ms(rng, 0.45, 0.3) + keys * 0.004 * NS_PER_MS
    if "redis-evictions" in w.parts:
        redis += lognormal_ms(rng, 0.25, 0.4)  # evicting on every write: the shard's loop is busier
    misses = sum(rng.random() < w.miss_p for _ in range(min(keys, 30)))
    fallback = max((lognormal_ms(rng, 22.0, 0.55) for _ in range(misses)), default=0.0)
    yield redis + fallback + lognormal_ms(rng, 0.15, 0.3)
    feat_srv = (fpod, f_s, sim.now, misses)
    yield w.hop()
    _, feat_e = yield from loop.cpu(sim, lognormal_ms(rng, 0.08, 0.3))
    heavy = lognormal_ms(rng, 1.1, 0.3) + rec.rows * 0.02 * NS_PER_MS
    if w.heavy_ms:  # velocity features over the card's history, in pure Python
        heavy += lognormal_ms(rng, w.heavy_ms, 0.9) * (1.0 if rec.rows <= 1 else 0.2 * rec.rows)
    if pod.pool is not None:
        yield pod.pool.take()
        yield lognormal_ms(rng, 0.6, 0.3) + heavy  # pickled to a pool worker, run there
        pod.pool.give(sim)
        _, pre_e = yield from loop.cpu(sim, lognormal_ms(rng, 0.1, 0.3))
    else:
        _, pre_e = yield from loop.cpu(sim, heavy)
    pred_s, call_s = yield from loop.cpu(sim, lognormal_ms(rng, 0.2, 0.3) + rec.rows * 0.03 * NS_PER_MS)
    yield w.hop()
    visit = yield from predictor(w, rec)
    yield w.hop()
    _, call_e = yield from loop.cpu(sim, lognormal_ms(rng, 0.1, 0.3) + rec.rows * 0.02 * NS_PER_MS)
    post = yield from loop.cpu(sim, lognormal_ms(rng, 0.3, 0.3) + rec.rows * 0.02 * NS_PER_MS)
    srv_e = post[1] + lognormal_ms(rng, 0.05, 0.3)
    yield srv_e - sim.now
    if pod.killed is not None and sim.now >= pod.killed:
        return  # reset mid-request: its spans die with the process, unexported
    qp_e = sim.now + lognormal_ms(rng, 0.08, 0.3)
    yield qp_e - sim.now
    pauses = [(a, b) for a, b in pod.pauses[k] if srv_s <= a < srv_e]
    before = [b - a for a, b in pod.pauses[k] if a < srv_e]
    rec.tv = sp.TransformerVisit(pod.name, pod.pids[k], (qp_s, qp_e), (srv_s, srv_e), (pre_s, pre_e),
                                 (feat_s, feat_e), feat_srv, (pred_s, post[0]), (call_s, call_e), visit,
                                 post, pauses, (len(before), sum(before)))
    done.fire(sim, True)


def predictor(w: World, rec: sp.Record) -> Proc:
    sim, rng = w.sim, w.rng
    revision = sp.CANARY if sp.CANARY in w.throttlers and rng.random() < 0.1 else sp.STABLE
    th = w.throttlers[revision]
    activator = rng.choice(w.activators)
    act_s = sim.now
    yield lognormal_ms(rng, 0.2, 0.3)
    thr_s = sim.now
    pod: Pod = yield th.take()
    thr_e = sim.now + lognormal_ms(rng, 0.03, 0.3)
    yield thr_e - sim.now
    yield w.hop()
    qp_s = sim.now
    yield lognormal_ms(rng, 0.1, 0.3)
    k = rng.randrange(len(pod.loops))
    loop = pod.loops[k]
    srv_s, _ = yield from loop.cpu(sim, lognormal_ms(rng, 0.25, 0.3) + rec.rows * 0.05 * NS_PER_MS)
    work = lognormal_ms(rng, w.predict_ms[revision], 0.25)  # margin + TreeSHAP reason codes
    if rec.rows > 1:
        work *= 0.6 + 0.03 * rec.rows  # vectorised over the batch
    if pod.served < 4 and pod.name in w.cold_pods:  # lazy buffers, OpenMP's pool, the explainer
        work += lognormal_ms(rng, 240.0, 0.35)
    pod.served += 1
    yield loop.slots.take()
    c_s = loop.stalls.settle(sim.now)
    c_e = pod.quota.run(c_s, 1.7 * work + 32 * 0.8 * NS_PER_MS) if pod.quota else loop.stalls.run(c_s, work)
    yield c_e - sim.now
    loop.slots.give(sim)
    _, srv_e = yield from loop.cpu(sim, lognormal_ms(rng, 0.2, 0.3) + rec.rows * 0.04 * NS_PER_MS)
    qp_e = srv_e + lognormal_ms(rng, 0.08, 0.3)
    yield qp_e - sim.now
    th.give(sim, pod)
    yield w.hop()
    act_e = sim.now + lognormal_ms(rng, 0.05, 0.3)
    yield act_e - sim.now
    return sp.PredictorVisit(activator, (act_s, act_e), (thr_s, thr_e), pod.name, revision, 7 + k,
                             (qp_s, qp_e), (srv_s, srv_e), (c_s, c_e), rec.rows)


def new_pod(name: str, cc: int, ready: float, revision: str) -> Pod:
    return Pod(name, revision, [Loop(Stalls([])) for _ in range(2)], cc, ready)


def autoscaler(w: World, horizon: float, cc: int, cached_nodes: float) -> Proc:
    """Sample the stable revision's concurrency every 0.5 s; decide every 2 s; start pods."""
    sim, rng, th, kpa = w.sim, w.rng, w.throttlers[sp.STABLE], w.kpa
    tick = 0
    while sim.now < horizon:
        yield 0.5 * NS_PER_S
        tick += 1
        kpa.samples.append((sim.now, float(th.load())))
        if tick % 4:
            continue
        want = kpa.desired(sim.now, len(th.pods))
        for _ in range(want - len(th.pods) - kpa.starting):
            kpa.starting += 1
            w.booted += 1
            name = sp.pod_name(sp.predictor_pods(sp.STABLE), 100 + w.booted)
            sim.start(_boot(w, th, name, cc, pod_start_ns(rng, rng.random() < cached_nodes)), sim.now)


def _boot(w: World, th: Throttler, name: str, cc: int, delay: float) -> Proc:
    yield delay
    w.kpa.starting -= 1
    w.cold_pods.add(name)
    th.add(w.sim, new_pod(name, cc, w.sim.now, sp.STABLE))
