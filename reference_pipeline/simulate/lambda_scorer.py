"""Blind family `lambda-scorer`: a serverless fraud-scoring API: API Gateway in front of a Python AWS
Lambda function that validates the cart, reads features from DynamoDB, calls a SageMaker real-time
endpoint and writes the score to SQS (or Kinesis).

Shape: `checkout-service` (Java, 2-4 pods) serves `POST /api/checkout/{cartId}/confirm` and calls the
REST API `scoring-api/prod` (`POST /prod/v1/score`, a 5 s client timeout, up to 4 attempts: 429,
502-504 and timeouts are retried after 100 ms x 2^n, jittered). API Gateway invokes `score-handler`
synchronously. The handler: `validate_request` (json + pydantic), `BatchGetItem` on the
`customer_features` table (100 keys a call), `build_features` (pandas), `InvokeEndpoint` on
`fraud-xgb-prod` (two production variants 50/50, two instances each, four model workers an instance:
SageMaker's overhead latency, a worker queue, the model latency), `SendMessage` / `PutRecord` (the SDK
call is synchronous) and `serialize_response`.

Lambda physics: an execution environment serves one invoke at a time; the frontend gives an invoke to
an idle environment, else starts a new one if fewer than the concurrency limit exist (reserved
concurrency, else the account's 1,000), else answers 429. A new environment runs its init (runtime
start, the telemetry extension, imports, a 30 MB artefact from S3, unpickling) before its first invoke,
whose first SDK calls also open their TLS connections. Environments are frozen between invokes: the
metrics flush a handler starts as it returns (at most every 5 s) runs until the freeze and finishes
only when the environment thaws for its next invoke (its span ends 0.1-2 s after its trace's root;
a flush of an environment never used again is lost). Memory sets the CPU share (1,769 MB = one vCPU;
less, proportionally slower CPU work, init included). Python GC: gen-2 collections after gc.freeze()
are short; young collections are tiny. Environments are recycled after hours: about one of the warm
pool retires during a run (the next peak starts a new one). The model runs 15 s of arrivals before
the run (not written): the pool of environments settles to the scenario's load, as it had while the
cause was in place. Healthy noise: the frontend now and then (0.15 % of invokes) starts a new
environment though others are idle, a hot partition throttles a read now and then (0.2 %), a model
worker is slow now and then (0.4 %), short GC pauses, jitter everywhere.

Conventions by seed (mod 3):
- 0: OTLP/JSON lines of X-Ray segments as the collector's awsxray receiver converts them: spans named
  like segments (`checkout-service`, the remote host `t8k2m1x9q4.execute-api...`, `scoring-api/prod`,
  `score-handler` with `Initialization` / `Invocation` / `Overhead`, SDK subsegments `DynamoDB`,
  `SageMakerRuntime`, `SQS` with `aws.operation` and `aws.retries`), old HTTP attribute names. API
  Gateway's span is there; the environment is named by `aws.log.stream.names`; the cold start is the
  `Initialization` span. SageMaker is not traced; no GC is reported.
- 1: Jaeger UI JSON from the ADOT Python layer, old semantic conventions (`faas.execution`,
  `http.status_code`, `net.peer.name`): the handler SERVER span `score-handler` with `faas.coldstart`,
  botocore spans (`DynamoDB.BatchGetItem` with `retry_attempts`; one urllib3 `HTTP POST` child per HTTP
  attempt of every SDK call), the model container traced (`fraud-model`: `POST /invocations`,
  `xgboost.predict`; hosts are instance ids), GC collections as `python.gc` events. No API Gateway span:
  the init shows only as the gap between the caller's CLIENT span and the handler's start. Environments:
  `faas.instance`.
- 2: Zipkin v2 (names lower-cased), new semantic conventions, Kinesis `PutRecord` instead of SQS; no
  API Gateway span, no init span, no cold-start attribute (a cold start is the gap before the handler
  and its slower first calls); environments are their endpoint address (169.254.x.y).

Mechanisms (truth: pattern, stage, span; service `score-handler` unless said):
- `burst-scaleout`: an 8x burst for 4 % of the run's nominal length (a flash sale): no idle environment,
  so new ones start (each init ~1.2-1.5 s; while they init, more arrivals find none idle: a cold-start
  storm of 100-300 environments). cold_start, ingress, `Initialization` (seed 0) / `score-handler`,
  instances: the environments the burst created.
- `concurrency-limit`: the same burst under a reserved concurrency of 0.5 x the rate (per second):
  beyond it the frontend answers 429 and the caller backs off and retries. queueing (waiting for an
  execution slot), queue, `score-handler`, every environment; side: cold_start (the scale-out up to the
  limit), timeout_retry (the rejected attempts are retried).
- `dynamodb-throttle`: read capacity scaled down to 1.35x the mean demand (spent per 100 ms, no burst
  credit; healthy runs have 15x): a full 100 ms answers ProvisionedThroughputExceeded; the SDK retries
  after 25 ms x 2^n with equal jitter, up to 6 attempts (then the handler fails: 500). slow_dependency,
  feature_hydration, the DynamoDB span; side: timeout_retry. Healthy runs see a throttled attempt now
  and then.
- `slow-variant`: variant-b was moved to a CPU instance type: its model latency is 9x; its workers
  queue. slow_dependency, model_forward; seed 1: service `fraud-model`, span `xgboost.predict`, its
  variant-b hosts; else the SageMaker client span at `score-handler`; side: queueing.
- `large-payload`: a client release sends every cart line (a median of 60 items, not 3): validation,
  BatchGetItem pages and unmarshalling, the feature build, the JSON body to SageMaker (2.8 KB an item)
  and the model grow with the items (`score.items`, request body size). large_payload, downstream,
  the SageMaker client span.
- `low-memory`: the function at 512 MB instead of 1,769+: CPU share 0.29, so every CPU step (and the
  init) is 3.5x slower on every request. compute_bound, preprocessing, `build_features`; accept:
  cpu_throttling (the share is a CPU quota; a single-threaded handler at a steady share is slowed
  evenly, which the trace cannot tell from slow code).
- `cross-az`: the SageMaker runtime's interface-endpoint ENI in subnet-b was removed, so the
  environments placed in subnet-b (every third) reach the endpoint's ENIs in the other AZs over a
  degraded cross-AZ path: 2 % packet loss and ~2.5 ms more. A lost packet costs a retransmission round
  trip, a lost flight tail the 200 ms RTO; bigger bodies lose more packets. DynamoDB (a gateway
  endpoint) and SQS / Kinesis (their endpoints still in subnet-b) are not affected. network,
  downstream, the SageMaker client span, instances: subnet-b's environments.
- `gc-alloc`: 30 % of requests are `explain=true` (SHAP-style contributions: many small dicts kept in
  an unfrozen cache): 45 % of them run a full collection of ~140 ms inside `build_features`.
  gc_pause, preprocessing, `build_features`, every environment.
- Two causes: `slow-variant+concurrency-limit` (no burst: the slow variant lengthens invokes until a
  limit of 0.175 x the rate is reached), `burst-scaleout+dynamodb-throttle` (capacity 5x the steady
  demand: the 8x burst's reads are throttled, some requests fail), `cross-az+large-payload`.

The environments a cause names depend on the run; truth(scenario, seed) reads the last run generated
for that scenario and seed (write_run generates before it asks), else simulates 2,000 requests.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from reference_pipeline.simulate.lambda_scorer_sim import Plan, Run, simulate
from reference_pipeline.simulate.lambda_scorer_spans import (
    FUNCTION,
    MODEL,
    emit,
    env_identity,
    instance_host,
    name_of,
)
from reference_pipeline.simulate.trace_table import Cause, TraceTable

FAMILY = "lambda-scorer"
SINGLE = ("burst-scaleout", "concurrency-limit", "dynamodb-throttle", "slow-variant", "large-payload",
          "low-memory", "cross-az", "gc-alloc")
SCENARIOS = ("steady", *SINGLE, "slow-variant+concurrency-limit", "burst-scaleout+dynamodb-throttle",
             "cross-az+large-payload")
DEFAULT_REQUESTS = 2000
_LAST: dict[tuple[str, int], tuple[int, tuple[tuple[str, Any], ...]]] = {}


def setup(seed: int) -> dict[str, Any]:
    k = seed % 3
    return {"fmt": ("otlp-json", "jaeger", "zipkin")[k], "style": ("xray", "otel", "otel")[k],
            "semconv": ("old", "old", "new")[k], "gateway_span": k == 0, "model_traced": k == 1,
            "coldstart": ("init_span", "attribute", "none")[k],
            "identity": ("log_stream", "faas_instance", "endpoint")[k], "rps": (40.0, 60.0, 30.0)[k],
            "memory_mb": (1769.0, 2048.0, 1769.0)[k], "warm": (5, 7, 4)[k], "callers": (3, 4, 2)[k],
            "sink": ("sqs", "sqs", "kinesis")[k], "gc_events": k == 1, "flush": k != 1,
            "attempt_spans": k == 1, "extension": k != 2}


def plan(scenario: str, requests: int, s: dict[str, Any]) -> Plan:
    if scenario not in SCENARIOS:
        raise ValueError(f"unknown {FAMILY} scenario {scenario!r}; one of {', '.join(SCENARIOS)}")
    parts = set(scenario.split("+"))
    rps = s["rps"]
    length = requests / rps
    p = Plan(memory_mb=512.0 if "low-memory" in parts else s["memory_mb"], limit=1000)
    if "large-payload" in parts:
        p.items_median = 60.0
    if parts & {"burst-scaleout", "concurrency-limit"} and scenario != "slow-variant+concurrency-limit":
        p.bursts = ((0.3 * length, 0.04 * length, 8.0),)
    if "concurrency-limit" in parts:
        p.limit = max(4, round(rps * (0.175 if "slow-variant" in parts else 0.5)))
    demand = rps * 0.5 * (p.items_median * 1.15 + 1)
    if "dynamodb-throttle" in parts:
        p.rcu_per_s = demand * (5.0 if "burst-scaleout" in parts else 1.35)
    p.slow_variant = "slow-variant" in parts
    p.bad_subnet = 1 if "cross-az" in parts else None
    p.heavy_share = 0.3 if "gc-alloc" in parts else 0.0
    return p


@lru_cache(maxsize=6)
def _run(scenario: str, requests: int, seed: int, opts: tuple[tuple[str, Any], ...]) -> Run:
    s = {**setup(seed), **dict(opts)}
    return simulate(plan(scenario, requests, s), s, requests, seed)


def generate(scenario: str, requests: int, seed: int, **opts: Any) -> TraceTable:
    key = tuple(sorted(opts.items()))
    run = _run(scenario, requests, seed, key)
    _LAST[(scenario, seed)] = (requests, key)
    return emit(TraceTable(seed, 0x1A4B), run, {**setup(seed), **opts}, seed)


def truth(scenario: str, seed: int) -> tuple[Cause, ...]:
    s = setup(seed)
    plan(scenario, DEFAULT_REQUESTS, s)  # refuses an unknown scenario
    parts = set(scenario.split("+"))
    if scenario == "steady":
        return ()
    requests, key = _LAST.get((scenario, seed), (DEFAULT_REQUESTS, ()))
    run = _run(scenario, requests, seed, key)

    def names(ks: list[int]) -> tuple[str, ...]:
        return tuple(env_identity(seed, k, s["identity"]) for k in ks)

    every = names([e.k for e in run.envs if e.served])
    sagemaker = name_of(s, "sagemaker")
    causes = {
        "burst-scaleout": Cause("cold_start", "ingress",
                                "Initialization" if s["coldstart"] == "init_span" else FUNCTION, FUNCTION,
                                names(run.burst_envs)),
        "concurrency-limit": Cause("queueing", "queue", FUNCTION, FUNCTION, every,
                                   side=("cold_start", "timeout_retry")),
        "dynamodb-throttle": Cause("slow_dependency", "feature_hydration", name_of(s, "dynamodb"), FUNCTION,
                                   every, side=("timeout_retry",)),
        "slow-variant": (Cause("slow_dependency", "model_forward", "xgboost.predict", MODEL,
                               tuple(instance_host(seed, k) for k, (v, _) in enumerate(run.instances)
                                     if v == "variant-b"), side=("queueing",))
                         if s["model_traced"] else
                         Cause("slow_dependency", "model_forward", sagemaker, FUNCTION, every,
                               side=("queueing",))),
        "large-payload": Cause("large_payload", "downstream", sagemaker, FUNCTION, every),
        "low-memory": Cause("compute_bound", "preprocessing", "build_features", FUNCTION, every,
                            accept=("cpu_throttling",)),
        "cross-az": Cause("network", "downstream", sagemaker, FUNCTION,
                          names([e.k for e in run.envs if e.served and e.subnet == 1])),
        "gc-alloc": Cause("gc_pause", "preprocessing", "build_features", FUNCTION, every),
    }
    return tuple(causes[p] for p in SINGLE if p in parts)
