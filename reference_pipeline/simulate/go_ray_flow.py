"""One run of the blind family `go-ray` (go_ray.py): arrivals, each request's gateway and Feast work in
arrival order, every ranker try through the Ray Serve model (go_ray_serve.Serve), then the gateway's
decode and encode once the last try is back; spans written per request (go_ray_spans.py).
"""

from __future__ import annotations

import random
from typing import Any

from reference_pipeline.simulate import go_ray_spans as sp
from reference_pipeline.simulate.go_ray_runtime import ALLOC_MB, BASE_CPU_MS, QUOTA_MS, Path, gateway_runtime
from reference_pipeline.simulate.go_ray_serve import Attempt, Feast, Replica, Serve, ServeConfig, Shard
from reference_pipeline.simulate.trace_table import (
    NS_PER_MS,
    NS_PER_S,
    Stalls,
    TraceTable,
    WorkerPool,
    lognormal_ms,
    merge_intervals,
    poisson_arrivals,
)

MS = NS_PER_MS
PAIRS = 240  # candidates the cross-encoder scores per search
SLOW_SHARD, FLAKY_REPLICA = 2, 1


def response_kb(top_k: int) -> float:
    return 0.6 + 0.72 * top_k


def _top_k(rng: random.Random, raised: bool) -> int:
    if raised and rng.random() < 0.75:
        return 300
    return rng.choices((20, 50, 100), (0.3, 0.6, 0.1))[0]


def _freezes(rng: random.Random, horizon: float, every_s: tuple[float, float],
             length_ms: tuple[float, float]) -> list[tuple[float, float]]:
    out, t = [], rng.uniform(0.0, every_s[1]) * NS_PER_S
    while t < horizon:
        length = rng.uniform(*length_ms) * MS
        out.append((t, t + length))
        t += length + rng.uniform(*every_s) * NS_PER_S
    return out


def _bursts(s: dict[str, Any], parts: set[str], run_s: float) -> tuple[tuple[float, float, float], ...]:
    out: list[tuple[float, float, float]] = []
    if "autoscale-cold" in parts:  # first: a peak inside the rise sets the rate (the later burst wins)
        out.append((0.05 * run_s, 2.0 * run_s, 1.6))
    if "cfs-peaks" in parts:  # at the peak, each pod's demand ~1.25x its quota
        multiple = 1.25 * s["gw_pods"] * QUOTA_MS * 10.0 / (s["rps"] * (BASE_CPU_MS + 1.8))
        t = 0.6
        while t < 1.5 * run_s:
            out.append((t, 0.25, multiple))
            t += 1.5
    return tuple(out)


def simulate(rng: random.Random, table: TraceTable, style: sp.Style, s: dict[str, Any], parts: set[str],
             requests: int, zone_pod: int) -> TraceTable:
    res = sp.Resources(table, style)
    run_s = requests / s["rps"]
    run_ns = run_s * NS_PER_S
    arrivals = poisson_arrivals(rng, s["rps"], requests, _bursts(s, parts, run_s))
    horizon = arrivals[-1] + 5 * NS_PER_S
    pods = [rng.randrange(s["gw_pods"]) for _ in arrivals]
    top_k = [_top_k(rng, "topk-payload" in parts) for _ in arrivals]
    users = [int(20 * rng.paretovariate(0.8)) for _ in arrivals]
    runtimes = []
    for k in range(s["gw_pods"]):
        mine = [i for i, pod in enumerate(pods) if pod == k]
        kb = [response_kb(top_k[i]) for i in mine]
        runtimes.append(gateway_runtime(
            rng, [arrivals[i] for i in mine], [BASE_CPU_MS + 0.05 * x for x in kb],
            [ALLOC_MB + 0.012 * x for x in kb], run_ns, horizon, "heap-growth-gc" in parts))
    paths = [Path(1.0, 0.004) if "cross-zone-pod" in parts and k == zone_pod else Path(0.12, 0.00003)
             for k in range(s["gw_pods"])]
    shards = []
    for k in range(len(sp.SHARDS)):
        freezes = _freezes(rng, horizon, (4.0, 8.0), (4.0, 10.0))  # BGSAVE forks
        slow = "redis-slow-disk" in parts and k == SLOW_SHARD
        if slow:  # AOF writes on a degraded disk block the event loop
            freezes += _freezes(rng, horizon, (0.3, 0.9), (60.0, 250.0))
        shards.append(Shard(Stalls(merge_intervals(freezes)), 2.5 if slow else 1.0))
    feast = Feast([WorkerPool(16) for _ in range(s["feast_pods"])], shards)
    expired_from = 0.3 * run_ns if "ttl-expiry-wave" in parts else None

    # the gateway up to its first ranker try, and Feast, per request in arrival order
    proxy_of = [k % s["nodes"] for k in range(s["gw_pods"])]  # the proxy a pod's gRPC channel stays on
    front: list[dict[str, Any]] = []
    attempts: list[Attempt] = []
    for i, t0 in enumerate(arrivals):
        rt, path, pod = runtimes[pods[i]], paths[pods[i]], pods[i]
        root_s = rt.stalls.settle(t0 + lognormal_ms(rng, 0.08, 0.3))
        parse_e = rt.work(root_s + lognormal_ms(rng, 0.02, 0.3), lognormal_ms(rng, 0.35, 0.25), True)
        fc_s = parse_e + lognormal_ms(rng, 0.04, 0.3)
        f = feast.serve(rng, fc_s + path.transfer(rng, 1.5), rng.randrange(s["feast_pods"]), users[i],
                        PAIRS, expired_from, 0.003)
        fc_e = rt.work(f.server[1] + path.transfer(rng, 5.0), lognormal_ms(rng, 0.1, 0.3), True)
        send = fc_e + lognormal_ms(rng, 0.05, 0.3)
        proxy = proxy_of[pod] if style.transport == "grpc" else rng.randrange(s["nodes"])
        front.append({"root_s": root_s, "parse": (root_s, parse_e), "feast_client": (fc_s, fc_e), "feast": f})
        attempts.append(Attempt(i, 0, send, send + 250.0 * MS, proxy, response_kb(top_k[i]), PAIRS))
    if "router-saturation" in parts:
        rate = 560.0 * s["nodes"] / 4.0
        for t in poisson_arrivals(rng, rate, int(rate * 0.3 * run_s)):
            proxy = rng.randrange(s["nodes"])
            attempts.append(Attempt(-1, 0, 0.3 * run_ns + t, float("inf"), proxy, 6.0, 1000))

    replicas = []
    for j in range(s["nodes"]):
        hangs = (_freezes(rng, horizon, (0.8, 2.0), (300.0, 1000.0))
                 if "flaky-replica-retries" in parts and j == FLAKY_REPLICA else [])
        replicas.append(Replica(j, 0.0, Stalls(hangs), cold=False))
    cfg = ServeConfig(wait_s=0.1 if "batch-wait-timeout" in parts else 0.005,
                      max_replicas=s["nodes"] + (2 if "autoscale-cold" in parts else 0))

    def one_way(a: Attempt) -> float:
        return paths[pods[a.request]].transfer(rng, 8.0) if a.request >= 0 else lognormal_ms(rng, 0.2, 0.3)

    def back(a: Attempt) -> float:
        return paths[pods[a.request]].transfer(rng, a.kb) if a.request >= 0 else lognormal_ms(rng, 0.3, 0.3)

    def resend(a: Attempt, t: float) -> float:
        return runtimes[pods[a.request]].stalls.settle(t)

    serve = Serve(rng, cfg, replicas, one_way, back, resend, cfg.max_replicas > s["nodes"], s["nodes"])
    done = serve.run(attempts, horizon)
    nodes = [r.node for r in serve.replicas]
    tries: dict[int, list[Attempt]] = {}
    for a in done:
        if a.request < 0:
            sp.write_ranker(table, res, table.new_trace(), None, a, nodes, cfg.max_batch, cfg.wait_s)
        else:
            tries.setdefault(a.request, []).append(a)

    # the gateway after its last try: decode, encode, write the answer
    for i in range(len(arrivals)):
        rt, path, pod = runtimes[pods[i]], paths[pods[i]], pods[i]
        mine = sorted(tries[i], key=lambda a: a.number)
        last = mine[-1]
        ok = last.status == "OK"
        kb = response_kb(top_k[i]) if ok else response_kb(24)  # degraded: Feast's popularity order
        d_s = rt.stalls.settle(last.end + lognormal_ms(rng, 0.03, 0.3))
        d_e = rt.work(d_s, (0.25 + 0.03 * kb) * MS * rng.lognormvariate(0.0, 0.15), True) if ok else d_s
        e_s = d_e + lognormal_ms(rng, 0.02, 0.3)
        e_e = rt.work(e_s, (0.2 + 0.02 * kb) * MS * rng.lognormvariate(0.0, 0.15), True)
        root_e = rt.stalls.run(e_e, (0.05 + kb / 1200.0) * MS)
        fr = front[i]
        sp.write_request(table, res, sp.Timeline(
            pod, (fr["root_s"], root_e), fr["parse"], fr["feast_client"], fr["feast"], mine, (d_s, d_e),
            (e_s, e_e), top_k[i], kb, not ok), nodes, cfg.max_batch, cfg.wait_s)
    return table
