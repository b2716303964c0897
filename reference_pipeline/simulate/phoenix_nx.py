"""Blind family `phoenix-nx`: an Elixir/Phoenix recommendation API on the BEAM, scoring with Nx.Serving.

Shape: `recs-api` (Phoenix on Bandit or Cowboy, one BEAM VM per pod, 3-5 pods, schedulers = cores)
serves `GET /api/recs/:user_id` (the SERVER span opentelemetry_phoenix names after the route, with
`phoenix.plug` / `phoenix.action`). Per request, in order:

1. the plugs (parsers, a JWT auth plug), then `RecsApi.RateLimiter.check`: a `GenServer.call` to ONE
   rate limiter registered with `:global` on node 0; calls from the other nodes cross distributed
   Erlang (~0.3 ms each way). One process, one mailbox: calls are served one at a time.
2. `RecsApi.FeatureFlags.variant`: a `GenServer.call` to the node's own flag server, a process with
   its own heap and its own garbage collections (no stop-the-world: its pauses stall it and its callers,
   nothing else on the node).
3. two `Task.async`s at once: `recs_api.repo.query:candidates` (opentelemetry_ecto: a CLIENT span that
   starts when the checkout is asked, `db.system=postgresql`; it covers the pool queue, the query and
   the decode) through the node's DBConnection pool (pool_size 8-10, queue_target 50 ms /
   queue_interval 1 s: after an interval whose every checkout waited over the target, checkouts waiting
   over 100 ms are dropped with a DBConnection.ConnectionError and the request is a 500), beside the
   node's untraced Oban job slots that hold connections for their transactions; and
   `RecsApi.Features.fetch`: Cachex per node (a hit in ~15 us; a miss calls the feature service over
   Finch (`HTTP GET`), whose sync workers serve misses first come first served, then `Cachex.put` with
   a 10 min TTL).
4. `Nx.Serving.batched_run` on the node's `RecsApi.Ranker` serving (EXLA): a request's candidate rows
   fill the open batch; a batch runs padded to `batch_size` rows when full or `batch_timeout` after it
   opened (it keeps filling while every partition is busy), one batch at a time per partition (one on
   CPU nodes, one per GPU on GPU nodes); a request bigger than the room left spills into the next batch.
   Seeds 0 and 2 trace each batch run (`Nx.Serving.execute`).
5. `GET /v2/prices` (Req over Finch, opentelemetry_req) to the Go `pricing-svc`: `receive_timeout`
   150-250 ms; a timed-out attempt ends at the timeout in error (`Mint.TransportError` timeout) and
   Req's retry step waits 50 ms * 2^n before the next (2 retries); the server finishes the abandoned
   call (its SERVER span runs on).
6. `RecsWeb.RecsJSON.render`: the view and Jason encode every candidate (~1.1 KB each, nested price and
   explanation maps: ~80 us each): time grows with the list.

Healthy noise: the flag server's minor collections (0.2-1.5 ms every 1-3 s), 3.5 % cache misses,
Oban jobs holding 2 connections now and then, an occasional slow query, a few slow pricing calls,
Poisson arrivals whose rate swings +-20 % over the run.

Conventions by seed (seed % 3):
- 0: OTLP/JSON lines; the instance is `service.instance.id` = the BEAM node name (recs_api@10.42.x.y);
  new semconv (http.request.method, url.path, db.query.text, http.request.resend_count); Bandit; all of
  Ecto's *_time_microseconds; batches traced; `cache.hit`; feature service traced.
- 1: Jaeger JSON; the instance is `k8s.pod.name`; old semconv (http.method, http.target, db.statement);
  Cowboy; only `total_time_microseconds`; batches not traced; `cachex.result` ok / commit; the feature
  service not traced (only the Finch CLIENT span).
- 2: Zipkin v2; the instance is the endpoint ip:port; old semconv; Cowboy; all Ecto times; GPU nodes:
  two serving partitions; batches traced; `cache.hit`; feature service traced.
No garbage collection is reported on any seed.

Mechanisms (scenario: truth):
- `ecto-pool-exhaustion`: the embeddings Oban queue's concurrency was raised to the pool size; its
  jobs hold connections ~1 s each, so the candidates query waits for a connection others hold
  (queue_time) and, once the pool is dropping, fails at 100 ms. lock_contention at the Ecto span.
- `serving-burst`: a push notification multiplies traffic to 1.3x what a node's serving can run in
  full batches; the batches back up. queueing (stage queue: the wait before the batch runs) at
  `Nx.Serving.batched_run`.
- `hot-rate-limiter`: the limiter's per-call work grew (it re-sorts every tenant's bucket): the one
  process is 80-90 % busy (up to 108 % at the traffic's peak) and its mailbox wait grows with the
  arrival rate, on every node. lock_contention at `RecsApi.RateLimiter.check`, also accepting
  queueing: a single process's mailbox is at once a lock and a one-server queue, and the spans cannot
  tell the two apart.
- `flag-server-gc`: the flag server holds a 1.5 GB state; its major collections stall it 250-600 ms
  every 1-3 s; its callers wait and are released together; other processes run on. gc_pause at
  `RecsApi.FeatureFlags.variant`, also accepting lock_contention: with no GC reported, a pause of the
  one process every caller needs is in the spans exactly a lock held for the pause (queueing is a side).
- `cachex-ttl-stampede`: the 60 % of users warmed together by the nightly job expire together; misses
  (no fetch courier) stampede the feature service, whose workers back up. cache_miss at
  `RecsApi.Features.fetch` (slow_dependency and queueing are sides).
- `cold-node-deploy`: a rolling deploy replaces the last pod mid-run; the new node's Cachex is empty
  and EXLA compiles the model on each partition's first batch (seconds; the next batches are slower
  too) while its requests queue. cold_start at `Nx.Serving.batched_run` on the new pod (cache_miss
  and queueing sides).
- `pricing-timeout-retry`: pricing-svc slows (median 38 ms, 12 % of calls + Pareto 90 ms): attempts
  hit receive_timeout and are retried. timeout_retry at `GET /v2/prices` (slow_dependency a side).
- `candidate-growth`: the candidate LIMIT went from 200 to 2,000 and the response lists them all: the
  Ecto query and decode, the Nx rows (a long list spills over several padded batches) and the view +
  Jason encode grow with the list. large_payload at `RecsWeb.RecsJSON.render`, whose time follows
  `recs.items` most closely (+35-55 ms in the slowest 2 %); the fuller batches back up the serving too
  (+35-95 ms there: queueing and compute_bound are sides).
- pairs: `ecto-pool-exhaustion+pricing-timeout-retry`, `serving-burst+flag-server-gc`,
  `cachex-ttl-stampede+hot-rate-limiter`.
"""

from __future__ import annotations

import random
from typing import Any

from reference_pipeline.simulate.phoenix_nx_flow import simulate
from reference_pipeline.simulate.phoenix_nx_spans import (
    ECTO,
    FEATURES,
    FLAGS,
    PRICES,
    RATE_LIMIT,
    RENDER,
    SERVING,
    SpanWriter,
)
from reference_pipeline.simulate.trace_table import Cause, TraceTable

FAMILY = "phoenix-nx"
SERVICE = "recs-api"
SINGLE = ("ecto-pool-exhaustion", "serving-burst", "hot-rate-limiter", "flag-server-gc",
          "cachex-ttl-stampede", "cold-node-deploy", "pricing-timeout-retry", "candidate-growth")
PAIRS = ("ecto-pool-exhaustion+pricing-timeout-retry", "serving-burst+flag-server-gc",
         "cachex-ttl-stampede+hot-rate-limiter")
SCENARIOS = ("steady", *SINGLE, *PAIRS)
_SEEDS: tuple[dict[str, Any], ...] = (
    {"fmt": "otlp-json", "pods": 4, "rps": 180.0, "ident": "node", "semconv": "new", "server": "bandit",
     "ecto_times": "all", "cache_attr": "hit", "features_traced": True, "trace_batches": True,
     "batch_size": 256, "batch_timeout_ms": 10.0, "partitions": 1, "exec_ms": 14.0, "compile_ms": 2500.0,
     "price_timeout_ms": 200.0, "pool_size": 10, "feature_workers": 2, "feature_ms": 20.0,
     "limiter_busy": 0.8},
    {"fmt": "jaeger", "pods": 3, "rps": 150.0, "ident": "pod", "semconv": "old", "server": "cowboy",
     "ecto_times": "total", "cache_attr": "result", "features_traced": False, "trace_batches": False,
     "batch_size": 128, "batch_timeout_ms": 5.0, "partitions": 1, "exec_ms": 7.0, "compile_ms": 2000.0,
     "price_timeout_ms": 150.0, "pool_size": 8, "feature_workers": 2, "feature_ms": 26.0,
     "limiter_busy": 0.8},
    {"fmt": "zipkin", "pods": 5, "rps": 300.0, "ident": "endpoint", "semconv": "old", "server": "cowboy",
     "ecto_times": "all", "cache_attr": "hit", "features_traced": True, "trace_batches": True,
     "batch_size": 512, "batch_timeout_ms": 4.0, "partitions": 2, "exec_ms": 50.0, "compile_ms": 3500.0,
     "price_timeout_ms": 250.0, "pool_size": 10, "feature_workers": 3, "feature_ms": 23.0,
     "limiter_busy": 0.9},
)
_SUFFIXES = ("x2k4q", "9fzpl", "h7c1m", "qq3wd", "m81nv", "tz5rb", "w0kda")


def setup(seed: int) -> dict[str, Any]:
    return dict(_SEEDS[seed % 3])


def _ip(k: int) -> str:
    return f"10.42.{k % 4}.{17 + 11 * k}"


def instance_label(seed: int, k: int) -> str:
    """What the run says of api pod k's identity: the BEAM node name, the pod name, or ip:port."""
    ident = setup(seed)["ident"]
    if ident == "node":
        return f"recs_api@{_ip(k)}"
    if ident == "pod":
        return f"recs-api-5d8c7b9f4-{_SUFFIXES[k % len(_SUFFIXES)]}"
    return f"{_ip(k)}:4000"


def truth(scenario: str, seed: int) -> tuple[Cause, ...]:
    n = setup(seed)["pods"]
    pods = tuple(instance_label(seed, k) for k in range(n))
    causes = {
        "ecto-pool-exhaustion": Cause("lock_contention", "feature_hydration", ECTO, SERVICE, pods),
        "serving-burst": Cause("queueing", "queue", SERVING, SERVICE, pods),
        "hot-rate-limiter": Cause("lock_contention", "ingress", RATE_LIMIT, SERVICE, pods,
                                  accept=("queueing",)),
        "flag-server-gc": Cause("gc_pause", "feature_hydration", FLAGS, SERVICE, pods,
                                accept=("lock_contention",), side=("queueing",)),
        "cachex-ttl-stampede": Cause("cache_miss", "feature_hydration", FEATURES, SERVICE, pods,
                                     side=("slow_dependency", "queueing")),
        "cold-node-deploy": Cause("cold_start", "model_forward", SERVING, SERVICE, (instance_label(seed, n),),
                                  side=("cache_miss", "queueing")),
        "pricing-timeout-retry": Cause("timeout_retry", "downstream", PRICES, SERVICE, pods,
                                       side=("slow_dependency",)),
        "candidate-growth": Cause("large_payload", "serialization", RENDER, SERVICE, pods,
                                  side=("queueing", "compute_bound")),
    }
    if scenario == "steady":
        return ()
    if scenario not in SCENARIOS:
        raise ValueError(f"unknown {FAMILY} scenario {scenario!r}; one of {', '.join(SCENARIOS)}")
    return tuple(causes[part] for part in scenario.split("+"))


def _api_resource(table: TraceTable, seed: int, s: dict[str, Any], k: int) -> int:
    attrs: dict[str, Any] = {"service.name": SERVICE}
    if s["ident"] == "node":
        attrs.update({"service.instance.id": instance_label(seed, k), "service.namespace": "recs",
                      "process.runtime.name": "BEAM", "process.runtime.version": "26.2.5",
                      "process.runtime.description": "Erlang/OTP 26 erts-14.2.5",
                      "telemetry.sdk.language": "erlang", "service.version": "2.14.1"})
    elif s["ident"] == "pod":
        attrs.update({"k8s.pod.name": instance_label(seed, k), "k8s.namespace.name": "recs",
                      "k8s.node.name": f"ip-10-0-{k % 3}-{40 + k}.ec2.internal",
                      "telemetry.sdk.language": "erlang", "telemetry.sdk.version": "1.4.0"})
    return table.resource(attrs, _ip(k), 4000)


def generate(scenario: str, requests: int, seed: int, **opts: Any) -> TraceTable:
    truth(scenario, seed)
    s = {**setup(seed), **opts}
    rng = random.Random(seed * 1_000_033 + 18)
    reqs, facts = simulate(scenario, requests, s, rng)
    table = TraceTable(seed, 0xE11E)
    api = [_api_resource(table, seed, s, k) for k in range(facts["pods"])]
    features = None
    if s["features_traced"]:
        features = table.resource({"service.name": "feature-svc", "host.name": "feature-svc-0",
                                   "telemetry.sdk.language": "python"}, "10.43.0.12", 8000)
    pricing = [table.resource({"service.name": "pricing-svc", "host.name": f"pricing-svc-{j}",
                               "telemetry.sdk.language": "go"}, f"10.44.0.{20 + j}", 8080) for j in range(3)]
    writer = SpanWriter(table, s, api, features, pricing, f"recs_api@{_ip(0)}", rng)
    for r in reqs:
        writer.write(r)
    return table
