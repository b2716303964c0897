"""Blind family `search-bff`: a Node.js product-search backend-for-frontend fanning out to
Elasticsearch, a personalisation service, a Python learning-to-rank re-ranker and memcached.

Shape: `search-bff` (Node 20, Express, 2-3 pods, each running 2-3 worker processes under the cluster
module; one event loop per process) serves `GET /api/search`: `normalizeQuery` (a manual span: the
query sanitiser's regexes), then in parallel the personalisation profile (`GET /v2/profile/{userId}`
on `personalization`, Go, through a keep-alive agent, client timeout 150 ms including the wait for a
socket, one retry, then a default profile) and the Elasticsearch `search` (the JS client's own CLIENT
span; the query goes to one copy of every shard and waits for the slowest, then the fetch phase), then
`POST /v1/rerank` on `ltr-reranker` (gunicorn, a fixed number of sync workers per pod; a request
waits in the listen backlog while they are busy; `build_features`, `lightgbm.predict`), then
`getMulti` per memcached node that owns a page key (ketama ring), a `catalog-db` query for the
misses, and `serializeResponse` (JSON.stringify on the loop, gzip on the libuv pool).

The event loop: every callback of a process (a span's start or end as Node records it) waits while
the loop is busy: V8 pauses (scavenges of 1-3 ms every few hundred ms, an occasional incremental
mark-compact finalisation), a request's long synchronous work (the sanitiser's regex; JSON.parse and
JSON.stringify of large bodies), all as process-wide stalls (trace_table.Stalls). A socket is given
back when its response callback runs, so loop stalls hold sockets too. (The model runs requests in
arrival order: a request's JSON.parse / stringify stall delays the requests generated after it, not
those generated before it that were still in flight; the scraper's regex stalls are laid out before
any request runs, so they stretch every request in flight.)

Conventions by seed (search_bff_spans.CONVENTIONS, seed % 3):
- 0: OTLP/JSON, new semconv, instances per process (`host.name` = pod + `process.pid`: label
  `pod:pid`), HTTP CLIENT spans, re-ranker and Elasticsearch (8.x APM tracing: the coordinating
  node's SERVER span, a span per shard query / fetch on the data node) traced, V8 GC reported as
  `gc` events (`v8js.gc.type` major / minor) on the root spans in flight.
- 1: Jaeger, old semconv, pod-level instances (`k8s.pod.name`), no HTTP CLIENT spans (the
  personalisation and re-ranker SERVER spans hang under the root), Elasticsearch untraced, no GC.
- 2: Zipkin v2, new semconv, instances as the pod's endpoint `ip:3000` (cluster workers share the
  port), HTTP CLIENT spans, re-ranker and Elasticsearch untraced, no GC.

Mechanisms (scenario: truth):
- `loop-block`: a scraper on one keep-alive connection (pinned to one worker process) sends long
  queries (300-1200 chars) at ~2/s whose sanitiser regex backtracks: 40-320 ms of synchronous CPU,
  growing exponentially with the length. Every other request on that process waits (their spans
  in flight stretch). The fix is the regex (or moving it off the loop): compute_bound at
  `normalizeQuery` (stage parsing) on that process; the others' wait is a side effect (queueing). The
  blocking span itself lasts the stall, so it is told apart from a GC pause: no `accept`. On seeds
  1 and 2 the instance is the pod (its processes are not told apart).
- `mark-compact`: a rollout paused halfway: the new release (on half the pods, rounded up) keeps a
  larger in-process facet cache; old space is near its limit and every process of those pods runs
  full mark-compacts of 120-350 ms every 0.8-2.5 s: gc_pause on those processes (side: queueing).
  Requests that arrive during a pause wait in the kernel's accept queue, before their SERVER span
  starts (Node starts it in the request callback): only the requests in flight show the pause.
- `slow-shard`: one Elasticsearch data node is in a long segment merge: shard copies on it answer 2.5-4x
  slower plus a heavy tail (adaptive replica selection steers only a third of reads away); the
  search waits for its slowest shard: slow_dependency at `products-es`, that node (stage downstream,
  span `search`).
- `rerank-burst`: a traffic burst (1.3x the re-ranker's capacity for 1.5 s): requests wait in the
  gunicorn listen backlog: queueing at `ltr-reranker` (every pod), the span where the wait shows: the
  re-rank CLIENT span (root on seed 1).
- `worker-recycle`: `max_requests=300` (+ jitter 100) was set (the running workers are at random
  counts: they were forked at different times): a worker exits, the new one boots (0.4-0.8 s, the pod
  one worker short) and loads the model on its first request (0.6-1.1 s), its next ~30 requests
  slower while its in-process feature cache fills (120 ms x 0.88^n): cold_start at `ltr-reranker`
  (span `lightgbm.predict`, the CLIENT span on seed 2 where it is untraced; side: queueing).
- `memcached-restart`: one memcached node restarts at a quarter of the run: its key range misses
  (popular keys come back first, the tail keeps missing) and the misses go to `catalog-db` in one
  query per request (32 connections; ~14 ms per missing product), its time growing with the missing
  ids: cache_miss at search-bff (stage feature_hydration, span the database query).
- `socket-pool`: a config change set the personalisation agent's `maxSockets` to 1 per process: callers
  wait inside the CLIENT span for a socket others hold: lock_contention at search-bff (every
  process; span: the personalisation CLIENT span, root on seed 1; side: timeout_retry, as a long
  wait can reach the deadline).
- `pers-timeout`: personalisation slows (median 70 ms, 12 % of calls +Pareto 90 ms): calls past 150 ms
  are aborted (error, `TimeoutError`) and retried once: timeout_retry at search-bff (span the
  CLIENT span; on seed 1 the two SERVER spans; side: slow_dependency).
- `large-pages`: a product change asks 96 items with variants per page (instead of 24) for the new
  app version (40 % of requests): a bigger ES body (fetch, transfer, JSON.parse on the loop), 4x the
  re-rank candidates, a bigger response to stringify and gzip: large_payload at search-bff (stage
  serialization, span `serializeResponse`, whose `http.response.body.size` carries the size; side:
  queueing, as the bigger re-rank holds the gunicorn workers longer).
- Two causes: `mark-compact+slow-shard`, `rerank-burst+worker-recycle`,
  `memcached-restart+loop-block`.

Healthy noise: scavenges, rare mark-compact finalisations, 3 % evictions in memcached (their database
reads), 1.2 % slow shard reads (an ES young GC or refresh), personalisation's heavy-ish tail (2 % of
calls +30-150 ms: a few reach the timeout and retry), some waiting for a gunicorn worker (about half
busy), log-normal jitter everywhere. Arrivals are open-loop Poisson; the page's products are drawn
from a long-tailed popularity (a search result page reaches far into the catalogue).
"""

from __future__ import annotations

import random
from typing import Any

from reference_pipeline.simulate import search_bff_flow as flow
from reference_pipeline.simulate.search_bff_spans import (
    BFF,
    ES,
    ES_CLIENT,
    NORMALIZE,
    PERS_SERVER,
    RERANK,
    ROOT,
    SERIALIZE,
    backend_label,
    bff_label,
    conventions,
)
from reference_pipeline.simulate.trace_table import Cause, TraceTable

FAMILY = "search-bff"
SINGLE = ("loop-block", "mark-compact", "slow-shard", "rerank-burst", "worker-recycle", "memcached-restart",
          "socket-pool", "pers-timeout", "large-pages")
PAIRS = ("mark-compact+slow-shard", "rerank-burst+worker-recycle", "memcached-restart+loop-block")
SCENARIOS = ("steady", *SINGLE, *PAIRS)
# seed % 3 -> (BFF pods, processes per pod, requests/s, re-ranker pods, workers, ES nodes, shards,
#               memcached nodes, personalisation pods)
SIZES = ((3, 2, 180.0, 3, 3, 4, 6, 4, 3), (2, 2, 160.0, 4, 2, 3, 5, 3, 2), (3, 3, 200.0, 3, 4, 5, 10, 5, 3))


def setup(seed: int) -> dict[str, Any]:
    pods, procs, rps, rr_pods, rr_workers, es_nodes, shards, mc_nodes, pers = SIZES[seed % 3]
    c = conventions(seed)
    return {"fmt": c.fmt, "pods": pods, "procs": procs, "rps": rps, "rerank_pods": rr_pods,
            "rerank_workers": rr_workers, "es_nodes": es_nodes, "shards": shards, "memcached_nodes": mc_nodes,
            "pers_pods": pers, "semconv": c.semconv, "identity": c.identity, "client_spans": c.client_spans,
            "reranker_traced": c.reranker_traced, "es_traced": c.es_traced, "gc_events": c.gc_events}


def victims(seed: int) -> dict[str, Any]:
    """Where the single-process and single-node causes act: the blocked process, the canary pod, the
    merging Elasticsearch node."""
    s = setup(seed)
    canary = tuple(range(s["pods"] - (s["pods"] + 1) // 2, s["pods"]))
    return {"blocked": (seed % s["pods"], (seed + 1) % s["procs"]), "canary": canary,
            "slow_node": (seed + 1) % s["es_nodes"]}


def truth(scenario: str, seed: int) -> tuple[Cause, ...]:
    if scenario not in SCENARIOS:
        raise ValueError(f"unknown {FAMILY} scenario {scenario!r}; one of {', '.join(SCENARIOS)}")
    s, v, c = setup(seed), victims(seed), conventions(seed)
    every = tuple(dict.fromkeys(bff_label(c, p, j) for p in range(s["pods"]) for j in range(s["procs"])))
    canary = tuple(dict.fromkeys(bff_label(c, p, j) for p in v["canary"] for j in range(s["procs"])))
    rerankers = tuple(backend_label(c, RERANK, k) for k in range(s["rerank_pods"]))
    pers_client = c.client_name("GET") if c.client_spans else ROOT
    pers_span = c.client_name("GET") if c.client_spans else PERS_SERVER
    rerank_client = c.client_name("POST") if c.client_spans else ROOT
    causes = {
        "loop-block": Cause("compute_bound", "parsing", NORMALIZE, BFF, (bff_label(c, *v["blocked"]),),
                            side=("queueing",)),
        "mark-compact": Cause("gc_pause", None, ROOT, BFF, canary, side=("queueing",)),
        "slow-shard": Cause("slow_dependency", "downstream", ES_CLIENT, ES,
                            (backend_label(c, ES, v["slow_node"]),)),
        "rerank-burst": Cause("queueing", "queue", rerank_client, RERANK, rerankers),
        "worker-recycle": Cause("cold_start", "model_forward",
                                "lightgbm.predict" if c.reranker_traced else rerank_client, RERANK, rerankers,
                                side=("queueing",)),
        "memcached-restart": Cause("cache_miss", "feature_hydration", c.db_span, BFF, every),
        "socket-pool": Cause("lock_contention", "downstream", pers_client, BFF, every,
                             side=("timeout_retry",)),
        "pers-timeout": Cause("timeout_retry", "downstream", pers_span, BFF, every,
                              side=("slow_dependency",)),
        "large-pages": Cause("large_payload", "serialization", SERIALIZE, BFF, every, side=("queueing",)),
    }
    return tuple(causes[part] for part in scenario.split("+") if part != "steady")


def generate(scenario: str, requests: int, seed: int, **opts: Any) -> TraceTable:
    truth(scenario, seed)
    s = {**setup(seed), **opts}
    return flow.run(set(scenario.split("+")), requests, seed, s, victims(seed),
                    random.Random(seed * 1_000_003 + 1313), TraceTable(seed, 0x5EA7C4))
