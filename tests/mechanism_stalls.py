"""Stalls and long jobs on a model server, built from a mechanism for issue 25's rule tests
(test_diagnosis_stalls.py): a single worker whose job time follows its input's size, the same worker
under a CPU quota whose stalls end on 100 ms period boundaries, and a paused gateway in front of a
model whose forward pass varies a little."""

from __future__ import annotations

import numpy as np

from tests.mechanism_frames import Pauses, TraceBuilder, lognormal

PERIOD_MS = 100.0


def quota_stalls(b: TraceBuilder, instances: list[str], until_ms: float, rate: float = 0.06) -> Pauses:
    """A CPU quota's stalls: in `rate` of the 100 ms periods the quota runs out 10-60 ms before the
    period ends and the process waits for the next one (each instance has its own period phase)."""
    out = {}
    for inst in instances:
        ends = np.arange(b.rng.uniform(0, PERIOD_MS), until_ms, PERIOD_MS)
        ends = ends[b.rng.random(len(ends)) < rate]
        out[inst] = [(e - b.rng.uniform(10.0, 60.0), e) for e in ends]
    return Pauses(out)


def embedder_service(seed: int, behind_api: bool = True, throttled: bool = False):
    """An embedder (three instances, one worker each: a request waits for the previous one) encodes a
    text whose length in tokens varies 30-fold; the encode takes 0.03 ms per token, so the longest
    inputs take 20-40 ms and the requests behind them wait. With `behind_api`, a search API calls the
    embedder and then a vector index for every request; with `throttled`, the embedder runs under a
    CPU quota (quota_stalls)."""
    b = TraceBuilder(seed)
    embedders = [f"embedder/{i}" for i in range(3)]
    n, rps = 5000, 120.0
    stalls = quota_stalls(b, embedders, n / rps * 1000.0 + 5000.0) if throttled else Pauses()
    free = dict.fromkeys(embedders, 0.0)
    for t in b.arrivals(n, rps):
        b.new_trace()
        api = f"search/{int(b.rng.integers(2))}"
        emb = embedders[int(b.rng.integers(3))]
        tokens = int(np.clip(120 * np.exp(b.rng.normal(0.0, 0.8)), 8, 2000))
        if behind_api:
            root = b.span(None, "GET /v1/search", "Server", api, t, 0.0)
            call = b.span(root, "Embed", "Client", api, t + 0.1, 0.0)
            arrive = t + 0.3
        else:
            root = call = None
            arrive = t
        start = max(arrive, free[emb])
        server = b.span(call, "Embed", "Server", emb, arrive, 0.0, embedder__tokens=tokens)
        cur = start + 0.05
        for name, work in (("tokenize", 0.2 + 0.002 * tokens), ("encode", 0.5 + 0.03 * tokens)):
            end = stalls.run(emb, cur, work * lognormal(b.rng, 1.0, 0.08))
            b.span(server, name, "Internal", emb, cur, end - cur)
            cur = end + 0.02
        b.set_end(server, cur + 0.05)
        free[emb] = cur + 0.05
        if not behind_api:
            continue
        b.set_end(call, cur + 0.3)
        cur += 0.4
        work = lognormal(b.rng, 4.0, 0.3)
        index = b.span(root, "POST", "Client", api, cur, work + 0.6)
        b.span(index, "POST /points/search", "Server", f"index/{int(b.rng.integers(2))}", cur + 0.3, work)
        b.set_end(root, cur + work + 0.8)
    b.stages["encode"] = "model_forward"
    return b.frame()


def paused_aggregator(seed: int, gc_events: bool = True, rps: float = 150.0):
    """An event-loop service (two instances) whose runtime stops for 8-15 ms every 100-300 ms
    (collections, reported as GC events with their durations where `gc_events`); a request arriving
    during a pause is accepted when it ends, and what was in flight resumes then. Every request also
    calls a backend whose calls hang for 40-150 ms 8 % of the time: the backend owns the p99, the
    pauses slow many requests by less."""
    b = TraceBuilder(seed)
    insts = ["bff/0", "bff/1"]
    until = 4000 / rps * 1000.0 + 2000.0
    stalls: dict[str, list[tuple[float, float]]] = {}
    for inst in insts:
        t, out = b.rng.uniform(0, 500), []
        while t < until:
            length = b.rng.uniform(8.0, 15.0)
            out.append((t, t + length))
            t += length + b.rng.uniform(100.0, 300.0)
        stalls[inst] = out
    pauses = Pauses(stalls)
    for t in b.arrivals(4000, rps):
        b.new_trace()
        inst = insts[int(b.rng.integers(2))]
        start = pauses.run(inst, t, 0.0)
        root = b.span(None, "GET /home", "Server", inst, start, 0.0)
        cur = pauses.run(inst, start + 0.05, 0.3)
        work = lognormal(b.rng, 6.0, 0.3) + (b.rng.uniform(40.0, 150.0) if b.rng.random() < 0.08 else 0.0)
        end = pauses.run(inst, cur + work, 0.1)  # the response is read when the loop runs again
        call = b.span(root, "GET", "Client", inst, cur, end - cur)
        b.span(call, "GET /items", "Server", f"items/{int(b.rng.integers(2))}", cur + 0.2, work)
        cur = end + 0.05
        done = pauses.run(inst, cur, lognormal(b.rng, 2.0, 0.2))
        b.span(root, "render", "Internal", inst, cur, done - cur)
        b.set_end(root, done + 0.05)
    gc = [(inst, a, e) for inst, spans in stalls.items() for a, e in spans] if gc_events else None
    return b.frame(gc=gc)


def replicas_added(seed: int):
    """Three instances serve from before the trace begins; two replicas join a third and half of the
    way in and stay, their first requests slow in every stage (a model loaded lazily, caches empty:
    20x at the first request, settling over ~30)."""
    b = TraceBuilder(seed)
    n, rps = 6000, 200.0
    for t, inst, k, joined in b.joining_arrivals(n, rps):
        scale = 1.0 + 19.0 * np.exp(-k / 30.0) if joined else 1.0
        b.new_trace()
        root = b.span(None, "POST /rank", "Server", inst, t, 0.0)
        cur = t + 0.05
        for name, median in (("featurize", 1.5), ("infer", 8.0)):
            d = lognormal(b.rng, median, 0.2) * scale
            b.span(root, name, "Internal", inst, cur, d)
            cur += d + 0.02
        b.set_end(root, cur + 0.05)
    return b.frame()
