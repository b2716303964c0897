"""Blind family `throttled-embedder`: a search API calling a Go embedding service that runs under a
Kubernetes CPU limit, and a vector index.

Shape (OTLP/JSON lines): `search-api` (Go, 3 pods) serves `GET /v1/search`: a gRPC CLIENT call
`embedding.v1.Embedder/Embed` to `embedder` (Go + ONNX Runtime through cgo, 3-5 pods: `tokenize`,
`onnx.encode`, `pool_normalize`, `proto.marshal` under its SERVER span), `embeddings.decode`, an HTTP
CLIENT `POST` to `vector-index` (Qdrant; its SERVER span `POST /collections/{name}/points/search`), and
`merge_results`. Instances: `k8s.pod.name` + `service.instance.id`.

Mechanisms:

- **CFS bandwidth control**: a pod's container gets `quota` CPU-ns per 100 ms period (limit x 100 ms),
  with each pod's periods on its own phase. Its threads run in parallel (the node has cores to
  spare; `onnx.encode` runs four intra-op threads, so it burns CPU four times as fast as wall time)
  until the period's quota is spent; then every thread of the container stops until the next period
  boundary. A span that was running is stretched by the stall; one that was to start starts at the
  boundary. The model here is a fluid one: CPU progress per runnable thread, quota per period.
  `cpu-throttling`: a new ReplicaSet gave half the pods (rounded up) a limit of 1 CPU instead of 4, at
  an average demand of about half a CPU, so the quota runs out in busy periods. Throttling is not GC:
  the Go runtime's stop-the-world pauses (two of 50-400 us per cycle, a cycle every 0.5-2 s) are
  reported as `go.gc.pause` events with `go.gc.pause_ns` on the embedder's SERVER span on seeds 0, 1
  (mod 4) only, and are the only runtime pauses in the run.
- **Payload size** (`large-payload`): a quarter of the clients ask for token-level embeddings
  (`return_token_embeddings`), so the response is tokens x 768 floats (3 kB a token, up to 6 MB):
  `proto.marshal` (~800 MB/s), the transfer in the CLIENT span (~45 MB/s: HTTP/2 flow-control
  windows) and the search API's `embeddings.decode` (~400 MB/s) grow with `rpc.response.size`.
  The model's work does not change.
- **A slow index** (`slow-index`): segment optimisation at the vector index makes 8 % of searches
  wait (+ Pareto 30 ms, alpha 1.2).

Truth: cpu_throttling on the throttled embedder pods (stage model_forward, where most CPU runs);
large_payload on the embed call (stage downstream); slow_dependency at vector-index.
"""

from __future__ import annotations

import heapq
import math
import random
from typing import Any

from reference_pipeline.simulate.trace_table import (
    NS_PER_MS,
    NS_PER_S,
    Cause,
    TraceTable,
    lognormal_ms,
    poisson_arrivals,
)

FAMILY = "throttled-embedder"
API, EMBEDDER, INDEX = "search-api", "embedder", "vector-index"
EMBED_RPC = "embedding.v1.Embedder/Embed"
PERIOD = 100 * NS_PER_MS
SCENARIOS = ("healthy", "cpu-throttling", "large-payload", "slow-index", "cpu-throttling+slow-index")
EMBEDDERS = (3, 4, 5)
RPS = (90.0, 120.0, 150.0)
SEGMENTS = ("tokenize", "onnx.encode", "pool_normalize", "proto.marshal")


def setup(seed: int) -> dict[str, Any]:
    return {
        "embedders": EMBEDDERS[seed % 3],
        "rps": RPS[seed % 3],
        "gc_events": seed % 4 < 2,
        "fmt": "otlp-json",
    }


def _pods(n: int) -> tuple[str, ...]:
    return tuple(f"embedder-{'84c6b' if k < math.ceil(n / 2) else '5f7a2'}-{k}" for k in range(n))


def truth(scenario: str, seed: int) -> tuple[Cause, ...]:
    pods = _pods(setup(seed)["embedders"])
    throttled = pods[: math.ceil(len(pods) / 2)]
    table = {
        "healthy": (),
        "cpu-throttling": (Cause("cpu_throttling", "model_forward", EMBED_RPC, EMBEDDER, throttled),),
        "large-payload": (Cause("large_payload", "downstream", EMBED_RPC, EMBEDDER, pods),),
        "slow-index": (
            Cause("slow_dependency", "downstream", "POST", INDEX, ("vector-index-0", "vector-index-1")),
        ),
    }
    table["cpu-throttling+slow-index"] = table["cpu-throttling"] + table["slow-index"]
    if scenario not in table:
        raise ValueError(f"unknown {FAMILY} scenario {scenario!r}; one of {', '.join(table)}")
    return table[scenario]


def run_pod(
    jobs: list[tuple[float, list[tuple[float, int]]]],
    quota: float,
    phase: float,
    pauses: list[tuple[float, float]],
) -> list[list[tuple[float, float]]]:
    """CPU of one container: `jobs` are (ready ns, [(cpu ns, threads), ...] run one after another);
    returns each job's segments' (start, end) wall times. Threads progress in parallel while the
    period's quota lasts and no stop-the-world pause holds the process; a segment's start is when it
    first ran."""
    ready = [(t, j, 0) for j, (t, _) in enumerate(jobs)]
    heapq.heapify(ready)
    out: list[list[tuple[float, float]]] = [[] for _ in jobs]
    active: dict[tuple[int, int], list] = {}  # (job, segment) -> [cpu left, threads, first run]
    t = ready[0][0] if ready else 0.0
    boundary = phase + PERIOD * math.floor((t - phase) / PERIOD + 1)
    left = quota
    k = 0  # next pause
    while ready or active:
        while ready and ready[0][0] <= t:
            _, j, seg = heapq.heappop(ready)
            cpu, threads = jobs[j][1][seg]
            active[j, seg] = [cpu, threads, None]
        while k < len(pauses) and pauses[k][1] <= t:
            k += 1
        paused = k < len(pauses) and pauses[k][0] <= t
        stalled = paused or left <= 1.0  # ns: below it, the quota is spent
        events = [boundary]
        if ready:
            events.append(ready[0][0])
        if k < len(pauses):
            events.append(pauses[k][1] if paused else pauses[k][0])
        rate = sum(a[1] for a in active.values())
        if active and not stalled:
            for a in active.values():
                if a[2] is None:
                    a[2] = t
            events.append(t + min(a[0] / a[1] for a in active.values()))
            events.append(t + left / rate)
        t_next = max(min(events), t)
        if active and not stalled:
            dt = t_next - t
            for a in active.values():
                a[0] -= a[1] * dt
            left -= rate * dt
        t = t_next
        if t >= boundary:
            left = quota
            boundary += PERIOD
        for key in [key for key, a in active.items() if a[0] <= 1.0]:
            j, seg = key
            out[j].append((active.pop(key)[2], t))
            if seg + 1 < len(jobs[j][1]):
                heapq.heappush(ready, (t, j, seg + 1))
    return out


def generate(scenario: str, requests: int, seed: int, **opts: Any) -> TraceTable:
    truth(scenario, seed)
    s = {**setup(seed), **opts}
    parts = set(scenario.split("+"))
    rng = random.Random(seed * 1_000_039 + 53)
    table = TraceTable(seed, 0xE3BD)
    arrivals = poisson_arrivals(rng, s["rps"], requests)
    pods = _pods(s["embedders"])
    limits = [
        1.0 if "cpu-throttling" in parts and k < math.ceil(len(pods) / 2) else 4.0 for k in range(len(pods))
    ]
    reqs = []
    for t0 in arrivals:
        tokens = min(2048, max(4, int(120 * rng.lognormvariate(0, 0.8))))
        token_level = "large-payload" in parts and rng.random() < 0.25
        size = (tokens * 3072 if token_level else 3072) + rng.randint(20, 60)
        call_s = t0 + lognormal_ms(rng, 0.25, 0.3)
        arrive = call_s + lognormal_ms(rng, 0.3, 0.3)
        encode = 16.0 * NS_PER_MS * (tokens / 120) ** 0.9 * rng.lognormvariate(0, 0.1)
        segments = [
            (lognormal_ms(rng, 0.25, 0.3) + tokens * 1500.0, 1),
            (encode, 4),
            (lognormal_ms(rng, 0.35, 0.3), 1),
            (size / 800e6 * NS_PER_S + 20_000.0, 1),
        ]
        reqs.append(
            {
                "t0": t0,
                "call_s": call_s,
                "arrive": arrive,
                "tokens": tokens,
                "size": size,
                "token_level": token_level,
                "pod": rng.randrange(len(pods)),
                "segments": segments,
            }
        )
    horizon = arrivals[-1] + 5 * NS_PER_S
    gc = []
    for _ in pods:
        pauses, t = [], rng.uniform(0.2, 2.0) * NS_PER_S
        while t < horizon:
            for _ in range(2):  # sweep termination, then mark termination
                length = rng.uniform(0.05, 0.4) * NS_PER_MS
                pauses.append((t, t + length))
                t += length + rng.uniform(2.0, 20.0) * NS_PER_MS
            t += rng.uniform(0.5, 2.0) * NS_PER_S
        gc.append(pauses)
    for k in range(len(pods)):
        mine = [r for r in reqs if r["pod"] == k]
        done = run_pod(
            [(r["arrive"], r["segments"]) for r in mine], limits[k] * PERIOD, rng.uniform(0, PERIOD), gc[k]
        )
        for r, spans in zip(mine, done, strict=True):
            r["spans"] = spans
    api = [
        table.resource(
            {
                "service.name": API,
                "service.instance.id": f"{rng.getrandbits(128):032x}",
                "k8s.pod.name": f"search-api-{k}",
                "k8s.namespace.name": "search",
                "telemetry.sdk.language": "go",
            },
            f"10.50.0.{10 + k}",
            8080,
        )
        for k in range(3)
    ]
    emb = [
        table.resource(
            {
                "service.name": EMBEDDER,
                "service.instance.id": f"{rng.getrandbits(128):032x}",
                "k8s.pod.name": pod,
                "k8s.namespace.name": "search",
                "k8s.container.name": "embedder",
                "telemetry.sdk.language": "go",
            },
            f"10.50.1.{10 + k}",
            9090,
        )
        for k, pod in enumerate(pods)
    ]
    index = [
        table.resource(
            {
                "service.name": INDEX,
                "service.instance.id": f"{rng.getrandbits(128):032x}",
                "k8s.pod.name": f"vector-index-{k}",
                "telemetry.sdk.language": "rust",
            },
            f"10.50.2.{10 + k}",
            6333,
        )
        for k in range(2)
    ]
    rpc = {"rpc.system": "grpc", "rpc.service": "embedding.v1.Embedder", "rpc.method": "Embed"}
    for r in reqs:
        trace = table.new_trace()
        k, spans = r["pod"], r["spans"]
        srv_s, srv_e = spans[0][0], spans[-1][1] + 15_000.0
        transfer = r["size"] / 45e6 * NS_PER_S
        call_e = srv_e + lognormal_ms(rng, 0.3, 0.3) + transfer
        dec_s = call_e + lognormal_ms(rng, 0.02, 0.4)
        dec_e = dec_s + r["size"] / 400e6 * NS_PER_S + lognormal_ms(rng, 0.03, 0.3)
        idx_c = dec_e + lognormal_ms(rng, 0.03, 0.4)
        idx_s = idx_c + lognormal_ms(rng, 0.3, 0.3)
        own = lognormal_ms(rng, 4.0, 0.35)
        if "slow-index" in parts and rng.random() < 0.08:
            own += 30.0 * NS_PER_MS * rng.paretovariate(1.2)
        idx_e = idx_s + own
        idx_ce = idx_e + lognormal_ms(rng, 0.3, 0.3)
        merge_e = idx_ce + lognormal_ms(rng, 0.4, 0.3)
        root_e = merge_e + lognormal_ms(rng, 0.1, 0.3)
        a = rng.randrange(len(api))
        root = table.span(
            trace,
            None,
            "GET /v1/search",
            "Server",
            api[a],
            "go.opentelemetry.io/otelhttp",
            r["t0"],
            root_e,
            {"http.request.method": "GET", "http.route": "/v1/search", "http.response.status_code": 200},
        )
        call = table.span(
            trace,
            root,
            EMBED_RPC,
            "Client",
            api[a],
            "go.opentelemetry.io/otelgrpc",
            r["call_s"],
            call_e,
            {**rpc, "rpc.grpc.status_code": 0, "server.address": EMBEDDER, "rpc.response.size": r["size"]},
            peer=EMBEDDER,
        )
        events = []
        if s["gc_events"]:
            events = [
                (b, "go.gc.pause", {"go.gc.pause_ns": int(b - a_)})
                for a_, b in gc[k]
                if a_ < srv_e and b > srv_s
            ]
        server = table.span(
            trace,
            call,
            EMBED_RPC,
            "Server",
            emb[k],
            "go.opentelemetry.io/otelgrpc",
            srv_s,
            srv_e,
            {
                **rpc,
                "rpc.grpc.status_code": 0,
                "rpc.response.size": r["size"],
                "embedder.tokens": r["tokens"],
                "embedder.token_level": r["token_level"],
            },
            events=events,
        )
        for name, (a_, b) in zip(SEGMENTS, spans, strict=True):
            table.span(trace, server, name, "Internal", emb[k], "embedder", a_, b)
        table.span(trace, root, "embeddings.decode", "Internal", api[a], "search-api", dec_s, dec_e)
        search = table.span(
            trace,
            root,
            "POST",
            "Client",
            api[a],
            "go.opentelemetry.io/otelhttp",
            idx_c,
            idx_ce,
            {
                "http.request.method": "POST",
                "server.address": INDEX,
                "server.port": 6333,
                "url.full": "http://vector-index:6333/collections/docs/points/search",
                "http.response.status_code": 200,
            },
            peer=INDEX,
        )
        table.span(
            trace,
            search,
            "POST /collections/{name}/points/search",
            "Server",
            index[rng.randrange(2)],
            "qdrant",
            idx_s,
            idx_e,
            {
                "http.request.method": "POST",
                "http.response.status_code": 200,
                "http.route": "/collections/{name}/points/search",
            },
        )
        table.span(trace, root, "merge_results", "Internal", api[a], "search-api", idx_ce, merge_e)
    return table
