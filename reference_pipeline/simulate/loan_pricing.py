"""Blind family `loan-pricing`: a .NET loan-pricing API behind a reverse proxy, on several pods.

Shape: `loan-pricing-api` (ASP.NET Core 8 on Kestrel, 3 pods of 4 vCPU, 5 after a scale-out, 130-150
requests/s, server GC; the service name is `loan-pricing-api`, `LoanPricing.Api` or `loan-pricing` by seed)
serves `POST /api/v1/loans/quote`. Per
request it reads the product's rate table from Azure Cache for Redis (`GET`, StackExchange.Redis: ONE
multiplexed connection per process) while `ApplicantRepository.GetApplicant` runs `dbo.usp_GetApplicant` on
Azure SQL through ADO.NET's pool; it then calls a credit bureau over HTTPS (HttpClient under a resilience
pipeline: a 400 ms attempt timeout, 2 retries after 2^n x 100 ms plus jitter, a circuit breaker that opens
for 5 s when half of 20+ calls in 10 s failed), scores with an in-process ONNX Runtime model
(`RiskModel.Score`), prices the options (`PricingEngine.Price`), writes the quote to Cosmos DB
(`create_item quotes`) and sends an event to Service Bus in parallel, and serialises the quote with its
amortisation schedules (`QuoteResponse.Serialize`, its bytes in `quote.payload_bytes`). The credit bureau
is a third party: not traced. In front: a YARP reverse proxy (`loan-gateway`, 2 pods, traced: its SERVER
span and the forwarded CLIENT span, which ends when the response headers arrive, while the SERVER span ends
when the body is copied; PowerOfTwoChoices: the less busy of two pods) on seeds 0 and 2; an Azure
Application Gateway, not traced, on seed 1 (round-robin).

Conventions by seed (mod 3): 0: OTLP/JSON lines, new semconv (`http.request.method`, `server.address`,
`db.query.text`; SQL span `EXECUTE dbo.usp_GetApplicant`, HttpClient span `POST`), instances by
`service.instance.id` (the SDK's GUID per process) beside `k8s.pod.name`, GC reported; 1: Jaeger JSON, old
semconv (`http.method`, `net.peer.name`, `db.statement`; SQL span named by the database `LoanDb`,
HttpClient `HTTP POST`), instances by `host.name` (beside `k8s.pod.name`; no generated instance id), Redis
spans without `db.system`, GC reported, ReadyToRun images; 2: Zipkin v2, old semconv, instances as endpoint
ip:port, SQL spans without `db.system`, no GC reported. GC is reported as a span event `dotnet.gc.pause`
(generation, type, reason, `dotnet.gc.pause.time` in s) added, when a pause ends, to the pod's server spans
in flight. Redis spans carry StackExchange.Redis's Enqueued / Sent / ResponseReceived events.

Healthy noise: gen0 (2-7 ms) and gen1 (8-18 ms) pauses, background gen2's short pauses, 0.4 % slow Redis
replies, 0.3 % slow queries, 0.8 % slow bureau answers (a few time out and are retried), 0.5 % slow Cosmos
writes, jitter everywhere. Mechanisms (loan_pricing_runtime.py) and their truth:

- `threadpool-starvation`: a release wrapped the bureau client in sync code (`.GetAwaiter().GetResult()`),
  so each request blocks a pool thread through its bureau call; then a partner's batch bursts (3.5x for 8 %
  of the run's nominal length). Past the threads the pool had grown to (7-8), work queues in the global
  FIFO queue and the starvation logic injects a thread every 0.25-0.5 s (hill climbing past the minimum,
  quickened by .NET's response to threads blocked on tasks). Every work item waits in that queue: a
  request's start on Kestrel (seen only where the proxy is traced), and each await's completion, the
  blocked calls' own included (so a blocked thread holds on longer: the queue feeds itself until the burst
  is over and enough threads were added). Truth: queueing (stage queue, the root span), all pods; side
  slow_dependency (client spans end when a thread runs their completion). In the other scenarios the call
  is awaited: no thread is held and the pool never runs short.
- `gen2-blocking-gc`: one pod's fragmented heap makes blocking, compacting gen2 GCs of 180-550 ms every
  0.8-2.4 s: every managed thread of that pod stops (spans in flight are stretched, a request arriving
  meanwhile starts after it; native ONNX work runs on but its span ends after). Truth: gc_pause (stage
  ingress, the root span), that pod; side queueing.
- `sql-pool-exhaustion`: a plan regression makes `usp_GetApplicant` take ~0.6 s for the requests from a
  quarter to four fifths of the run; with `Max Pool Size` 16-20 per pod (the Azure SQL tier's worker limit
  shared by the pods) every connection is held and `OpenAsync` waits FIFO for one, inside
  `ApplicantRepository.GetApplicant` before its SQL span (the slowest requests wait longer than they
  query). Truth: lock_contention (stage feature_hydration, the repository span), all pods; side
  slow_dependency.
- `redis-head-of-line`: a release makes the broker channel (8 % of requests) fetch the whole rate sheet
  (`GET`, 2-8 MB, read at ~45 MB/s) on the shared connection: replies are read in order, so every command
  queued behind one waits for its transfer. Truth: lock_contention (stage feature_hydration, span `GET`),
  all pods; accept large_payload: the waits are behind other requests' large values on one connection, and
  the large GETs' own time grows with their size: a trace without the value sizes cannot tell the
  size-driven hold from the wait for the held connection.
- `bureau-timeout-retry`: the bureau slows (median 70 ms, 12 % of calls + Pareto 300 ms): attempts cut at
  400 ms (error, `TaskCanceledException`), retried after backoff. Truth: timeout_retry (stage downstream,
  the HttpClient span), all pods; side slow_dependency.
- `cosmos-throttling`: a backfill job takes most of the container's RU/s for 45 % of the run's requests
  (leaving 85 % of what the writes need); the budget is accounted per second: a write over it gets 429 with
  x-ms-retry-after-ms up to the next second, and the SDK waits and retries inside its operation span
  (`db.cosmosdb.sub_status_code` 3200 on the throttled ones). Truth: slow_dependency (stage downstream, the
  Cosmos span), all pods; accept queueing: the wait is for request units other writers spent, a queue at
  the dependency the client only sees as a slow call.
- `cold-jit-scale-out`: two pods join at 40 % of the run and get their share at once: the first request
  JITs the path (260-520 ms; 40-90 ms with ReadyToRun), the first `Score` creates the ONNX session (300-600
  ms; concurrent requests wait on it), managed code runs tier-0 (2.8x; ReadyToRun 1.35x) until tier 1 after
  30 calls, SQL and TLS connections open on demand. Truth: cold_start (stage model_forward,
  `RiskModel.Score`), the new pods.
- `rate-table-growth`: a rate-buydown grid grows two products' tables from 6-8 to 48-120 options; the quote
  carries every option's schedule (~1.6-4 MB instead of ~30-270 KB) and serialising it takes time with its
  bytes; large buffers land on the LOH and background gen2s come more often. Truth: large_payload (stage
  serialization, `QuoteResponse.Serialize`), all pods; side gc_pause.
- Two causes: `gen2-blocking-gc+bureau-timeout-retry`, `sql-pool-exhaustion+cosmos-throttling` (the slow
  queries for a tenth to 28 % of the requests, then the backfill, leaving 70 %, from 55 %: a pool that
  holds requests back would keep their writes off the RU budget), `cold-jit-scale-out+rate-table-growth`.
"""

from __future__ import annotations

import bisect
import random
from typing import Any

from reference_pipeline.simulate import loan_pricing_model as model
from reference_pipeline.simulate.loan_pricing_spans import PROXY, emit, instance_label, names, resource
from reference_pipeline.simulate.trace_table import NS_PER_S, Cause, TraceTable, poisson_arrivals

FAMILY = "loan-pricing"
SCENARIOS = ("steady", "threadpool-starvation", "gen2-blocking-gc", "sql-pool-exhaustion",
             "redis-head-of-line", "bureau-timeout-retry", "cosmos-throttling", "cold-jit-scale-out",
             "rate-table-growth", "gen2-blocking-gc+bureau-timeout-retry",
             "sql-pool-exhaustion+cosmos-throttling", "cold-jit-scale-out+rate-table-growth")
_SETUPS = (
    {"fmt": "otlp-json", "semconv": "new", "identity": "service.instance.id", "proxy": "yarp",
     "gc_events": True, "r2r": False, "pods": 3, "rps": 150.0, "threads": 8, "max_pool": 20,
     "service": "loan-pricing-api", "redis_db_system": True, "sql_db_system": True},
    {"fmt": "jaeger", "semconv": "old", "identity": "host.name", "proxy": "application-gateway",
     "gc_events": True, "r2r": True, "pods": 3, "rps": 150.0, "threads": 6, "max_pool": 18,
     "service": "LoanPricing.Api", "redis_db_system": False, "sql_db_system": True},
    {"fmt": "zipkin", "semconv": "old", "identity": "host.name", "proxy": "yarp",
     "gc_events": False, "r2r": False, "pods": 3, "rps": 130.0, "threads": 7, "max_pool": 16,
     "service": "loan-pricing", "redis_db_system": True, "sql_db_system": False},
)
NEW_PODS = 2


def setup(seed: int) -> dict[str, Any]:
    return dict(_SETUPS[seed % 3])


def _pod_names(seed: int, n: int) -> list[str]:
    rng = random.Random(seed * 31 + 7)
    letters = "bcdfghjklmnpqrstvwxz2456789"  # the alphabet Kubernetes draws pod suffixes from
    replica_set = "".join(rng.choice(letters) for _ in range(9))
    return [f"loan-pricing-api-{replica_set}-" + "".join(rng.choice(letters) for _ in range(5))
            for _ in range(n)]


def _api_ip(k: int) -> str:
    return f"10.60.1.{11 + k}"


def _labels(seed: int) -> list[str]:
    """The instance labels of the api pods (the old ones, then the two a scale-out adds)."""
    s = setup(seed)
    table = TraceTable(seed, 0x10A7)
    rng = random.Random(seed * 1_000_033 + 15)
    pods = _pod_names(seed, s["pods"] + NEW_PODS)
    out = []
    for k, pod in enumerate(pods):
        i = resource(table, s, rng, s["service"], pod, _api_ip(k), 8080)
        out.append(instance_label(s, table.resources[i], _api_ip(k), 8080))
    return out


def truth(scenario: str, seed: int) -> tuple[Cause, ...]:
    if scenario not in SCENARIOS:
        raise ValueError(f"unknown {FAMILY} scenario {scenario!r}; one of {', '.join(SCENARIOS)}")
    s, n = setup(seed), names(setup(seed))
    svc, labels = s["service"], _labels(seed)
    parts = scenario.split("+")
    old = tuple(labels[: s["pods"]])
    every = tuple(labels) if "cold-jit-scale-out" in parts else old
    causes = {
        "threadpool-starvation": Cause("queueing", "queue", n["root"], svc, old, side=("slow_dependency",)),
        "gen2-blocking-gc": Cause("gc_pause", "ingress", n["root"], svc, (labels[0],), side=("queueing",)),
        "sql-pool-exhaustion": Cause("lock_contention", "feature_hydration", n["repo"], svc, old,
                                     side=("slow_dependency",)),
        "redis-head-of-line": Cause("lock_contention", "feature_hydration", n["redis"], svc, old,
                                    accept=("large_payload",)),
        "bureau-timeout-retry": Cause("timeout_retry", "downstream", n["bureau"], svc, old,
                                      side=("slow_dependency",)),
        "cosmos-throttling": Cause("slow_dependency", "downstream", n["cosmos"], svc, every,
                                   accept=("queueing",)),
        "cold-jit-scale-out": Cause("cold_start", "model_forward", n["score"], svc,
                                    tuple(labels[s["pods"]:])),
        "rate-table-growth": Cause("large_payload", "serialization", n["serialize"], svc, every,
                                   side=("gc_pause",)),
    }
    return tuple(causes[p] for p in parts if p != "steady")


def generate(scenario: str, requests: int, seed: int, **opts: Any) -> TraceTable:
    truth(scenario, seed)
    s = {**setup(seed), **opts}
    parts = set(scenario.split("+"))
    rng = random.Random(seed * 1_000_033 + 15)
    table = TraceTable(seed, 0x10A7)
    cold = "cold-jit-scale-out" in parts
    n_pods = s["pods"] + (NEW_PODS if cold else 0)
    pods = _pod_names(seed, s["pods"] + NEW_PODS)
    api = [resource(table, s, rng, s["service"], pods[k], _api_ip(k), 8080) for k in range(n_pods)]
    proxies = ([resource(table, s, rng, PROXY, f"loan-gateway-5f7b8d9c4-{k}q2x{k}", f"10.60.0.{21 + k}", 5000)
                for k in range(2)] if s["proxy"] == "yarp" else [])
    nominal = requests / s["rps"] * NS_PER_S
    starved = "threadpool-starvation" in parts
    bursts = ((0.3 * nominal / NS_PER_S, 0.08 * nominal / NS_PER_S, 3.5),) if starved else ()
    arrivals = poisson_arrivals(rng, s["rps"], requests, bursts)
    horizon = arrivals[-1] + 20 * NS_PER_S
    join = arrivals[int(0.4 * requests)] if cold else 0.0
    world = model.World(rng, s, parts, arrivals)
    states = [model.PodState(rng, s, horizon, blocking_gen2=("gen2-blocking-gc" in parts and k == 0),
                             loh_heavy="rate-table-growth" in parts, warm=k < s["pods"],
                             started=0.0 if k < s["pods"] else join - 8 * NS_PER_S)
              for k in range(n_pods)]
    proxy_states = [model.proxy_stalls(rng, horizon) for _ in proxies]
    n = names(s)
    turn = 0
    for t0 in arrivals:
        live = [k for k in range(n_pods) if k < s["pods"] or t0 >= join]
        if proxies:  # YARP's PowerOfTwoChoices: the less busy of two random pods
            a, b = rng.choice(live), rng.choice(live)
            pod = min((a, b), key=lambda k: model.in_flight(states[k].ends, t0))
        else:  # Application Gateway: round-robin
            pod, turn = live[turn % len(live)], turn + 1
        px = rng.randrange(len(proxies)) if proxies else -1
        timings = model.request(world, states[pod], pod, t0, proxy_states[px] if proxies else None, px)
        bisect.insort(states[pod].ends, timings.root[1])
        emit(table, s, n, api, proxies, s["service"], timings)
    return table
