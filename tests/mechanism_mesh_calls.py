"""A scorer (features, rerank and a policy call of its own) calling a model server in a service mesh:
the scorer's CLIENT span, its sidecar's outbound CLIENT span, the replica's sidecar's inbound SERVER
span (named alike, as Istio names both), the model server's SERVER span; for the test of replicas
that join mid-run (test_diagnosis_mesh_cold_peers.py). With `joins="cold"` a third
replica joins 40 % of the way in and answers its first calls slowly (model loaded, kernels compiled:
30x at first, settling over ~15 calls); with `joins="warm"` it joins warm, while for 2 s after it
joins every replica answers 8x slower (a slow stretch of the callee as a whole, not a cold one)."""

from __future__ import annotations

import numpy as np

from tests.mechanism_frames import TraceBuilder, lognormal


def mesh_scorer(seed: int, joins: str = "cold", n: int = 5000, rps: float = 120.0):
    b = TraceBuilder(seed)
    joined_at = 0.4 * n / rps * 1000.0
    served: dict[str, int] = {}
    for t in b.arrivals(n, rps):
        b.new_trace()
        live = ["ranker/0", "ranker/1"] + (["ranker/2"] if t >= joined_at else [])
        replica = live[int(b.rng.integers(len(live)))]
        k = served.get(replica, 0)
        served[replica] = k + 1
        pod = f"score/{int(b.rng.integers(3))}"
        slow = 1.0
        if joins == "cold" and replica == "ranker/2":
            slow = 1.0 + 29.0 * float(np.exp(-k / 5.0))
        if joins == "warm" and joined_at <= t < joined_at + 2000.0:
            slow = 8.0
        work = lognormal(b.rng, 6.0, 0.2) * slow
        root = b.span(None, "POST /score", "Server", pod, t, 0.0)
        b.span(root, "load_features", "Internal", pod, t + 0.1, lognormal(b.rng, 2.0, 0.2))
        cur = t + 2.5
        call = b.span(root, "ModelInfer", "Client", pod, cur, work + 1.6)
        out = b.span(call, "ranker:8001/*", "Client", pod, cur + 0.2, work + 1.2, service="score-sidecar")
        side = "ranker-sidecar"
        inbound = b.span(out, "ranker:8001/*", "Server", replica, cur + 0.5, work + 0.6, service=side)
        server = b.span(inbound, "InferRequest", "Server", replica, cur + 0.6, work + 0.4)
        b.span(server, "compute", "Internal", replica, cur + 0.7, work)
        cur += work + 1.8
        rerank = lognormal(b.rng, 8.0, 0.2)  # the scorer's own work and its other callee
        b.span(root, "rerank", "Internal", pod, cur, rerank)
        cur += rerank + 0.1
        policy = lognormal(b.rng, 5.0, 0.2)
        post = b.span(root, "POST", "Client", pod, cur, policy + 0.8)
        b.span(post, "POST /v1/policy", "Server", f"policy/{int(b.rng.integers(2))}", cur + 0.4, policy)
        b.set_end(root, cur + policy + 1.0)
    return b.frame()


def queued_model(seed: int, bursts: bool = True, n: int = 5000):
    """A scorer calls an untraced model server (two single-worker replicas, 8 ms a call) through its
    sidecar, whose outbound span a stage rule reads as the model's forward. With `bursts`, arrivals
    come at 60 rps with a 4x burst for a second every 6 s: calls wait in the replicas' queues during
    the bursts (the wait inside the call and its sidecar span); without, 60 rps steady, and the
    model's own time has a heavy tail (one call in ten takes 5-10x longer)."""
    b = TraceBuilder(seed)
    t, times = 0.0, []
    while len(times) < n:
        rate = 240.0 if bursts and (t % 6000.0) < 1000.0 else 60.0
        t += float(b.rng.exponential(1000.0 / rate))
        times.append(t)
    free = {"model/0": 0.0, "model/1": 0.0}
    for t in times:
        b.new_trace()
        pod = f"score/{int(b.rng.integers(2))}"
        replica = "model/0" if free["model/0"] <= free["model/1"] else "model/1"
        work = lognormal(b.rng, 8.0, 0.1)
        if not bursts and b.rng.random() < 0.1:
            work *= b.rng.uniform(5.0, 10.0)
        cur = t + 1.0
        done = max(cur + 0.5, free[replica]) + work
        free[replica] = done
        root = b.span(None, "POST /score", "Server", pod, t, 0.0)
        b.span(root, "load_features", "Internal", pod, t + 0.1, 0.8)
        call = b.span(root, "ModelInfer", "Client", pod, cur, done - cur + 0.6)
        b.span(call, "model:8001/*", "Client", pod, cur + 0.2, done - cur + 0.2, service="score-sidecar")
        end = done + 0.7
        rerank = lognormal(b.rng, 3.0, 0.2)
        b.span(root, "rerank", "Internal", pod, end, rerank)
        b.set_end(root, end + rerank + 0.2)
    b.stages["model:8001/*"] = "model_forward"
    return b.frame()
