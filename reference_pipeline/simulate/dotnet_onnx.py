"""Blind family `dotnet-onnx`: a payment-fraud scoring API on .NET 8 (dotnet_onnx_runtime.py: the
runtime's physics; dotnet_onnx_deps.py: Redis, SQL Server and the risk service; dotnet_onnx_spans.py:
the conventions).

Shape: `payments-api` (3 pods, never the cause) authorizes a payment and calls `POST /v1/score` on
`fraud-api`: ASP.NET Core 8 on Kestrel, 4-6 pods behind a Service, each with a 2-core CPU limit (a
CFS quota of 200 ms per 100 ms period). Every piece of managed code runs on the process' ThreadPool
(min threads = cores = 2, grown to 6 on a pod that has run a while; while work items wait, the
starvation gate injects a thread every 0.5-1 s, every ~0.25 s while threads are blocked in `.Result`:
.NET 8's blocking compensation):
the request's start, and each continuation after an await, is a work item that queues for a thread.
Server GC stops every managed thread for its pauses (gen0/gen1 short; blocking gen2 with LOH
compaction long). Per request: features from Azure Cache for Redis through the pod's one multiplexed
connection (`GET`, replies in order on one socket; 3 % misses read SQL Server, `FraudDb`, through
SqlClient's pool of 100), tokenization of the merchant description under a SemaphoreSlim(1) (the
tokenizer is not thread-safe; `MerchantText.Tokenize` covers the wait and the work), ONNX Runtime in
process (`onnx.inference`: a GBM and a small transformer, one shared InferenceSession), the card
network's risk service over HttpClient (20 connections per pod; Polly: 300 ms attempt timeout, 2
retries with back-off + jitter, a breaker per pod that opens for 30 s at >= 50 % failures in 10 s and
then answers a default score at once), and the decision written to SQL Server (`INSERT`, awaited).

Healthy noise: jitter everywhere; gen0 pauses every ~0.8 s and gen1 every ~6 s on every pod; 3 %
Redis misses; 0.5 % slow statements; a 1 % tail at the risk service; Azure Redis' own brief stalls.

Conventions by seed (seed % 3): 0: OTLP/JSON, new semconv, instances by the SDK's generated
`service.instance.id`, the manual FeatureStore / DecisionStore spans exported, GC and thread-pool
events on the server span. 1: Jaeger JSON, old semconv (`v1/score`, `HTTP POST`, `db.statement`),
host.name + process.pid, manual spans exported, no runtime events. 2: Zipkin v2, new semconv,
endpoints (ip:port), no manual store spans (the Redis / SQL spans are children of the server span),
runtime events as annotations.

Mechanisms (scenario: truth):
- `sync-over-async-burst`: a new risk-client wrapper calls `.Result` on the async HTTP call, and a
  2.5x burst arrives (30-50 % of the run): blocked threads wait for I/O completions that themselves
  need a pool thread; every request start and continuation waits, the gate adds a thread every
  0.5-1 s, latency climbs in steps for seconds, then recovers: queueing, stage queue, the server span
  (side slow_dependency: the HttpClient spans end on a starved continuation).
- `gen2-loh-compaction`: one pod's memory limit was cut; its heap runs near GCHeapHardLimit and a
  blocking gen2 with LOH compaction (100-800 ms) stops it every 1.5-3.5 s: gc_pause at that pod.
- `cpu-limit-lowered`: the CPU limit lowered to 300m (30 ms per 100 ms period): bursts of requests
  spend the quota early and every thread stops until the next period: cpu_throttling.
- `longer-merchant-texts`: merchant descriptions now carry scraped website text (~20x longer): the
  tokenizer lock is held ~20x longer and requests queue on the SemaphoreSlim: lock_contention,
  stage preprocessing, `MerchantText.Tokenize`.
- `redis-large-values`: 8 % of merchants' feature blobs grew to ~1.5 MB: their replies hold the
  multiplexer's socket for tens of ms and every reply behind them waits (head-of-line):
  large_payload at `GET`, accept queueing.
- `blocking-transaction`: a reconciliation job holds a table lock on the decisions table for 5 s: the
  INSERTs block holding their connections, the pool of 100 runs dry and later requests wait for a
  connection: lock_contention at the decision write (a database lock, then a drained pool: this
  vocabulary's name for both), accept queueing (the pool wait), side slow_dependency.
- `risk-service-slow`: the risk service slows to ~170 ms with a heavy tail: attempts past 300 ms are
  cancelled and retried after a back-off: timeout_retry, accept slow_dependency.
- `risk-outage-breaker`: the risk service stops answering from 25 % of the run: every attempt times
  out and is retried until the pod's breaker opens, then requests take the default-score path at
  once: the tail is the retries before each pod's breaker opened: timeout_retry.
- `hpa-scale-out`: a 2.2x burst and 3 new pods from 35 % of the run: tier-0 JIT and first-call
  compilation, a cold multiplexer and cold SQL / HTTP pools: cold_start at the new pods.
- `model-v2-larger`: a bigger transformer (~6x the FLOPs): compute_bound at `onnx.inference`.
- Pairs: `gen2-loh-compaction+redis-large-values`, `longer-merchant-texts+model-v2-larger` (the new
  model reads the longer texts),
  `risk-service-slow+sync-over-async-burst` (blocked threads are held for the slow calls).
"""

from __future__ import annotations

import bisect
import random
from typing import Any

from reference_pipeline.simulate import dotnet_onnx_spans as sp
from reference_pipeline.simulate.dotnet_onnx_deps import (
    ConnectionPool,
    Multiplexer,
    RiskClient,
    backoff,
    sql_ms,
)
from reference_pipeline.simulate.dotnet_onnx_runtime import Cpu, Driver, Semaphore, Sim, ThreadPool, gc_pauses
from reference_pipeline.simulate.trace_table import (
    NS_PER_MS,
    NS_PER_S,
    Cause,
    Stalls,
    TraceTable,
    lognormal_ms,
    poisson_arrivals,
)

FAMILY = "dotnet-onnx"
SINGLES = ("sync-over-async-burst", "gen2-loh-compaction", "cpu-limit-lowered", "longer-merchant-texts",
           "redis-large-values", "blocking-transaction", "risk-service-slow", "risk-outage-breaker",
           "hpa-scale-out", "model-v2-larger")
PAIRS = ("gen2-loh-compaction+redis-large-values", "longer-merchant-texts+model-v2-larger",
         "risk-service-slow+sync-over-async-burst")
SCENARIOS = ("steady", *SINGLES, *PAIRS)
NEW_PODS = 3
WARM_THREADS = 6  # what a pod's pool has grown to over its life (min = cores = 2)
_SETUPS = (
    {"fmt": "otlp-json", "semconv": "new", "ident": "instance-id", "internals": True, "runtime_events": True,
     "pods": 4, "rps": 120.0},
    {"fmt": "jaeger", "semconv": "old", "ident": "host-pid", "internals": True, "runtime_events": False,
     "pods": 6, "rps": 170.0},
    {"fmt": "zipkin", "semconv": "new", "ident": "endpoint", "internals": False, "runtime_events": True,
     "pods": 5, "rps": 145.0},
)


def setup(seed: int) -> dict[str, Any]:
    return dict(_SETUPS[seed % 3])


def style(seed: int) -> sp.Style:
    s = setup(seed)
    return sp.Style(seed, s["semconv"], s["ident"], s["internals"], s["runtime_events"])


def gc_pod(seed: int) -> int:
    return 1 % setup(seed)["pods"]


def truth(scenario: str, seed: int) -> tuple[Cause, ...]:
    if scenario not in SCENARIOS:
        raise ValueError(f"unknown {FAMILY} scenario {scenario!r}; one of {', '.join(SCENARIOS)}")
    s, st = setup(seed), style(seed)
    pods = tuple(st.label(sp.API, k) for k in range(s["pods"]))
    new = tuple(st.label(sp.API, k) for k in range(s["pods"], s["pods"] + NEW_PODS))
    api = sp.API
    causes = {
        "sync-over-async-burst": Cause("queueing", "queue", st.root, api, pods, side=("slow_dependency",)),
        "gen2-loh-compaction": Cause("gc_pause", None, st.root, api, (pods[gc_pod(seed)],),
                                     side=("queueing",)),
        "cpu-limit-lowered": Cause("cpu_throttling", None, st.root, api, pods, side=("queueing",)),
        "longer-merchant-texts": Cause("lock_contention", "preprocessing", sp.TOKENIZE, api, pods,
                                       side=("compute_bound", "queueing")),
        "redis-large-values": Cause("large_payload", "feature_hydration", sp.REDIS_GET, api, pods,
                                    accept=("queueing",), side=("slow_dependency",)),
        "blocking-transaction": Cause("lock_contention", "downstream", sp.DECISION if st.internals else sp.DB,
                                      api, pods, accept=("queueing",), side=("slow_dependency",)),
        "risk-service-slow": Cause("timeout_retry", "downstream", st.http_client, api, pods,
                                   accept=("slow_dependency",)),
        "risk-outage-breaker": Cause("timeout_retry", "downstream", st.http_client, api, pods,
                                     side=("slow_dependency",)),
        "hpa-scale-out": Cause("cold_start", None, st.root, api, new, side=("queueing",)),
        "model-v2-larger": Cause("compute_bound", "model_forward", sp.ONNX, api, pods, side=("queueing",)),
    }
    return tuple(causes[part] for part in scenario.split("+") if part != "steady")


class Pod:
    """One fraud-api process: its CPU, ThreadPool, tokenizer lock, multiplexer and pools."""

    def __init__(self, sim: Sim, rng: random.Random, index: int, horizon: float, gen2: bool,
                 quota: float, born: float | None, redis_server: Stalls) -> None:
        self.index, self.born = index, born
        cold = born is not None
        pauses, self.gcs = gc_pauses(rng, horizon, gen2)
        self.cpu = Cpu(Stalls(pauses), quota)
        self.pool = ThreadPool(sim, self.cpu, 2 if cold else WARM_THREADS, rng)
        self.tokenizer = Semaphore()
        self.redis = Multiplexer(redis_server, None if cold else 0.0)
        self.sql = ConnectionPool(100, 0 if cold else 12, 22.0)
        self.risk = RiskClient(0 if cold else 8)
        self.served = 0

    def warmth(self, rng: random.Random) -> tuple[float, float]:
        """(factor on CPU work, first-call JIT ns) for the pod's next request: a new pod runs tier-0
        code and compiles methods on first call; after ~a few hundred requests it is at tier 1."""
        if self.born is None:
            return 1.0, 0.0
        n = self.served
        jit = lognormal_ms(rng, 30.0, 0.5) * 2.0 ** (-n / 6.0) if n < 40 else 0.0
        return 1.0 + 2.2 * 2.0 ** (-n / 90.0), jit


def _merchant(rng: random.Random) -> int:
    return min(4999, int(rng.paretovariate(1.1))) if rng.random() < 0.6 else rng.randrange(5000)


def request(rng: random.Random, pod: Pod, st: sp.Style, parts: set[str], run_ns: float,
            out: list[sp.Rec], blocked: tuple[float, float] | None):
    """One /v1/score on `pod`, as a generator driven by dotnet_onnx_runtime.Driver; fills `out`."""
    t = yield None
    slow_risk, hung = "risk-service-slow" in parts, "risk-outage-breaker" in parts
    factor, jit = pod.warmth(rng)
    pod.served += 1
    root = sp.Rec(st.root, "Server", t, t, {}, -1, scope=sp.ASP)
    out.append(root)
    t = yield ("cpu", (lognormal_ms(rng, 0.25, 0.3) + jit) * factor)
    merchant = _merchant(rng)
    large = "redis-large-values" in parts and (merchant * 2654435761) % 100 < 8
    blob = (1.5e6 * min(2.7, max(0.25, rng.lognormvariate(0.0, 0.5))) if large
            else 3000.0 * rng.lognormvariate(0.0, 0.3))
    feat = 0
    if st.internals:
        out.append(sp.Rec(sp.FEATURES, "Internal", t, t, {"merchant.id": merchant}, 0))
        feat = len(out) - 1
    times = pod.redis.command(rng, t, blob)
    out.append(sp.redis_rec(st, feat, times.enqueued, times.sent, times.received))
    t = yield ("async", times.received)
    hit = rng.random() >= 0.03
    if not hit:
        got, _ = pod.sql.acquire(rng, t)
        end = got + sql_ms(rng, False)
        pod.sql.release(end)
        t = yield ("async", end)
        out.append(sp.sql_rec(st, feat, got, t, "SELECT [m].[MerchantId], [m].[Features] FROM "
                              "[MerchantFeatures] AS [m] WHERE [m].[MerchantId] = @__id_0"))
    t = yield ("cpu", (0.05 * NS_PER_MS + blob / 0.2) * factor)  # System.Text.Json at ~200 MB/s
    if st.internals:
        out[feat].end = t
        out[feat].attrs.update({"features.source": "redis" if hit else "sql", "features.bytes": int(blob)})
    chars = int(min(6000, 1400 * rng.lognormvariate(0.0, 0.5)) if "longer-merchant-texts" in parts
                else min(400, 70 * rng.lognormvariate(0.0, 0.4)))
    tokens = min(128, max(4, chars // 4))
    tok = sp.Rec(sp.TOKENIZE, "Internal", t, t,
                 {"merchant.text.length": chars, "tokenizer.tokens": tokens}, 0)
    out.append(tok)
    t = yield ("lock", pod.tokenizer)
    t = yield ("cpu", (0.05 + 0.012 * chars) * NS_PER_MS * rng.lognormvariate(0.0, 0.15) * factor)
    tok.end = t
    t = yield ("unlock", pod.tokenizer)
    v2 = "model-v2-larger" in parts
    infer = (lognormal_ms(rng, 0.8, 0.2) + (3.0 + 0.012 * tokens) * NS_PER_MS * rng.lognormvariate(0.0, 0.1)
             * (9.0 if v2 else 1.0))
    start = t
    t = yield ("cpu", infer * factor)
    out.append(sp.Rec(sp.ONNX, "Internal", start, t, {
        "model.name": sp.MODEL, "model.version": "2.0.0" if v2 else "1.4.2",
        "onnxruntime.execution_provider": "CPUExecutionProvider", "model.input.tokens": tokens}, 0))
    wait = "block" if "sync-over-async-burst" in parts else "async"
    source = "network"
    for retry in range(3):
        if pod.risk.breaker.is_open(t):
            source = "default"
            break
        a = pod.risk.attempt(rng, t, slow_risk, hung and t > 0.25 * run_ns)
        t = yield (wait, a.end)
        out.append(sp.risk_rec(st, 0, a.start, max(t, a.end), a.status, retry))
        if not a.failed:
            break
        if retry == 2:
            source = "default"
            break
        t = yield (wait, t + backoff(rng, retry))
    t = yield ("cpu", lognormal_ms(rng, 0.06, 0.3) * factor)
    dec = 0
    if st.internals:
        out.append(sp.Rec(sp.DECISION, "Internal", t, t, {}, 0))
        dec = len(out) - 1
    got, _ = pod.sql.acquire(rng, t)
    run = sql_ms(rng, True)
    end = got + run
    if blocked is not None and got < blocked[1] and end > blocked[0]:
        end = blocked[1] + run  # waits on the table lock, holding its connection
    pod.sql.release(end)
    t = yield ("async", end)
    out.append(sp.sql_rec(st, dec, got, t, "INSERT INTO [ScoreDecisions] ([TransactionId], [Score], [Source],"
                          " [CreatedAt]) VALUES (@p0, @p1, @p2, @p3)"))
    if st.internals:
        out[dec].end = t
    t = yield ("cpu", lognormal_ms(rng, 0.15, 0.3) * factor)
    root.end = t
    root.attrs = sp.server_attrs(st, "/v1/score", 200, {"fraud.risk.source": source})


def _events(pod: Pod, rec: sp.Rec) -> list[tuple[float, str, dict[str, Any]]]:
    """The runtime events inside a server span: each GC that began in it, each thread injection."""
    gcs, adjust = pod.gcs, pod.pool.adjustments
    k = bisect.bisect_left(gcs, (rec.start,))
    out: list[tuple[float, str, dict[str, Any]]] = []
    while k < len(gcs) and gcs[k][0] < rec.end:
        t, gen, ms, compacting = gcs[k]
        out.append((t, "dotnet.gc",
                    {"gc.generation": gen, "gc.pause.ms": round(ms, 2), "gc.compacting": compacting}))
        k += 1
    k = bisect.bisect_left(adjust, (rec.start,))
    while k < len(adjust) and adjust[k][0] < rec.end:
        t, n = adjust[k]
        out.append((t, "dotnet.threadpool.adjustment",
                    {"threadpool.thread.count": n, "reason": "Starvation"}))
        k += 1
    return sorted(out, key=lambda e: e[0])


def generate(scenario: str, requests: int, seed: int, **opts: Any) -> TraceTable:
    truth(scenario, seed)
    s = {**setup(seed), **opts}
    parts = set(scenario.split("+")) - {"steady"}
    rng = random.Random(seed * 1_000_003 + 2626)
    st = style(seed)
    table = TraceTable(seed, 0x26D)
    res = sp.Resources(table, st)
    run_s = requests / s["rps"]
    run_ns = run_s * NS_PER_S
    bursts: tuple[tuple[float, float, float], ...] = ()
    if "sync-over-async-burst" in parts:
        bursts = ((0.3 * run_s, 0.2 * run_s, 2.5),)
    elif "hpa-scale-out" in parts:
        bursts = ((0.2 * run_s, 0.6 * run_s, 2.2),)
    arrivals = [5 * NS_PER_MS + t for t in poisson_arrivals(rng, s["rps"], requests, bursts)]
    horizon = arrivals[-1] + 60 * NS_PER_S
    sim = Sim()
    quota = 0.3 if "cpu-limit-lowered" in parts else 2.0
    server = Stalls([(a, a + lognormal_ms(rng, 6.0, 0.4)) for a in
                     (rng.uniform(0.0, horizon) for _ in range(int(horizon / (5 * NS_PER_S))))])
    gen2 = "gen2-loh-compaction" in parts
    pods = [Pod(sim, rng, k, horizon, gen2 and k == gc_pod(seed), quota, None, server)
            for k in range(s["pods"])]
    ready = 0.35 * run_ns
    if "hpa-scale-out" in parts:
        pods += [Pod(sim, rng, k, horizon, False, quota, ready, server)
                 for k in range(s["pods"], s["pods"] + NEW_PODS)]
    blocked = (0.3 * run_ns, 0.3 * run_ns + 5 * NS_PER_S) if "blocking-transaction" in parts else None
    done: list[tuple[int, int, float, list[sp.Rec]]] = []
    for sent in arrivals:
        live = [p for p in pods if p.born is None or p.born <= sent]
        pod = live[rng.randrange(len(live))]
        recs: list[sp.Rec] = []
        drv = Driver(sim, pod.pool, request(rng, pod, st, parts, run_ns, recs, blocked))
        sim.at(sent + lognormal_ms(rng, 0.3, 0.3), drv.start)
        done.append((rng.randrange(sp.GATEWAY_PODS), pod.index, sent, recs))
    sim.run()
    for gw, k, sent, recs in done:
        pod = pods[k]
        recs[0].events = _events(pod, recs[0])
        sp.write_request(table, res, gw, k, sent, recs[0].end + lognormal_ms(rng, 0.3, 0.3), recs)
    return table
