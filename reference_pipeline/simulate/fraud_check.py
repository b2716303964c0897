"""Blind family `fraud-check`: a payments API calling a Python fraud-scoring service over HTTP.

Shape: `payments-api` (Java with the OpenTelemetry agent, or Go with otelhttp; 3 pods) serves
`POST /v2/payments/authorize` and calls `fraud-scorer` (`POST /v1/score`, a CLIENT span and the
scorer's SERVER span), then writes its ledger row. `fraud-scorer` is FastAPI under gunicorn with
uvicorn workers: 2-4 pods, 2-3 worker processes each, one asyncio event loop per process (see
fraud_check_loop.py for the loop, the collector and the pool). Per request: the body is read (ASGI
`http receive` / `http send` spans on some seeds) and validated by pydantic (time grows with the
transaction history it carries), then `fetch_features`: a Redis `MGET` of three precomputed
profiles (card, merchant, device), the velocity query on Postgres through a request-scoped
SQLAlchemy session (a pooled connection checked out at the first statement, held until the session
closes after the response), and per missing profile an aggregate query on Postgres and a Redis `SET`
to write it back; the history aggregates; the model (LightGBM or an ONNX net, on the loop's CPU);
for grey-zone scores (a fifth of requests) the third-party risk vendor over HTTPS (httpx, 300 ms
timeout, tenacity: two attempts 50 ms apart, then the decision goes on without it); the decision
row (`INSERT`); the audit event to Kafka in a task of its own (its PRODUCER span starts after the
response and ends at the broker's ack); the response.

Conventions per seed: seed % 3 picks OTLP/JSON lines (new semantic conventions; an instance is a
worker process, `host.name` = pod + `process.pid`; Java caller), Jaeger UI JSON (old conventions; the
Operator's `service.instance.id` per pod, so a pod's workers are one instance; Go caller) or a Zipkin
v2 array (old conventions; an instance is the pod's endpoint ip:8000; Java caller). Generation-2 GC
collections are reported as `gc` span events on the span running when they happen (a `gc.callbacks`
hook) on even seeds only; the ASGI receive/send spans are traced when seed % 4 < 2; the scorer's own
span names follow one of two styles (even: `validate_request`, `fetch_features`, `preprocess_history`,
`model.predict`, `risk_vendor.check`; odd: `TransactionPayload.parse`, `FeatureStore.get`,
`HistoryAggregator.summarize`, `FraudModel.score`, `RiskVendor.assess`). Healthy noise everywhere:
generation-1 pauses of ~1 ms and rare generation-2 ones of 12-35 ms, 0.5-4 % profile misses, a vendor
with an occasional slow answer (and a rare timeout), an overflow Postgres connection opened now and
then when a pause piles requests up, young-GC pauses in the caller.

Mechanisms (scenario: truth):

- `worker-gc` (gc_pause, process-wide, the one worker): one worker's heap grows (an unbounded
  per-process cache), so its generation-2 collections come every 0.1-0.25 s of CPU and last
  180-380 ms, up to 1.5x longer as the heap grows. Every coroutine in flight there stops: spans end late,
  requests that arrive wait to start (queueing is a side effect).
- `vendor-timeouts` (timeout_retry at the scorer, the vendor's CLIENT span): three slow periods of
  the vendor (each 12 % of the run, median 330 ms; one of 6 % beside the worker's GC): attempts cut
  by the 300 ms timeout with an error and `ReadTimeout` (the timer's callback also waits for the
  loop), then the retry (slow_dependency is a side effect).
- `pool-exhaustion` (lock_contention in `fetch_features`): the pool was cut from SQLAlchemy's
  default (5 + 10 overflow per worker) to a single connection (3 beside the eviction wave), to fit
  Postgres's connection limit, at the same load; a checkout waits, before the velocity query's span,
  for a connection held by a request still in its model, its vendor call or its response.
- `request-burst` (queueing before the SERVER span): the chart lost `WEB_CONCURRENCY`, so each pod
  runs gunicorn's default single worker, and two bursts at 1.25x what the loops can run: the
  caller's CLIENT span starts well before the scorer's SERVER span (the read and the new task's
  first step each wait a turn of the loop), and every await inside the handler resumes late too.
  With so many requests in flight, the request-scoped sessions use up the pool (5 + 10 overflow):
  waiting for a connection comes with the burst (lock_contention is a side effect).
- `redis-eviction` (cache_miss in `fetch_features`): Redis reached maxmemory and evicts profiles for
  a third of the run, then recovers: misses go to the aggregate queries on Postgres (20-50 ms each).
- `large-histories` (large_payload in validation): a new client version sends 90-day histories
  (hundreds to thousands of transactions, `http.request.body.size` and an item count on the spans)
  for a quarter of the requests: reading, validating (8 µs per item) and aggregating (18 µs per
  item) grow with it (the loop's other requests wait: queueing is a side effect).
- `cpu-throttle` (cpu_throttling, process-wide, every scorer pod): the pods' CPU limit was set to
  1.15x their mean use (1.75x beside the large histories); in the 100 ms CFS periods where demand
  runs over the quota, every worker of the pod stops until the period ends, at the pod's own phase
  (requests wait to start: queueing is a side effect).
- `worker-recycle` (cold_start in the model span, the new processes): `--max-requests` was set low
  (against the leak; sized so each first worker restarts once in the run, jitter +-30 %); the
  master forks a preloaded app in 0.15-0.4 s, the new process (a new pid) opens its Postgres,
  Redis and vendor connections on first use (`connect` spans), and its first predictions (150 ms,
  halving) and validations are slow (lazy initialisation).
- Two causes: `redis-eviction+pool-exhaustion`, `worker-gc+vendor-timeouts`,
  `large-histories+cpu-throttle`.

No `accept`: each mechanism leaves its own mark (period-boundary ends, timeout-length attempts, a gap
before the first statement, instance-local stalls without a period, misses, sizes, first requests).
Truth instances are what a reader can tell apart: worker processes (OTLP: `pod:pid`), pods (Jaeger:
the per-pod `service.instance.id`; Zipkin: `ip:8000`).
"""

from __future__ import annotations

from typing import Any

from reference_pipeline.simulate.fraud_check_sim import PODS, WORKERS, pids_of, pod_ip, pod_names, simulate
from reference_pipeline.simulate.fraud_check_spans import names, scorer_label
from reference_pipeline.simulate.trace_table import Cause, TraceTable

FAMILY = "fraud-check"
SCORER = "fraud-scorer"
SINGLE = (
    "worker-gc",
    "vendor-timeouts",
    "pool-exhaustion",
    "request-burst",
    "redis-eviction",
    "large-histories",
    "cpu-throttle",
    "worker-recycle",
)
PAIRS = ("redis-eviction+pool-exhaustion", "worker-gc+vendor-timeouts", "large-histories+cpu-throttle")
SCENARIOS = ("steady", *SINGLE, *PAIRS)
FORMATS = ("otlp-json", "jaeger", "zipkin")
RPS = (150.0, 120.0, 170.0)


def setup(seed: int) -> dict[str, Any]:
    c = seed % 3
    return {
        "fmt": FORMATS[c],
        "pods": PODS[c],
        "workers": WORKERS[c],
        "rps": RPS[c],
        "gc_events": seed % 2 == 0,
        "asgi_spans": seed % 4 < 2,
        "names": "a" if seed % 2 == 0 else "b",
        "semconv": "new" if c == 0 else "old",
        "caller": "go" if c == 1 else "java",
        "model": "onnx" if c == 1 else "lightgbm",
    }


def _labels(s: dict[str, Any], pairs: list[tuple[int, int]]) -> tuple[str, ...]:
    pods = pod_names(s["seed"], s["pods"])
    out = [scorer_label(s, pods[p], pid, pod_ip(p)) for p, pid in pairs]
    return tuple(dict.fromkeys(out))


def truth(scenario: str, seed: int) -> tuple[Cause, ...]:
    parts = scenario.split("+")
    if scenario not in SCENARIOS:
        raise ValueError(f"unknown {FAMILY} scenario {scenario!r}; one of {', '.join(SCENARIOS)}")
    s = {**setup(seed), "seed": seed}
    n = names(s)
    out = []
    for part in parts if scenario != "steady" else ():
        procs = pids_of(s, part)
        where = _labels(s, procs)
        out.append(
            {
                "worker-gc": Cause("gc_pause", None, None, SCORER, where, side=("queueing",)),
                "vendor-timeouts": Cause(
                    "timeout_retry", "downstream", n["attempt"], SCORER, where, side=("slow_dependency",)
                ),
                "pool-exhaustion": Cause("lock_contention", "feature_hydration", n["fetch"], SCORER, where),
                "request-burst": Cause(
                    "queueing", "queue", n["server"], SCORER, where, side=("lock_contention",)
                ),
                "redis-eviction": Cause("cache_miss", "feature_hydration", n["fetch"], SCORER, where),
                "large-histories": Cause(
                    "large_payload", "parsing", n["validate"], SCORER, where, side=("queueing",)
                ),
                "cpu-throttle": Cause("cpu_throttling", None, None, SCORER, where, side=("queueing",)),
                "worker-recycle": Cause("cold_start", "model_forward", n["predict"], SCORER, where),
            }[part]
        )
    return tuple(out)


def generate(scenario: str, requests: int, seed: int, **opts: Any) -> TraceTable:
    truth(scenario, seed)
    s = {**setup(seed), **opts, "seed": seed}
    return simulate(s, set(scenario.split("+")) - {"steady"}, requests)
