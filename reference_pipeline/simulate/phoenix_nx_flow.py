"""The request path of the blind family `phoenix-nx`, run stage by stage over all requests (see
phoenix_nx.py for the shape, the mechanisms and the truth; phoenix_nx_beam.py for the physics of each
shared thing). Each stage's arrivals are the previous stage's ends, so each shared resource (the global
rate limiter, a node's flag server, Ecto pool and Nx.Serving, the feature service) sees its callers in
the order they really reach it."""

from __future__ import annotations

import random
from typing import Any

from reference_pipeline.simulate.phoenix_nx_beam import (
    EctoPool,
    Request,
    ServingConfig,
    arrivals,
    genserver,
    price_attempts,
    run_pool,
    run_serving,
    zipf_sampler,
)
from reference_pipeline.simulate.trace_table import NS_PER_MS, NS_PER_S, Stalls, lognormal_ms, random_pauses

CACHE_TTL_S = 600.0
WARMED_SHARE = 0.6  # the share of users whose features the nightly warm job put at once (same expiry)
ROWS_MEAN = 88.0  # the mean candidate count of a steady request (log-normal, median 80, sigma 0.45)


def _serving_capacity_rps(s: dict[str, Any]) -> float:
    """Requests per second one node's serving runs in full batches."""
    rows_per_s = s["partitions"] * s["batch_size"] / (s["exec_ms"] / 1000.0)
    return rows_per_s / ROWS_MEAN


def plan(s: dict[str, Any], parts: set[str], requests: int) -> dict[str, Any]:
    """Where and when the planted events happen, from the run's nominal length."""
    nominal = requests / s["rps"]
    per_pod = s["rps"] / s["pods"]
    bursts: tuple[tuple[float, float, float], ...] = ()
    if "serving-burst" in parts:  # a push notification: 1.3x what one node's serving can run
        bursts = ((0.42 * nominal, 0.08 * nominal, 1.3 * _serving_capacity_rps(s) / per_pod),)
    return {"nominal_s": nominal, "bursts": bursts, "deploy_s": 0.35 * nominal if "cold-node-deploy" in parts
            else None, "expiry_s": 0.3 * nominal, "oban_s": 0.2 * nominal}


def _users_and_items(rng: random.Random, n: int, grown: bool) -> tuple[list[int], list[int]]:
    draw = zipf_sampler(50_000, 1.0)
    users = [draw(rng) for _ in range(n)]
    if grown:  # the candidate query's LIMIT went from 200 to 2,000 and the response lists them all
        items = [min(2000, max(20, int(180 * rng.lognormvariate(0.0, 0.65)))) for _ in range(n)]
    else:
        items = [min(200, max(10, int(80 * rng.lognormvariate(0.0, 0.45)))) for _ in range(n)]
    return users, items


def simulate(scenario: str, requests: int, s: dict[str, Any],
             rng: random.Random) -> tuple[list[Request], dict[str, Any]]:
    """Every request's stage times, and the run's facts (pods alive, the new pod, when things happened)."""
    parts = set(scenario.split("+"))
    p = plan(s, parts, requests)
    ts = arrivals(rng, s["rps"], requests, p["nominal_s"], p["bursts"])
    horizon = ts[-1] + 10 * NS_PER_S
    users, items = _users_and_items(rng, requests, "candidate-growth" in parts)
    n_pods = s["pods"]
    deploy = p["deploy_s"] * NS_PER_S if p["deploy_s"] is not None else None
    reqs = []
    for t0, user, k in zip(ts, users, items, strict=True):
        pod = rng.randrange(n_pods)
        if deploy is not None and t0 >= deploy and pod == n_pods - 1:
            pod = n_pods  # the replaced pod's traffic goes to its successor
        reqs.append(Request(t0=t0, pod=pod, user=user, items=k))
    pods = n_pods + (1 if deploy is not None else 0)
    # plugs, then the global rate limiter on node 0 (other nodes' calls cross distributed Erlang)
    hot = "hot-rate-limiter" in parts
    rl_calls, hops = [], []
    for i, r in enumerate(reqs):
        r.root_s = r.t0 + lognormal_ms(rng, 0.12, 0.3)
        call = r.root_s + lognormal_ms(rng, 0.35, 0.3)  # Plug.Parsers, the auth plug's JWT check
        hop = lognormal_ms(rng, 0.28, 0.3) if r.pod != 0 else lognormal_ms(rng, 0.004, 0.3)
        hops.append((call, hop))
        rl_calls.append((call + hop, i))
    # hot: each call now re-sorts every tenant's bucket
    svc_ms = s["limiter_busy"] * 1000.0 / s["rps"] if hot else 0.05
    served = genserver(rl_calls, lambda _i: lognormal_ms(rng, svc_ms, 0.25 if hot else 0.3))
    for i, r in enumerate(reqs):
        call, hop = hops[i]
        r.rl = (call, served[i][1] + hop * rng.lognormvariate(0.0, 0.2))
    # each node's RecsApi.FeatureFlags: its own heap, its own collections
    big_heap = "flag-server-gc" in parts
    flag_calls: list[list[tuple[float, int]]] = [[] for _ in range(pods)]
    for i, r in enumerate(reqs):
        flag_calls[r.pod].append((r.rl[1] + lognormal_ms(rng, 0.02, 0.3), i))
    for pod in range(pods):
        pauses = random_pauses(rng, horizon, (1.0, 3.0), (0.2, 1.5))
        if big_heap:  # a 1.5 GB state: each major collection copies it
            pauses = random_pauses(rng, horizon, (1.2, 3.0), (250.0, 600.0))
        served = genserver(flag_calls[pod], lambda _i: lognormal_ms(rng, 0.03, 0.3), Stalls(pauses))
        for arrive, i in flag_calls[pod]:
            reqs[i].flags = (arrive - 0.01 * NS_PER_MS, served[i][1] + lognormal_ms(rng, 0.01, 0.3))
    _ecto(reqs, s, parts, p, pods, horizon, rng)
    _features(reqs, s, parts, p, pods, deploy, rng)
    _serving(reqs, s, pods, deploy, rng)
    slow_pricing = "pricing-timeout-retry" in parts
    for r in reqs:
        if r.dropped:
            r.root_e = r.ecto[1] + lognormal_ms(rng, 0.4, 0.3)  # the controller crashed: a 500
            continue
        r.pricing = price_attempts(rng, r.nx[1] + lognormal_ms(rng, 0.1, 0.3), r.items, s["price_timeout_ms"],
                                   2, slow_pricing)
        json_s = r.pricing[-1][3] + lognormal_ms(rng, 0.06, 0.3)
        encode = (0.3 + 0.08 * r.items) * NS_PER_MS * rng.lognormvariate(0.0, 0.12)
        r.json = (json_s, json_s + encode)
        r.root_e = r.json[1] + lognormal_ms(rng, 0.12, 0.3)
    return reqs, {"pods": pods, "deploy": deploy, "plan": p}


def _ecto(reqs: list[Request], s: dict[str, Any], parts: set[str], p: dict[str, Any], pods: int,
          horizon: float, rng: random.Random) -> None:
    """The candidates query on each node's pool, beside the node's Oban job slots."""
    queries: list[list[tuple[float, int, float]]] = [[] for _ in range(pods)]
    for i, r in enumerate(reqs):
        ask = r.flags[1] + lognormal_ms(rng, 0.06, 0.3)  # Task.async
        r.ecto_query = (5.5 + 0.012 * r.items) * NS_PER_MS * rng.lognormvariate(0.0, 0.3)
        if rng.random() < 0.004:  # an autovacuum or a cold page now and then
            r.ecto_query *= rng.uniform(3.0, 8.0)
        r.ecto_decode = 0.008 * r.items * NS_PER_MS * rng.lognormvariate(0.0, 0.2)
        queries[r.pod].append((ask, i, r.ecto_query + lognormal_ms(rng, 0.05, 0.3)))
    for pod in range(pods):
        holders = [(rng.uniform(0, 0.8) * NS_PER_S, 60.0, 0.5, 800.0) for _ in range(2)]
        if "ecto-pool-exhaustion" in parts:  # the embeddings queue's concurrency was set to the pool size
            start = p["oban_s"] * NS_PER_S
            holders += [(start + rng.uniform(0, 0.3) * NS_PER_S, 900.0, 0.5, 120.0)
                        for _ in range(s["pool_size"])]
        got = run_pool(EctoPool(s["pool_size"]), queries[pod], holders, rng, horizon)
        for ask, i, _hold in queries[pod]:
            r = reqs[i]
            conn, r.dropped = got[i]
            r.ecto_queue = conn - ask
            r.ecto_idle = 0.0 if r.ecto_queue > 0 else rng.uniform(0.2, 400.0) * NS_PER_MS
            end = conn + lognormal_ms(rng, 0.02, 0.3) if r.dropped else conn + r.ecto_query + r.ecto_decode
            r.ecto = (ask, end)


def _features(reqs: list[Request], s: dict[str, Any], parts: set[str], p: dict[str, Any], pods: int,
              deploy: float | None, rng: random.Random) -> None:
    """Cachex per node; a miss calls the feature service (one pool of sync workers) over Finch."""
    expiry_wave = p["expiry_s"] * NS_PER_S if "cachex-ttl-stampede" in parts else None
    cached: list[dict[int, float]] = [{} for _ in range(pods)]  # user -> when the entry stops (refills)
    workers = [0.0] * s["feature_workers"]
    order = sorted(range(len(reqs)), key=lambda i: reqs[i].flags[1])
    for i in order:
        r = reqs[i]
        look = r.flags[1] + lognormal_ms(rng, 0.07, 0.3)
        filled = cached[r.pod].get(r.user)
        if filled is not None:
            fresh_from, until = filled, filled + CACHE_TTL_S * NS_PER_S
            hit = fresh_from <= look < until
        elif r.pod == s["pods"] and deploy is not None:
            hit = False  # the new node's cache starts empty
        elif expiry_wave is not None and r.user % 10 < WARMED_SHARE * 10:
            # warmed together by a job that put them all in 0.5 s: they expire within 0.5 s of each other
            hit = look < expiry_wave + (r.user * 2_654_435_761 % 1000) / 1000 * 0.5 * NS_PER_S
        else:
            hit = rng.random() > 0.035  # entries evicted by the size limit, or staggered expiries
        lookup = lognormal_ms(rng, 0.015, 0.3)
        if hit:
            r.feat = (look, look + lookup)
            continue
        c_s = look + lookup + lognormal_ms(rng, 0.03, 0.3)
        arrive = c_s + lognormal_ms(rng, 0.4, 0.3)
        w = min(range(len(workers)), key=workers.__getitem__)
        srv_s = max(arrive, workers[w]) + lognormal_ms(rng, 0.05, 0.3)
        srv_e = srv_s + lognormal_ms(rng, s["feature_ms"], 0.3)
        workers[w] = srv_e + lognormal_ms(rng, 0.05, 0.3)
        c_e = srv_e + lognormal_ms(rng, 0.4, 0.3)
        r.miss = (c_s, srv_s, srv_e, c_e)
        r.feat = (look, c_e + lognormal_ms(rng, 0.02, 0.3))  # Cachex.put with the TTL
        cached[r.pod][r.user] = r.feat[1]


def _serving(reqs: list[Request], s: dict[str, Any], pods: int, deploy: float | None,
             rng: random.Random) -> None:
    """Each node's Nx.Serving; a new node compiles the model with EXLA on its first batch."""
    per_pod: list[list[tuple[float, int, int]]] = [[] for _ in range(pods)]
    for i, r in enumerate(reqs):
        if r.dropped:
            continue
        joined = max(r.ecto[1], r.feat[1]) + lognormal_ms(rng, 0.05, 0.3)
        prep = (0.05 + 0.002 * r.items) * NS_PER_MS  # Nx.Batch.stack of the candidate tensors
        r.nx = (joined, 0.0)
        per_pod[r.pod].append((joined + prep, i, r.items))
    for pod in range(pods):
        cold = deploy is not None and pod == s["pods"]
        cfg = ServingConfig(s["batch_size"], s["batch_timeout_ms"], s["partitions"], s["exec_ms"],
                            compile_ms=s["compile_ms"] if cold else 0.0)
        done = run_serving(cfg, per_pod[pod], rng)
        for _t, i, _rows in per_pod[pod]:
            r = reqs[i]
            r.chunks = done[i]
            r.nx = (r.nx[0], max(e for _s, e, _n, _p in r.chunks) + lognormal_ms(rng, 0.08, 0.3))
