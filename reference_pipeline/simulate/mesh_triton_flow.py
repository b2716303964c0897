"""One run of the blind family `mesh-triton` (mesh_triton.py), request by request: the ingress gateway
and sidecars, the Rust `score` pods (CPU quota, steal), the Redis Cluster, Triton's batchers (run once
every request has reached them) and the policy call under Envoy's retry policy."""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

from reference_pipeline.simulate.mesh_triton_physics import (
    Attempt,
    Batcher,
    Cpu,
    Job,
    LeastRequest,
    RedisCluster,
    Upstream,
    cfs_stalls,
)
from reference_pipeline.simulate.trace_table import (
    NS_PER_MS,
    NS_PER_S,
    Stalls,
    lognormal_ms,
    poisson_arrivals,
)

PER_TRY_MS, RETRIES, BACKOFF_MS = 80.0, 2, 25.0  # VirtualService retries: attempts 2, perTryTimeout 80ms
SIGN_MS = 6.5  # one RSA-4096 CertificateVerify on a busy Envoy worker (the mesh's plugged-in CA)


@dataclass
class Plan:
    """What a scenario changes: the load's shape, the Triton pods, the score pods' CPU, the pools."""

    bursts: tuple[tuple[float, float, float], ...] = ()
    cold_at: float | None = None  # the share of the run after which the new Triton pod is ready
    growth: bool = False
    quota_ms: float | None = None
    steal_pod: int | None = None
    churn: bool = False
    slow_policy: int | None = None
    reshard: bool = False


@dataclass
class Try:
    """One upstream try of the policy call through Envoy."""

    endpoint: int
    inbound: tuple[float, float]  # the policy sidecar's inbound span
    server: tuple[float, float]  # the FastAPI handler (runs to its end even when the try was cut)
    cut: bool


@dataclass
class Request:
    """One request as the model timed it (ns from the run's start); the spans follow from it."""

    pod: int
    gateway: int
    items: int
    nbytes: int
    gw: tuple[float, float] = (0.0, 0.0)
    inbound: tuple[float, float] = (0.0, 0.0)
    root: tuple[float, float] = (0.0, 0.0)
    features: tuple[float, float] = (0.0, 0.0)
    redis: list[tuple[str, Attempt, float]] = field(default_factory=list)  # command, attempt, seen at
    build: tuple[float, float] = (0.0, 0.0)
    infer: tuple[float, float] = (0.0, 0.0)
    out_triton: tuple[float, float] = (0.0, 0.0)
    in_triton: tuple[float, float] = (0.0, 0.0)
    triton_pod: int = 0
    grpc: tuple[float, float] = (0.0, 0.0)  # Triton's InferRequest (gRPC handler)
    job: Job | None = None
    rerank: tuple[float, float] = (0.0, 0.0)
    policy_call: tuple[float, float] = (0.0, 0.0)
    out_policy: tuple[float, float] = (0.0, 0.0)
    tries: list[Try] = field(default_factory=list)
    status: int = 200


def _ms(rng: random.Random, median: float, sigma: float = 0.3) -> float:
    return lognormal_ms(rng, median, sigma)


def _transfer(nbytes: int) -> float:
    return nbytes / 1.2e9 * NS_PER_S  # one hop through a sidecar, ~1.2 GB/s


def simulate(s: dict[str, Any], plan: Plan, requests: int, seed: int) -> list[Request]:
    rng = random.Random(seed * 1_000_003 + 16)
    span_s = requests / s["rps"]
    arrivals = poisson_arrivals(
        rng, s["rps"], requests, tuple((a * span_s, b * span_s, m) for a, b, m in plan.bursts)
    )
    horizon = arrivals[-1] + 5 * NS_PER_S
    pods, tritons = s["pods"], 3 if plan.cold_at is not None else 2
    ready = [0.0, 0.0, (plan.cold_at or 0.0) * span_s * NS_PER_S]
    reqs: list[Request] = []
    for t0 in arrivals:
        items = int(rng.lognormvariate(5.48, 0.3))  # ~240 candidates
        if plan.growth and rng.random() < min(0.9, max(0.0, (t0 / NS_PER_S / span_s - 0.3) / 0.3 * 0.9)):
            items = int(items * 2.3)  # the new client version sends its whole candidate page
        reqs.append(Request(rng.randrange(pods), rng.randrange(2), items, 300 + items * 280, gw=(t0, t0)))
    demand: list[list[tuple[float, float]]] = [[] for _ in range(pods)]
    for r in reqs:
        demand[r.pod] += [(r.gw[0], _pre_work(r.items)), (r.gw[0] + 35 * NS_PER_MS, _post_work(r.items))]
    for k in range(pods):
        demand[k] += [(p * 1e8, 0.4 * NS_PER_MS) for p in range(int(horizon // 1e8))]  # tokio, exporter
    cpus = []
    for k in range(pods):
        stalls = cfs_stalls(demand[k], plan.quota_ms) if plan.quota_ms else []
        noisy = plan.steal_pod == k
        cpus.append(Cpu(Stalls(stalls), rng, 3.5 if noisy else 1.0, 2.0 if noisy else 0.0))
    cluster = RedisCluster(rng, 6, horizon, plan.reshard, pods)
    churn = 1.0 if plan.churn else 0.004
    to_score, to_triton, to_policy = (Upstream(rng, churn, SIGN_MS) for _ in range(3))
    pick_triton = [LeastRequest(rng, tritons) for _ in range(pods)]
    pick_policy = [LeastRequest(rng, 4) for _ in range(pods)]
    jobs: list[list[Job]] = [[] for _ in range(tritons)]
    for i, r in enumerate(reqs):
        _ingress_to_triton(rng, r, cpus[r.pod], cluster, to_score, to_triton, pick_triton[r.pod], ready)
        r.job = Job(i, r.grpc[0] + _ms(rng, 0.05) + r.nbytes * 1e-6 * NS_PER_MS, r.items, r.nbytes)
        jobs[r.triton_pod].append(r.job)
    for k in range(tritons):
        Batcher(
            random.Random(seed * 71 + k),
            s["gpu_instances"],
            s["queue_delay_ms"],
            cold=plan.cold_at is not None and k == 2,
        ).run(jobs[k])
    for r in reqs:
        _triton_to_response(rng, r, cpus[r.pod], to_policy, pick_policy[r.pod], plan.slow_policy)
    return reqs


def _pre_work(items: int) -> float:
    return (0.06 + 0.0004 * items + 0.5 + 0.006 * items) * NS_PER_MS  # parse the body, build the tensors


def _post_work(items: int) -> float:
    return (0.3 + 0.003 * items + 0.1 + 0.0006 * items) * NS_PER_MS  # rerank, serialise the response


def _ingress_to_triton(
    rng: random.Random,
    r: Request,
    cpu: Cpu,
    cluster: RedisCluster,
    to_score: Upstream,
    to_triton: Upstream,
    pick: LeastRequest,
    ready: list[float],
) -> None:
    t0 = r.gw[0]
    t, _ = to_score.connect(t0 + _ms(rng, 0.18), r.pod)
    in_s = t + _ms(rng, 0.08)
    root_s = cpu.settle(in_s + _ms(rng, 0.12))
    t = cpu.run(root_s, (0.06 + 0.0004 * r.items) * NS_PER_MS)
    feat_s = t
    uid = rng.randrange(1_000_000)
    for command, suffix, work in (("HMGET", "f", 0.09), ("LRANGE", "hist", 0.05)):
        for a in cluster.command(r.pod, f"user:{{{uid}}}:{suffix}", t, work * NS_PER_MS):
            seen = cpu.settle(a.end)
            r.redis.append((command, a, seen))
            t = seen
    feat_e = cpu.run(t, 0.03 * NS_PER_MS)
    build_s = cpu.run(feat_e, 0.01 * NS_PER_MS)
    build_e = cpu.run(build_s, (0.5 + 0.006 * r.items) * NS_PER_MS)
    call_s = cpu.run(build_e, 0.02 * NS_PER_MS)
    out_s = call_s + _ms(rng, 0.04)
    candidates = {k for k, at in enumerate(ready) if at <= out_s and k < len(pick.busy)}
    r.triton_pod = pick.pick(out_s, set(range(len(pick.busy))) - candidates)
    t, _ = to_triton.connect(out_s + _ms(rng, 0.15), r.triton_pod)
    in_t = t + _ms(rng, 0.1) + _transfer(r.nbytes)
    grpc_s = in_t + _ms(rng, 0.12) + _transfer(r.nbytes)
    r.inbound, r.root, r.features = (in_s, 0.0), (root_s, 0.0), (feat_s, feat_e)
    r.build, r.infer, r.out_triton = (build_s, build_e), (call_s, 0.0), (out_s, 0.0)
    r.in_triton, r.grpc = (in_t, 0.0), (grpc_s, 0.0)


def _policy_ms(rng: random.Random, slow: bool) -> float:
    if slow:  # the bad endpoint: its handler pages through a model reload
        return _ms(rng, 115.0, 0.45)
    ms = _ms(rng, 10.0, 0.35)
    if rng.random() < 0.012:
        ms += 25.0 * NS_PER_MS * rng.paretovariate(1.8)  # healthy noise: a slow call now and then
    return ms


def _triton_to_response(
    rng: random.Random, r: Request, cpu: Cpu, to_policy: Upstream, pick: LeastRequest, slow_policy: int | None
) -> None:
    j = r.job
    assert j is not None
    grpc_e = j.compute_end + _ms(rng, 0.03) + _ms(rng, 0.05)
    in_e = grpc_e + _ms(rng, 0.08)
    out_e = in_e + _ms(rng, 0.1)
    call_e = cpu.settle(out_e + _ms(rng, 0.04))
    r.grpc, r.in_triton = (r.grpc[0], grpc_e), (r.in_triton[0], in_e)
    r.out_triton, r.infer = (r.out_triton[0], out_e), (r.infer[0], call_e)
    rerank_s = cpu.run(call_e, 0.01 * NS_PER_MS)
    rerank_e = cpu.run(rerank_s, (0.3 + 0.003 * r.items) * NS_PER_MS)
    pc_s = cpu.run(rerank_e, 0.02 * NS_PER_MS)
    pout_s = pc_s + _ms(rng, 0.04)
    t = pout_s + _ms(rng, 0.12)
    tried: set[int] = set()
    reset = False
    for _attempt in range(RETRIES + 1):
        ep = pick.pick(t, tried)
        deadline = t + PER_TRY_MS * NS_PER_MS
        conn, _ = to_policy.connect(t, ep, forced=reset)
        pin_s = conn + _ms(rng, 0.1)
        srv_s = pin_s + _ms(rng, 0.1)
        srv_e = srv_s + _policy_ms(rng, ep == slow_policy)
        reply = srv_e + _ms(rng, 0.08) + _ms(rng, 0.1)
        if reply <= deadline:
            r.tries.append(Try(ep, (pin_s, srv_e + _ms(rng, 0.08)), (srv_s, srv_e), False))
            pick.hold(ep, reply)
            t = reply
            break
        r.tries.append(Try(ep, (pin_s, deadline + _ms(rng, 0.1)), (srv_s, srv_e), True))
        pick.hold(ep, deadline)
        tried.add(ep)
        reset = True  # the reset closes the HTTP/1.1 connection: the next try opens a new one
        t = deadline
        if _attempt < RETRIES:
            t += rng.uniform(0.0, BACKOFF_MS) * NS_PER_MS
    r.status = 200 if not r.tries[-1].cut else 504
    pout_e = t + _ms(rng, 0.05)
    pc_e = cpu.settle(pout_e + _ms(rng, 0.04))
    r.out_policy, r.policy_call = (pout_s, pout_e), (pc_s, pc_e)
    r.rerank = (rerank_s, rerank_e)
    root_e = cpu.run(pc_e, (0.1 + 0.0006 * r.items) * NS_PER_MS)
    r.root = (r.root[0], root_e)
    r.inbound = (r.inbound[0], root_e + _ms(rng, 0.08))
    r.gw = (r.gw[0], r.inbound[1] + _ms(rng, 0.15))
