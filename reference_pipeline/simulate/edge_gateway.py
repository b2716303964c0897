"""Blind family `edge-gateway`: a JVM API gateway that only forwards, in front of a gRPC ranking server.

Shape: `edge-gateway` (Spring Cloud Gateway on Netty, Java, 3-6 pods; traced by Brave, so the run is a
Zipkin v2 array on even seeds and OTLP/JSON lines on odd ones, with Brave's tag names: `http.method`,
`http.path`, `http.status_code`, `grpc.status_code`) receives `post /v1/rank`, runs its filter chain
(`auth-filter`) and forwards one gRPC call `ranker.v1.RankingService/Rank` to `ranker-serving`
(a TorchScript cross-encoder on CPU, 2-4 pods, six handler threads each), whose SERVER span holds
`decode_request`, `embedding_lookup`, `torchscript.forward` and `encode_response`. Instances are
pods: in Zipkin an ipv4:port endpoint, in OTLP `k8s.pod.name` + `service.instance.id`.

Mechanisms, as the runtime and the network produce them:

- **Stop-the-world pauses on the gateway** (G1): a paused JVM runs no thread, so every gateway span in
  flight is stretched: a request that arrived during a pause is read after it (its SERVER span starts
  late), a backend reply that came back during a pause is read after it (the CLIENT span and the
  SERVER span end late). The ranking server is unaffected. Healthy runs have young pauses of a few ms;
  `gateway-gc` has old-generation pauses of 80-300 ms every 0.7-2.5 s per pod. GC is reported as span
  events (`jvm.gc` with `jvm.gc.name`, `jvm.gc.action`, `jvm.gc.duration_ms`; Zipkin: annotations) on
  seeds 0, 1 (mod 4) only.
- **Waiting for a handler thread**: the gRPC server's executor has six threads per pod; a call that
  finds them busy waits in the executor's queue, and its SERVER span starts only when a thread takes
  it. The gap between the gateway's CLIENT span start and the server's SERVER span start is network
  (~0.3 ms) plus that wait, which grows with the arrival rate (`worker-queue`: bursts at 1.5-1.7x
  capacity).
- **Autoscaling during a burst** (`autoscale-burst`): a long burst queues at the handler threads; the
  autoscaler adds two pods about a third of the way into it, and the gateway's round-robin sends them
  their share at once. Their first requests are slow: TorchScript's profiling executor optimises the
  graph on the first calls (hundreds of ms, decaying), and the memory-mapped embedding table faults its
  pages in (`embedding_lookup` slow, decaying). Two causes: queueing (the old pods) and cold_start
  (the new ones).

Truth: gc_pause lives at the gateway (stage ingress), queueing in the server's queue (stage queue),
cold_start on the added pods (stage model_forward).
"""

from __future__ import annotations

import random
from typing import Any

from reference_pipeline.simulate.trace_table import (
    NS_PER_MS,
    NS_PER_S,
    Cause,
    Stalls,
    TraceTable,
    WorkerPool,
    lognormal_ms,
    poisson_arrivals,
    random_pauses,
)

FAMILY = "edge-gateway"
GATEWAY, RANKER = "edge-gateway", "ranker-serving"
RANK_RPC = "ranker.v1.RankingService/Rank"
ROOT = "post /v1/rank"
THREADS = 6  # handler threads per ranker pod (one core each)
SERVICE_MS = 80.0  # a ranker call's median work
LOADS = (0.4, 0.5, 0.6)
GATEWAYS = (3, 4, 6)
RANKERS = (3, 2, 4)


def _gw_pods(n: int) -> tuple[str, ...]:
    return tuple(f"edge-gateway-7f9c4-{k:02d}" for k in range(n))


def _gw_ip(k: int) -> str:
    return f"10.12.{k // 250}.{10 + k % 250}"


def _ranker_ip(k: int) -> str:
    return f"10.14.0.{20 + k}"


def truth(scenario: str, seed: int) -> tuple[Cause, ...]:
    """The planted causes; instances are pod names (OTLP: k8s.pod.name) or endpoint addresses (Zipkin:
    the localEndpoint's ipv4, which is all a Zipkin span says of its instance)."""
    s = setup(seed)
    zipkin = s["fmt"] == "zipkin"

    def rankers(ks: range) -> tuple[str, ...]:
        return tuple(_ranker_ip(k) if zipkin else f"ranker-serving-{k}" for k in ks)

    gateways = tuple(_gw_ip(k) for k in range(s["gateways"])) if zipkin else _gw_pods(s["gateways"])
    # a pause holds the requests that reach a pod during it and releases them together: a burst at the
    # ranker, whose handler threads may queue it (queueing comes with the pauses; reporting it is no
    # false alarm)
    gc = Cause("gc_pause", "ingress", ROOT, GATEWAY, gateways, side=("queueing",))
    queue = Cause("queueing", "queue", RANK_RPC, RANKER, rankers(range(s["rankers"])))
    cold = Cause("cold_start", "model_forward", "torchscript.forward", RANKER,
                 rankers(range(s["rankers"], s["rankers"] + 2)))
    table = {"healthy": (), "gateway-gc": (gc,), "worker-queue": (queue,),
             "autoscale-burst": (queue, cold), "gateway-gc+worker-queue": (gc, queue)}
    if scenario not in table:
        raise ValueError(f"unknown {FAMILY} scenario {scenario!r}; one of {', '.join(table)}")
    return table[scenario]


SCENARIOS = ("healthy", "gateway-gc", "worker-queue", "autoscale-burst", "gateway-gc+worker-queue")


def setup(seed: int) -> dict[str, Any]:
    return {"load": LOADS[seed % 3], "gateways": GATEWAYS[seed % 3], "rankers": RANKERS[seed % 3],
            "gc_events": seed % 4 < 2, "fmt": "zipkin" if seed % 2 == 0 else "otlp-json"}


def _resource(table: TraceTable, rng: random.Random, service: str, pod: str, ip: str, port: int,
              language: str) -> int:
    attrs = {"service.name": service, "service.instance.id": f"{rng.getrandbits(64):016x}",
             "k8s.pod.name": pod, "k8s.namespace.name": "ranking", "host.name": f"node-{rng.randrange(40)}",
             "telemetry.sdk.language": language, "telemetry.sdk.name": "opentelemetry"}
    return table.resource(attrs, ip, port)


def generate(scenario: str, requests: int, seed: int, **opts: Any) -> TraceTable:
    truth(scenario, seed)
    s = {**setup(seed), **opts}
    parts = set(scenario.split("+"))
    rng = random.Random(seed * 1_000_003 + 17)
    table = TraceTable(seed, 0xED6E)
    n_gw, n_rank = s["gateways"], s["rankers"]
    capacity = n_rank * THREADS * 1000.0 / (SERVICE_MS * 1.08)
    rps = s["load"] * capacity
    nominal_s = requests / rps
    bursts: tuple[tuple[float, float, float], ...] = ()
    if "worker-queue" in parts:
        bursts = ((0.25 * nominal_s, 0.06 * nominal_s, 1.6 / s["load"]),
                  (0.65 * nominal_s, 0.05 * nominal_s, 1.5 / s["load"]))
    autoscale = "autoscale-burst" in parts
    if autoscale:
        bursts = ((0.3 * nominal_s, 0.12 * nominal_s, 1.4 / s["load"]),)
    arrivals = poisson_arrivals(rng, rps, requests, bursts)
    horizon = arrivals[-1] + 5 * NS_PER_S
    old_gc = "gateway-gc" in parts
    gw_pauses = [random_pauses(rng, horizon, (0.7, 2.5) if old_gc else (2.0, 6.0),
                               (80.0, 300.0) if old_gc else (2.0, 9.0)) for _ in range(n_gw)]
    gw_stalls = [Stalls(p) for p in gw_pauses]
    gw_res = [_resource(table, rng, GATEWAY, pod, _gw_ip(k), 8080, "java")
              for k, pod in enumerate(_gw_pods(n_gw))]
    pods = n_rank + (2 if autoscale else 0)
    rank_res = [_resource(table, rng, RANKER, f"ranker-serving-{k}", _ranker_ip(k), 8001, "python")
                for k in range(pods)]
    ready = [0.0] * n_rank
    if autoscale:
        scale_at = (bursts[0][0] + 0.35 * bursts[0][1]) * NS_PER_S
        ready += [scale_at, scale_at + rng.uniform(0.3, 1.5) * NS_PER_S]
    pools = [WorkerPool(THREADS) for _ in range(pods)]
    served = [0] * pods
    for t0 in arrivals:
        g = rng.randrange(n_gw)
        gs = gw_stalls[g]
        root_s = gs.settle(t0)  # Netty reads the request when the JVM runs
        auth_s = root_s + lognormal_ms(rng, 0.03, 0.4)
        auth_e = gs.run(auth_s, lognormal_ms(rng, 0.18, 0.35))
        call_s = gs.run(auth_e, lognormal_ms(rng, 0.04, 0.4))
        arrive = call_s + lognormal_ms(rng, 0.3, 0.3)
        choices = [k for k in range(pods) if ready[k] <= arrive]
        k = rng.choice(choices)
        handler = pools[k].acquire(arrive)
        cold = served[k] if k >= n_rank else 10_000
        served[k] += 1
        decode = lognormal_ms(rng, 0.6, 0.3)
        lookup = lognormal_ms(rng, 4.0, 0.4) + 60.0 * NS_PER_MS * 0.93 ** cold  # page faults, decaying
        items = rng.randint(80, 200)
        jit = (1500.0 * 0.35 ** cold + 200.0 * 0.97 ** cold) * NS_PER_MS  # graph optimisation passes
        forward = lognormal_ms(rng, 70.0 * (0.85 + items / 950.0), 0.12) + jit
        encode = lognormal_ms(rng, 1.0 + items / 300.0, 0.3)
        trace = table.new_trace()
        t = server_s = handler
        marks = []
        for work in (decode, lookup, forward, encode):
            start = t + lognormal_ms(rng, 0.02, 0.5)
            t = start + work
            marks.append((start, t))
        server_e = t + lognormal_ms(rng, 0.03, 0.4)
        pools[k].release(server_e)
        call_e = gs.settle(server_e + lognormal_ms(rng, 0.3, 0.3))  # the reply is read when the JVM runs
        root_e = gs.run(call_e, lognormal_ms(rng, 0.08, 0.4))
        events = []
        if s["gc_events"]:
            for a, b in gs.overlapping(root_s, root_e):
                if b - a > 0:
                    long = b - a > 40 * NS_PER_MS
                    events.append((b, "jvm.gc", {
                        "jvm.gc.name": "G1 Old Generation" if long else "G1 Young Generation",
                        "jvm.gc.action": "end of major GC" if long else "end of minor GC",
                        "jvm.gc.duration_ms": round((b - a) / NS_PER_MS, 3)}))
        root = table.span(trace, None, ROOT, "Server", gw_res[g], "brave.spring.webflux", root_s, root_e,
                          {"http.method": "POST", "http.path": "/v1/rank", "http.status_code": 200,
                           "http.route": "/v1/rank"}, events=events)
        table.span(trace, root, "auth-filter", "Internal", gw_res[g], "brave", auth_s, auth_e,
                   {"filter.order": -100})
        rpc = {"rpc.system": "grpc", "rpc.service": "ranker.v1.RankingService", "rpc.method": "Rank",
               "grpc.status_code": "0"}
        call = table.span(trace, root, RANK_RPC, "Client", gw_res[g], "brave.grpc", call_s, call_e,
                          {**rpc, "net.peer.name": RANKER, "net.peer.port": 8001}, peer=RANKER)
        server = table.span(trace, call, RANK_RPC, "Server", rank_res[k],
                            "opentelemetry.instrumentation.grpc", server_s, server_e,
                            {**rpc, "ranker.candidates": items})
        names = ("decode_request", "embedding_lookup", "torchscript.forward", "encode_response")
        for name, (a, b) in zip(names, marks, strict=True):
            table.span(trace, server, name, "Internal", rank_res[k], "ranker", a, b)
    return table
