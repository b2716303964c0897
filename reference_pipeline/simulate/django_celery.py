"""Blind family `django-celery`: a credit-limit scoring endpoint in a Django monolith that scores on
Celery (django_celery_infra.py: the physics; django_celery_flow.py: one request; django_celery_spans.py:
the conventions).

Shape: `loan-origination` (a Java service) calls `POST /api/v1/customers/{id}/credit-limit` through an
AWS ALB (not traced) or HAProxy (traced: a SERVER span) in front of `credit-api`: gunicorn with sync
workers (N worker processes per pod, one request per worker at a time, one listen backlog per pod: a
request waits there until a worker of its pod is free; `--max-requests 500` recycles a worker, whose
replacement imports Django for ~1.4 s and warms its caches on its first request). Pods in two
availability zones; PostgreSQL, PgBouncer, Redis and RabbitMQ in zone a (a zone-b pod pays ~0.85 ms per
round trip instead of ~0.2). Per request, the Django view:

1. reads the customer's features from Redis (django-redis `GET`); a miss runs three ORM queries
   (psycopg `SELECT`s, time growing with the customer's transaction history), builds the frame
   (pandas, ~15 ms) and writes it back with `SETEX` (TTL 30 min). Seeds with manual spans wrap this in
   `credit.load_features` (`cache.hit`).
2. calls the bureau API over HTTPS with `requests` (a keep-alive connection per worker: TCP + TLS 1.2
   when it has none or it idled 4 s; read timeout 0.4 s, then one retry on a new connection).
3. `score.apply_async` (a PRODUCER span to RabbitMQ: serialising the feature vector, a publish with a
   confirm) and `AsyncResult.get(timeout=2, interval=0.05)`: a Redis `GET` of the result key every
   50 ms, so each wait is rounded up to the next poll (`score.wait` where manual spans are exported);
   past 2 s the view falls back to a rule-based limit.
4. writes the exposure in `transaction.atomic()`: `SELECT ... FOR UPDATE` on the customer's exposure
   row, a recompute `SELECT`, the policy (`credit.compute_limit`), `UPDATE`, `INSERT`, COMMIT. The row
   lock serialises concurrent requests for one customer (customers are Zipf-distributed). Through
   PgBouncer in transaction pooling: a transaction (or an autocommit statement) waits in PgBouncer for a
   server connection, inside its first statement's span.

`credit-worker`: Celery prefork children (2-3 pods x 3-5 children, zone a) behind RabbitMQ with a
prefetch multiplier of 4: each child has up to 4 reserved tasks written to it ahead (the pre -Ofair
scheduling), so a task waits behind whatever its child runs. `run/credit.tasks.score` (CONSUMER, its
child spans `model.load` / `features.build` / `xgboost.predict` where exported) loads the model on a
child's first task (~2.6 s) and runs a 400-tree XGBoost model; decoding and building the frame grow
with the payload (the feature vector).

CPython's cyclic GC in each gunicorn worker: a full (generation-2) collection runs when the objects
promoted since the last exceed 25 % of the long-lived heap and stops the worker for ~65 ms per million
objects (its request is stretched; requests behind it in the backlog wait).

Healthy noise: jitter everywhere; ~1.5 % feature-cache misses (customers outside the warmed set, keys
expiring); 0.8 % of statements hit a cold page or an autovacuum; 0.4 % slow bureau answers (the odd
timeout and retry); full collections every ~100 requests per worker (~20 ms); workers recycled at
--max-requests; bureau reconnects after an idle gap; 0.5 % slow predicts.

Conventions by seed (seed % 3):
- 0: OTLP/JSON; new semconv (`db.query.text`, `server.address`, `http.request.method`); the instance is
  the OTel operator's `service.instance.id` (credit.<pod>.<container>); ALB (no edge span); manual spans
  exported; the CONSUMER span starts its own trace with a link to the PRODUCER; full collections
  reported as `python.gc` span events on the Django span.
- 1: Jaeger JSON; old semconv (`db.statement`, `net.peer.name`, `http.method`); host.name +
  process.pid: every gunicorn worker and Celery child is its own instance (a recycled worker comes back
  as a new one); HAProxy traced; manual spans exported; CONSUMER parented to PRODUCER; no GC reported.
- 2: Zipkin v2; old semconv; instances are endpoints (ip:port per pod); ALB; no manual spans; CONSUMER
  parented; full collections as annotations on the Django span.

Mechanisms (scenario: truth):
- `gunicorn-backlog`: a burst of 1.5x the pods' worker capacity for 5 % of the run: requests wait in the
  listen backlog between the caller's (or HAProxy's) span start and the Django span's start: queueing,
  stage queue, the Django SERVER span.
- `pgbouncer-saturation`: an untraced `manage.py rebuild_exposures` job takes all but 2 of PgBouncer's
  server connections with back-to-back long transactions for the middle half of the run; every transaction
  waits for a server connection inside its first statement (the `SELECT ... FOR UPDATE`, or a miss's
  SELECTs): lock_contention (a pool others hold) at `SELECT`, stage postprocessing, accept queueing.
- `row-lock-contention`: a BNPL partner checks every cart item's limit at once: bursts of 4-14 concurrent
  requests for one customer (half the traffic); their `SELECT ... FOR UPDATE`s queue on the exposure row,
  each for the previous transactions' ~15 ms (recompute, velocity check, policy, UPDATE, INSERT, COMMIT):
  lock_contention at `SELECT`, stage postprocessing.
- `redis-ttl-expiry`: the nightly warm-up wrote 85 % of the warm keys in one batch with one TTL; they
  expire together at 25 % of the run (within 0.6 s) and every request for a new customer misses (hot keys
  stampede until the first SETEX): cache_miss at `credit.load_features` (no manual spans: the `SELECT`s),
  stage feature_hydration (side: queueing at PgBouncer).
- `celery-prefetch-hol`: celery beat's `rescore_portfolio` tasks (~1 s each, untraced producer) share the
  queue; score tasks prefetched to a child running one wait behind it though other children are idle:
  queueing at `run/credit.tasks.score`, stage queue, on credit-worker.
- `cold-celery-workers`: a deploy replaces the worker pods one by one (4 s apart) from 30 % of the run;
  each new child loads the model on its first task (seconds) while its prefetched tasks wait, and views
  time out at 2 s: cold_start at `run/credit.tasks.score`, stage model_forward, the new pods (side:
  queueing).
- `gc-gen2-leak`: a module-level memo keeps every response's objects (25 k objects a request): the heap
  grows with each worker's requests served (up to --max-requests) and full collections, rarer, stop it for
  100-500 ms: gc_pause at the Django span (stage None: the pause falls in whichever phase allocates), side
  queueing.
- `bureau-timeout-retry`: the bureau slows (median ~60 ms, 5 % of answers + a Pareto tail from 250 ms);
  attempts hit the 0.4 s read timeout and are retried on a new connection: timeout_retry at the bureau
  CLIENT span, stage downstream (side slow_dependency).
- `cross-az-loss`: 1.5 % of the round trips between zones lose a segment: TCP waits for the RTO (>= 200
  ms) on zone b's pods' Redis, PgBouncer and RabbitMQ calls: network at `GET` (their most frequent call),
  stage None, zone b's instances.
- `history-growth`: a new model version sends the customer's per-transaction history in the feature vector
  (~0.5 KB per transaction, median ~140 KB, `messaging.message.body.size`): serialising, publishing,
  decoding and building the frame grow with it: large_payload at `run/credit.tasks.score`, stage
  preprocessing (side: queueing on the children).
- pairs: `gc-gen2-leak+bureau-timeout-retry`, `redis-ttl-expiry+cross-az-loss` (the wave's misses make
  more round trips across the lossy link), `gunicorn-backlog+cold-celery-workers` (a deploy during a
  campaign's burst).

Truth instances: the instances the cause acts on as the store names them; on the host-pid seed, the
gunicorn worker processes (or Celery children) that exist from the start.
"""

from __future__ import annotations

import heapq
import random
from functools import cache
from typing import Any

from reference_pipeline.simulate import django_celery_spans as sp
from reference_pipeline.simulate.django_celery_flow import MAX_REQUESTS, World, consumer_only, request
from reference_pipeline.simulate.django_celery_infra import (
    CUSTOMERS,
    Cache,
    Celery,
    Net,
    Pod,
    Proc,
    ServerPool,
    Worker,
    zipf_weights,
)
from reference_pipeline.simulate.trace_table import NS_PER_S, Cause, TraceTable, lognormal_ms

FAMILY = "django-celery"
SINGLES = ("gunicorn-backlog", "pgbouncer-saturation", "row-lock-contention", "redis-ttl-expiry",
           "celery-prefetch-hol", "cold-celery-workers", "gc-gen2-leak", "bureau-timeout-retry",
           "cross-az-loss", "history-growth")
PAIRS = ("gc-gen2-leak+bureau-timeout-retry", "redis-ttl-expiry+cross-az-loss",
         "gunicorn-backlog+cold-celery-workers")
SCENARIOS = ("steady", *SINGLES, *PAIRS)
LEAK_MOBJ = 0.025
_SETUPS = (
    {"fmt": "otlp-json", "semconv": "new", "ident": "instance-id", "edge": "alb", "internals": True,
     "linked": True, "gc_events": True, "web_pods": 4, "workers": 8, "celery_pods": 2, "procs": 4,
     "rps": 120.0, "pool": 20, "left": 2},
    {"fmt": "jaeger", "semconv": "old", "ident": "host-pid", "edge": "haproxy", "internals": True,
     "linked": False, "gc_events": False, "web_pods": 3, "workers": 10, "celery_pods": 3, "procs": 3,
     "rps": 110.0, "pool": 16, "left": 2},
    {"fmt": "zipkin", "semconv": "old", "ident": "endpoint", "edge": "alb", "internals": False,
     "linked": False, "gc_events": True, "web_pods": 6, "workers": 6, "celery_pods": 2, "procs": 5,
     "rps": 140.0, "pool": 24, "left": 3},
)


def setup(seed: int) -> dict[str, Any]:
    return dict(_SETUPS[seed % 3])


def style(seed: int) -> sp.Style:
    s = setup(seed)
    return sp.Style(s["semconv"], s["ident"], s["edge"], s["internals"], s["linked"], s["gc_events"])


def _web_labels(seed: int, zone: int | None = None) -> tuple[str, ...]:
    s, st = setup(seed), style(seed)
    return tuple(dict.fromkeys(st.label(sp.WEB, k, sp.gunicorn_pid(w)) for k in range(s["web_pods"])
                               if zone is None or k % 2 == zone for w in range(s["workers"])))


def _worker_labels(seed: int, gen: int) -> tuple[str, ...]:
    s, st = setup(seed), style(seed)
    return tuple(dict.fromkeys(st.label(sp.WORKER, j, sp.celery_pid(c), gen) for j in range(s["celery_pods"])
                               for c in range(s["procs"])))


def truth(scenario: str, seed: int) -> tuple[Cause, ...]:
    if scenario not in SCENARIOS:
        raise ValueError(f"unknown {FAMILY} scenario {scenario!r}; one of {', '.join(SCENARIOS)}")
    st = style(seed)
    web, workers = _web_labels(seed), _worker_labels(seed, 0)
    run = f"run/{sp.SCORE}"
    causes = {
        "gunicorn-backlog": Cause("queueing", "queue", st.root, sp.WEB, web),
        "pgbouncer-saturation": Cause("lock_contention", "postprocessing", "SELECT", sp.WEB, web,
                                      accept=("queueing",)),
        "row-lock-contention": Cause("lock_contention", "postprocessing", "SELECT", sp.WEB, web),
        "redis-ttl-expiry": Cause("cache_miss", "feature_hydration",
                                  sp.LOAD_FEATURES if st.internals else "SELECT",
                                  sp.WEB, web, side=("queueing",)),
        "celery-prefetch-hol": Cause("queueing", "queue", run, sp.WORKER, workers),
        "cold-celery-workers": Cause("cold_start", "model_forward", run, sp.WORKER, _worker_labels(seed, 1),
                                     side=("queueing",)),
        "gc-gen2-leak": Cause("gc_pause", None, st.root, sp.WEB, web, side=("queueing",)),
        "bureau-timeout-retry": Cause("timeout_retry", "downstream", st.bureau, sp.WEB, web,
                                      side=("slow_dependency",)),
        "cross-az-loss": Cause("network", None, "GET", sp.WEB, _web_labels(seed, 1)),
        "history-growth": Cause("large_payload", "preprocessing", run, sp.WORKER, workers,
                                side=("queueing",)),
    }
    return tuple(causes[part] for part in scenario.split("+") if part != "steady")


@cache
def _customer_weights() -> list[float]:
    return zipf_weights(CUSTOMERS, 0.8)


def _arrivals(rng: random.Random, s: dict[str, Any], parts: set[str], n: int, capacity: float
              ) -> list[tuple[float, int]]:
    """(send time ns, customer) of the n requests: Poisson, a burst (gunicorn-backlog), and for
    row-lock-contention the partner's carts: 4-12 requests for one customer within a few ms."""
    weights = _customer_weights()
    run_s = n / s["rps"]
    burst = (0.35 * run_s, 0.05 * run_s, 1.5 * capacity / s["rps"]) if "gunicorn-backlog" in parts else None
    cart = 0.1 if "row-lock-contention" in parts else 0.0
    per_event = 1.0 + cart * 8.0
    out: list[tuple[float, int]] = []
    t = 0.0
    while len(out) < n:
        rate = s["rps"] / per_event
        if burst and burst[0] <= t < burst[0] + burst[1]:
            rate *= burst[2]
        t += rng.expovariate(rate)
        customer = rng.choices(range(len(weights)), cum_weights=weights)[0]
        if cart and rng.random() < cart:
            out += [(t + rng.uniform(0.0, 0.004), customer) for _ in range(rng.randint(4, 14))]
        else:
            out.append((t, customer))
    return sorted((a * NS_PER_S, c) for a, c in out[:n])


def _gunicorn(rng: random.Random, s: dict[str, Any], leak: float) -> list[Pod]:
    pods = []
    for k in range(s["web_pods"]):
        workers = []
        for w in range(s["workers"]):
            served = rng.randrange(MAX_REQUESTS)  # mid-life
            heap = 0.35 + leak * served
            workers.append(Worker(sp.gunicorn_pid(w), served, heap, rng.uniform(0.0, 0.25 * heap)))
        pods.append(Pod(k, k % 2, workers, [(0.0, w) for w in range(s["workers"])],
                        sp.gunicorn_pid(s["workers"]) + 1))
    return pods


def _procs(s: dict[str, Any], deploy_at: float | None) -> list[Proc]:
    out = []
    for j in range(s["celery_pods"]):
        retire = float("inf") if deploy_at is None else deploy_at + j * 4.0 * NS_PER_S
        for c in range(s["procs"]):
            out.append(Proc(j, sp.celery_pid(c), 0.0, retire, loaded=True))
            if deploy_at is not None:
                out.append(Proc(j, sp.celery_pid(c), retire, float("inf"), loaded=False, gen=1))
    return out


def generate(scenario: str, requests: int, seed: int, **opts: Any) -> TraceTable:
    truth(scenario, seed)
    s = {**setup(seed), **opts}
    parts = set(scenario.split("+")) - {"steady"}
    rng = random.Random(seed * 1_000_003 + 2121)
    table = TraceTable(seed, 0x21D)
    st = style(seed)
    run_ns = requests / s["rps"] * NS_PER_S
    capacity = s["web_pods"] * s["workers"] / 0.105  # requests/s the pods serve at ~105 ms each
    arrivals = _arrivals(rng, s, parts, requests, capacity)
    leak = LEAK_MOBJ if "gc-gen2-leak" in parts else 0.0
    wave = (0.25 * run_ns, 0.6 * NS_PER_S, 0.85) if "redis-ttl-expiry" in parts else None
    batch = (0.25 * run_ns, 0.75 * run_ns, s["left"]) if "pgbouncer-saturation" in parts else None
    deploy = 0.3 * run_ns if "cold-celery-workers" in parts else None
    world = World(st, sp.Resources(table, st), table, Net(loss=0.015 if "cross-az-loss" in parts else 0.0),
                  _gunicorn(rng, s, leak), ServerPool(s["pool"], batch), {},
                  Cache(1800 * NS_PER_S, wave=wave),
                  Celery(_procs(s, deploy), 4), leak, "bureau-timeout-retry" in parts,
                  "history-growth" in parts, st.edge == "haproxy")
    events: list[tuple[float, int, int]] = [(t, 0, k) for k, (t, _c) in enumerate(arrivals)]
    if "celery-prefetch-hol" in parts:
        procs = s["celery_pods"] * s["procs"]
        t = 0.15 * run_ns
        while t < 0.9 * run_ns:
            events.append((t, 2, 0))
            t += rng.expovariate(0.12 * procs) * NS_PER_S
    heapq.heapify(events)
    while events:
        t, kind, k = heapq.heappop(events)
        if kind == 0:
            request(world, rng, t, arrivals[k][1])
        else:
            consumer_only(world, rng, t, sp.RESCORE, lognormal_ms(rng, 1000.0, 0.35))
    return table
