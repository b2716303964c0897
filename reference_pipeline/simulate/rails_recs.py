"""Blind family `rails-recs`: a Ruby on Rails monolith serving product recommendations.

Shape: `ingress-nginx` (proxy_pass to Puma; it stamps `X-Request-Start: t=<msec>`) -> `recs-web`
(Rails 7.1 on Ruby 3.3, Puma in clustered mode: 2-3 pods, each W worker processes x T threads) serving
`GET /recs/:user_id` (70 %), `GET /products/:id` and `GET /api/v1/catalog`. A recommendations request
loads the user (ActiveRecord on PostgreSQL), asks Elasticsearch for 200 candidates, scores them over
gRPC on `recs-model` (Python, ONNX Runtime, its own pods: SERVER span + `onnxruntime.InferenceSession.run`),
loads the top 8-48 items' products and prices (`recs.items_count` on the root), and renders a JSON page
whose product cards are fragment-cached in Memcached (dalli `get_multi`; misses are rendered and written
back with `set_multi`). Elasticsearch and PostgreSQL are not traced (client spans only).

Runtime physics (rails_recs_puma.py): a request waits in the pod's socket backlog until a thread is
free; only one thread of a worker process runs Ruby at a time (the GVL: I/O releases it, a resumed
thread waits for it, a holder yields after a 100 ms slice); GC pauses stop every thread of one process;
the connection a request leases at its first query is held until the request ends (ActiveRecord's
per-thread lease); a restarted worker has a new pid, compiles its templates on first render, opens its
connections and runs its Ruby slower for its first requests. Healthy noise: minor GCs (1.5-5 ms every
0.4-1.6 s per process), majors every 12-30 s (35-80 ms), ~5 % fragment misses, 1 % slow Elasticsearch,
Memcached and model calls, jitter everywhere.

Conventions by seed (mod 3): 0: OTLP/JSON, host.name + process.pid, old semconv (`db.statement`,
`http.method`; pg spans `SELECT recs_production`), roots `Controller#action`, nginx not traced,
`request.queue_time_ms` on the root, GC events, ActiveSupport cache spans with hit counts,
elasticsearch-ruby's `search` spans; 3 pods x 3 workers x 5 threads, 150 req/s.
1: Jaeger, `service.instance.id`, new semconv (`db.query.text`, `http.request.method`; `SELECT products`),
roots `GET /recs/:user_id`, nginx traced (`@puma` SERVER span, the trace root), no queue attribute, no
GC events, no cache hit counts; 2 pods x 3 x 5, 130 req/s. 2: Zipkin v2 (the instance is the pod's
ip:3000, shared by its workers), old semconv, Net::HTTP's `HTTP POST` for Elasticsearch, nginx traced,
`request.queue_time_us`, GC annotations; 2 pods x 4 x 4, 140 req/s. GC events (`ruby.gc.major` /
`ruby.gc.minor`, `ruby.gc.pause_ms`) go on every root span in flight on the paused process.

Mechanisms and truth (instances: the worker labels of rails_recs_spans.instance):
- `puma-backlog`: a push campaign, a burst at 1.5x the fleet's capacity for a fifth of the run: every
  thread busy, requests wait in the backlog (queue time grows with arrivals; Rails spans themselves
  stretch only a little, from GVL sharing). queueing, stage queue, the recs root.
- `gvl-contention`: partners' catalog exports (per_page=2000, ~0.4 s of to_json each, 0.4/s per worker)
  share the workers; recommendation threads on the same process finish their I/O but wait up to a slice
  for the GVL, so their spans stretch after the I/O returns. lock_contention (accept compute_bound:
  without GVL instrumentation the stretched spans look like a CPU-starved process), side queueing.
- `gc-leak`: the canary pod's workers leak (a class-level memo): major GCs every 0.6-1.2 s whose pauses
  grow with the heap (0.3 ms per MB: 55 -> ~470 ms). gc_pause on the canary pod's workers, side queueing.
- `pool-exhaustion`: `pool: 2` under 4-5 threads (database.yml not raised with RAILS_MAX_THREADS) while
  the products query is slow (+100 ms: autovacuum on products) from 30 % to 70 % of the run: threads
  wait for a connection before their first query (no span for the wait). lock_contention at the users
  query, side slow_dependency, queueing.
- `cache-evictions`: a deploy grew the product card 5x under new keys: the new items live in a slab
  class with 800 slots (9500 before), the LRU evicts, about half the cards are re-rendered (2.5 ms of
  Ruby each) and written back (`set_multi`). cache_miss at the render span (side compute_bound).
- `slow-shard`: a replica of one products shard on a hot node: the 45 % of searches routed to it wait
  ~85 ms for it. slow_dependency at the Elasticsearch span (Elasticsearch is not traced).
- `n-plus-one`: `includes(:price)` dropped: one prices query per item; DB time grows with
  `recs.items_count`. large_payload at the prices query.
- `worker-restarts`: the worker killer's RAM limit is below the fleet's RSS: every worker is restarted
  once (one per pod per 2 s check), its replacement boots for 2.5 s and serves cold (Ruby 4.5x slower
  at first, decaying; templates compiled, connections opened on first use). cold_start on the new
  workers, side queueing.
- `dns-timeout`: on one pod, ~1.8 % x pods of the per-request lookups of recs-model (a new stub per
  request) lose a reply (the conntrack A/AAAA race) and wait the resolver's 5 s timeout, then succeed;
  the model server is fast. network at the gRPC call; the threads it holds for 5 s back up that pod's
  socket backlog (side queueing).
- Two causes: `gc-leak+worker-killer` (the killer restarts the leaking workers: gc_pause, and cold_start
  on their replacements), `puma-backlog+slow-shard`, `cache-evictions+n-plus-one`.
"""

from __future__ import annotations

import random
from typing import Any

from reference_pipeline.simulate.rails_recs_flow import PAGE_SIZES, Env, FragmentCache, catalog, product, recs
from reference_pipeline.simulate.rails_recs_puma import Engine, Flow, Puma, Request, Worker
from reference_pipeline.simulate.rails_recs_spans import (
    MODEL_RPC,
    RENDER,
    ROOTS,
    SERVICE,
    Writer,
    db_span_name,
    es_span_name,
    instance,
)
from reference_pipeline.simulate.trace_table import (
    NS_PER_MS,
    NS_PER_S,
    Cause,
    Stalls,
    TraceTable,
    merge_intervals,
    poisson_arrivals,
    random_pauses,
)

FAMILY = "rails-recs"
SCENARIOS = (
    "steady",
    "puma-backlog",
    "gvl-contention",
    "gc-leak",
    "pool-exhaustion",
    "cache-evictions",
    "slow-shard",
    "n-plus-one",
    "worker-restarts",
    "dns-timeout",
    "gc-leak+worker-killer",
    "puma-backlog+slow-shard",
    "cache-evictions+n-plus-one",
)
_SETUPS = (
    {
        "fmt": "otlp-json",
        "identity": "process",
        "semconv": "old",
        "nginx": False,
        "naming": "controller",
        "queue_attr": "request.queue_time_ms",
        "gc_events": True,
        "cache_attrs": True,
        "es_native": True,
        "pods": 3,
        "workers": 3,
        "threads": 5,
        "rps": 150.0,
        "model_pods": 2,
    },
    {
        "fmt": "jaeger",
        "identity": "instance_id",
        "semconv": "new",
        "nginx": True,
        "naming": "route",
        "queue_attr": None,
        "gc_events": False,
        "cache_attrs": False,
        "es_native": True,
        "pods": 2,
        "workers": 3,
        "threads": 5,
        "rps": 130.0,
        "model_pods": 3,
    },
    {
        "fmt": "zipkin",
        "identity": "endpoint",
        "semconv": "old",
        "nginx": True,
        "naming": "controller",
        "queue_attr": "request.queue_time_us",
        "gc_events": True,
        "cache_attrs": True,
        "es_native": False,
        "pods": 2,
        "workers": 4,
        "threads": 4,
        "rps": 140.0,
        "model_pods": 2,
    },
)
CANARY, DNS_POD = 0, 1
BOOT_S = 2.5  # a replacement worker loads the app (no preload_app)
KILLER_EVERY_S = 2.0  # puma_worker_killer's frequency


def setup(seed: int) -> dict[str, Any]:
    return dict(_SETUPS[seed % 3])


def _labels(seed: int, pods: range | list[int], gen: int) -> tuple[str, ...]:
    s = setup(seed)
    out = [instance(seed, s["identity"], p, k, gen) for p in pods for k in range(s["workers"])]
    return tuple(dict.fromkeys(out))


def truth(scenario: str, seed: int) -> tuple[Cause, ...]:
    s = setup(seed)
    if scenario not in SCENARIOS:
        raise ValueError(f"unknown {FAMILY} scenario {scenario!r}; one of {', '.join(SCENARIOS)}")
    root, fleet = ROOTS[s["naming"]]["recs"], _labels(seed, range(s["pods"]), 0)
    causes = {
        "puma-backlog": Cause("queueing", "queue", root, SERVICE, fleet),
        "gvl-contention": Cause(
            "lock_contention", None, root, SERVICE, fleet, accept=("compute_bound",), side=("queueing",)
        ),
        "gc-leak": Cause("gc_pause", None, root, SERVICE, _labels(seed, [CANARY], 0), side=("queueing",)),
        "pool-exhaustion": Cause(
            "lock_contention",
            "feature_hydration",
            db_span_name(s["semconv"], "users"),
            SERVICE,
            fleet,
            side=("slow_dependency", "queueing"),
        ),
        "cache-evictions": Cause(
            "cache_miss", "serialization", RENDER, SERVICE, fleet, side=("compute_bound",)
        ),
        "slow-shard": Cause("slow_dependency", "downstream", es_span_name(s["es_native"]), SERVICE, fleet),
        "n-plus-one": Cause(
            "large_payload", "feature_hydration", db_span_name(s["semconv"], "prices"), SERVICE, fleet
        ),
        "worker-restarts": Cause(
            "cold_start", None, root, SERVICE, _labels(seed, range(s["pods"]), 1), side=("queueing",)
        ),
        "worker-killer": Cause(
            "cold_start", None, root, SERVICE, _labels(seed, [CANARY], 1), side=("queueing",)
        ),
        "dns-timeout": Cause(
            "network", "downstream", MODEL_RPC, SERVICE, _labels(seed, [DNS_POD], 0), side=("queueing",)
        ),
    }
    return tuple(causes[part] for part in scenario.split("+") if part != "steady")


def _gc(
    seed: int,
    parts: frozenset[str],
    pod: int,
    slot: int,
    gen: int,
    start: float,
    horizon: float,
    run_ns: float,
) -> list[tuple[float, float, bool]]:
    """A process's GC pauses from its start: minor ones, rare majors, or (leaking) frequent majors whose
    pause grows with the heap (0.3 ms per MB, 180 MB at boot)."""
    r = random.Random(f"rails-recs-gc/{seed}/{pod}/{slot}/{gen}")
    minor = [
        (start + a, start + b, False) for a, b in random_pauses(r, horizon - start, (0.4, 1.6), (1.5, 5.0))
    ]
    if "gc-leak" in parts and pod == CANARY:
        rate = 1400.0 / (run_ns / NS_PER_S) * r.uniform(0.85, 1.15)  # MB per s
        major, t = [], start + r.uniform(0.3, 1.2) * NS_PER_S
        while t < horizon:
            heap = 180.0 + rate * (t - start) / NS_PER_S
            pause = 0.3 * heap * r.uniform(0.85, 1.15) * NS_PER_MS
            major.append((t, t + pause, True))
            t += pause + r.uniform(0.6, 1.2) * NS_PER_S
    else:
        major = [
            (start + a, start + b, True)
            for a, b in random_pauses(r, horizon - start, (12.0, 30.0), (35.0, 80.0))
        ]
    return sorted(minor + major)


def _kills(
    seed: int, parts: frozenset[str], s: dict[str, Any], run_ns: float
) -> list[tuple[float, int, int]]:
    """(time, pod, slot) of the worker killer's SIGTERMs: it checks every KILLER_EVERY_S and kills the
    largest worker over the limit, one per pod per check."""
    r = random.Random(f"rails-recs-killer/{seed}")
    over: list[tuple[float, int, int]] = []
    if "worker-restarts" in parts:
        for p in range(s["pods"]):
            for k in range(s["workers"]):
                over.append(
                    (
                        run_ns
                        * (0.08 + 0.4 * (k + 0.5 * p / s["pods"]) / s["workers"])
                        * r.uniform(0.95, 1.05),
                        p,
                        k,
                    )
                )
    if "worker-killer" in parts:
        for k in range(s["workers"]):
            over.append((run_ns * r.uniform(0.2, 0.32), CANARY, k))
    tick = KILLER_EVERY_S * NS_PER_S
    taken: set[tuple[int, float]] = set()
    out = []
    for t, p, k in sorted(over):
        check = (t // tick + 1) * tick
        while (p, check) in taken:
            check += tick
        taken.add((p, check))
        out.append((check, p, k))
    return out


def generate(scenario: str, requests: int, seed: int, **opts: Any) -> TraceTable:
    truth(scenario, seed)
    s = {**setup(seed), **opts}
    parts = frozenset(scenario.split("+"))
    rng = random.Random(seed * 1_000_003 + 17)
    run_ns = requests / s["rps"] * NS_PER_S
    # a push campaign at 1.5x what the fleet serves (a worker runs ~90 recommendations/s of Ruby)
    surge = 1.5 * 90.0 * s["workers"] * s["pods"] / s["rps"]
    bursts = ((0.35 * run_ns / NS_PER_S, 0.2 * run_ns / NS_PER_S, surge),) if "puma-backlog" in parts else ()
    arrivals = poisson_arrivals(rng, s["rps"], requests, bursts)
    horizon = arrivals[-1] + 30 * NS_PER_S
    evicting = "cache-evictions" in parts
    env = Env(
        rng,
        parts,
        5.0 * NS_PER_S,
        FragmentCache(800 if evicting else 9500),
        (0.3 * run_ns, 0.7 * run_ns) if "pool-exhaustion" in parts else (0.0, 0.0),
        DNS_POD if "dns-timeout" in parts else -1,
        0.018 * s["pods"],  # ~1.25 % of all requests (the recommendations' 70 %)
        s["model_pods"],
        7.5 if evicting else 1.5,
    )
    if not evicting:
        env.warm()
    pool = 2 if "pool-exhaustion" in parts else s["threads"]

    def spawn(pod: int, slot: int, gen: int, start: float) -> Worker:
        pauses = _gc(seed, parts, pod, slot, gen, start, horizon, run_ns)
        stalls = Stalls(merge_intervals([(a, b) for a, b, _ in pauses]))
        worker = Worker(pod, slot, gen, s["threads"], pool, stalls, pauses, start, cold=gen > 0)
        if gen == 0:  # serving for hours: every template compiled
            worker.compiled.update(("recommendations/index", "products/_card", "products/show"))
        return worker

    flows = {"recs": recs, "product": product, "catalog": catalog}

    def flow(req: Request, w: Worker) -> Flow:
        return flows[req.kind](env, req, w)

    engine = Engine()
    puma = Puma(engine, rng, s["pods"], s["workers"], spawn, flow, BOOT_S * NS_PER_S)
    export = 0.4 * s["pods"] * s["workers"] / s["rps"] if "gvl-contention" in parts else 0.0
    reqs = []
    for i, t in enumerate(arrivals):
        u = rng.random()
        if u < export:
            kind, params = "catalog", {"per_page": 2000}
        elif u < export + 0.03:
            kind, params = "catalog", {"per_page": rng.choice((50, 100))}
        elif u < export + 0.3:
            kind, params = "product", {}
        else:
            kind, params = "recs", {"items": rng.choice(PAGE_SIZES)}
        params["user"] = rng.randrange(1, 2_000_000)
        req = Request(i, kind, t, i % s["pods"], params)
        reqs.append(req)
        engine.at(t, puma.arrive, req)
    for t, p, k in _kills(seed, parts, s, run_ns):
        engine.at(t, puma.kill, p, k)
    engine.run()
    table = TraceTable(seed, 0x5A17)
    writer = Writer(table, s, seed)
    for req in reqs:
        assert req.worker is not None and req.spans[0][3] > 0, (scenario, req.index)
        writer.request(req, req.worker.pauses)
    return table
