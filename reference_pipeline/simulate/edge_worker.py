"""Blind family `edge-worker`: real-time personalisation at the edge, "which 8 products to show this
user", answered inside a page render by a JavaScript worker in 12 points of presence (PoPs) worldwide
(edge_worker_net.py: the physics; edge_worker_flow.py: one request; edge_worker_spans.py: the
conventions).

Shape: the storefront's single-page app (browser RUM on some seeds: a route change > `fetch`) asks
`GET /api/personalize` at the nearest PoP; `edge-personalize` runs there in a V8 isolate (one per
slot of the PoP, 1-3 slots by its traffic). An isolate is created on the first request after its
predecessor was evicted (idle for a while, or under memory pressure): the script's parse and compile
(~12 ms for the steady bundle) runs before any request on it; requests arriving meanwhile wait. One
JavaScript thread per isolate: every callback (a parse, the code after an `await`, building the ranker's
payload, merging its answer) runs to completion, and a ready callback waits while another request's
runs. Each request's CPU time is limited to 50 ms: past it the runtime kills the invocation (503) and
the page's fetch wrapper backs off (~200 ms) and retries once with `lite=1` (at most 200 candidates).

Per request: the user's session object (`SessionObject`, one single-threaded actor per user id in one
location worldwide, normally the one nearest the user; it serializes its requests: its input gate stays
closed across each storage operation; `GET /session` first, `POST /view` at the end, awaited, whose write
the next page dedupes against; both cost more the longer the stored history) and, for a signed-in user,
the profile from the KV namespace PROFILES, in parallel with the first; the profile is raced against a 40
ms budget (past it the page is personalised by the anonymous segment and the read completes in the
background, filling the PoP's cache). Then the candidate set of the product's category in the user's
market (a PoP serves three) from CANDIDATES (needed: awaited), built into the ranker's payload (CPU per
candidate), one `POST /v1/rank` to `ranker` (a Python service with an ONNX gradient-boosted model, hosts
in us-east4 and europe-west4 behind a global load balancer that sends each PoP to its nearest region)
over the isolate's own HTTP/2 connection (opened on the isolate's first call: TCP + TLS 1.3, two round
trips to the region), and a merge. On a 5xx the worker reads the popularity list from POPULAR instead.

KV: each PoP caches what it read for 60 s from the read that filled it; a miss goes to the central store
in us-east over the long-haul network (60-250 ms by PoP), whose read slots are shared by every PoP.

Healthy noise: jitter everywhere; profile misses at session starts and after 60 s; candidate keys
expiring at staggered times (small PoPs miss more); 0.5 % of users travel (their object is on
another continent); idle isolates evicted at small PoPs (a cold start on the next request); V8
scavenges and the odd mark-compact on the event loop; 1 % slow central reads; the ranker's rare
collections and 0.1 % 5xx.

Conventions by seed (seed % 3): 0: OTLP/JSON, new semconv, the PoP as `cloud.region` beside a random
`service.instance.id` per PoP, KV spans `get PROFILES` with `db.*`, the isolate start as a span event,
browser RUM roots, the ranker's spans (5 % missing: another collector), internal spans. 1: Jaeger, old
semconv, the PoP in the instance's name (`edge-personalize@iad`), KV spans `KV PROFILES get` without db
attributes, the isolate start as an event, server-rooted, no ranker spans. 2: Zipkin v2, old semconv,
the PoP as a `colo` tag on the worker's SERVER spans (instances: ip:port), `kv.get` with `db.*`, no
isolate event, RUM roots, the ranker's spans (3 % missing), no internal spans.

Mechanisms (scenario: truth):
- `deploy-cold-isolates`: a deploy at 30 % of the run (a bigger bundle: ~34 ms to compile); every
  isolate is replaced on its next request, and for a while two versions share memory and isolates are
  evicted every ~2 s: each new isolate's first requests wait for the compile, run cold (unoptimized)
  code, and its first ranker call opens the connection: cold_start, stage ingress, the worker's SERVER
  span (side network, queueing).
- `kv-ttl-wave`: a batch job rewrote every candidate set at one moment; every PoP cached them on the
  first reads after it, so they all expire together at 40 % of the run: a wave of central reads, which
  queue at the central store: cache_miss, feature_hydration, the CANDIDATES get (side network,
  slow_dependency, queueing).
- `far-session-objects`: a backfill created the objects of one far PoP's signed-in users in enam: each
  of their requests' two object calls crosses an ocean and back: network, feature_hydration, the object call,
  that PoP.
- `bot-hot-object`: a crawler signed in as one user (1,200 stored views) sends bursts of 20-40 parallel
  requests to one PoP every ~2 s; its one object runs their reads and writes one at a time: queueing
  (accept lock_contention: the object is a per-user mutual exclusion), feature_hydration, the object
  call, that PoP.
- `cpu-limit-kills`: from 25 % of the run, "bundle" pages (18 %) send 600-2,000 candidates; building
  the payload passes 50 ms of CPU on most, the invocation is killed and the page retries with lite=1
  after its back-off (where traces are server-rooted, the retry is a trace of its own):
  timeout_retry (accept large_payload), preprocessing, `prepare candidates` (the SERVER span where
  internals are not exported) (side compute_bound).
- `ranker-region-failover`: us-east4 fails its health checks for 25-80 % of the run; the load
  balancer sends its PoPs (iad, ord, dfw, sjc, gru, nrt, syd) across to europe-west4, their isolates'
  connections to the drained front ends reconnect there: network, downstream, the ranker call, those
  PoPs (side queueing, slow_dependency).
- `h2-reset-storm`: the ranker's load balancers restart in turn for 30-75 % of the run, each sending
  GOAWAY: every isolate's connection is closed every ~0.6 s and its next call pays TCP + TLS again:
  network, downstream, the ranker call, every PoP.
- `ranker-slow-host`: one us-east4 host (of 2 or 3; 2-3 worker processes each) runs a model version
  built without tree pruning (~15-20x the time per candidate: ~87 % busy with its share of the
  calls), its calls queue for its workers: slow_dependency (accept compute_bound), downstream; the
  host's SERVER span where the ranker's spans are exported, else the worker's ranker call at the PoPs
  served by us-east4 (side queueing).
- `noisy-isolate-json`: a partner's sync client sends 4-12.5 MB JSON bodies to one PoP (20 a second for
  15-90 % of the run); each `JSON.parse` holds that PoP's only isolate for 16-50 ms and every other
  request's callbacks wait: large_payload (accept compute_bound), parsing, `parse request` (the batch
  route's SERVER span where internals are not exported), that PoP (side queueing, slow_dependency).
- `central-kv-write-backlog`: a bulk import's writes back up the central store's queue for 20-85 % of the
  run (up to 1.2 s ahead of a read); every miss from every PoP waits behind them: slow_dependency,
  feature_hydration, the CANDIDATES get (side queueing).
- Two causes: `deploy-cold-isolates+kv-ttl-wave` (release day: the deploy follows the batch job),
  `bot-hot-object+ranker-slow-host`, `far-session-objects+cpu-limit-kills`.

Truth instances: the worker's instances as the store names them (one per PoP), or the ranker host.
"""

from __future__ import annotations

import random
from typing import Any

from reference_pipeline.simulate import edge_worker_spans as sp
from reference_pipeline.simulate.edge_worker_flow import World, run_requests
from reference_pipeline.simulate.edge_worker_net import POPS, nearest_region
from reference_pipeline.simulate.trace_table import Cause, TraceTable

FAMILY = "edge-worker"
SINGLES = ("deploy-cold-isolates", "kv-ttl-wave", "far-session-objects", "bot-hot-object", "cpu-limit-kills",
           "ranker-region-failover", "h2-reset-storm", "ranker-slow-host", "noisy-isolate-json",
           "central-kv-write-backlog")
PAIRS = ("deploy-cold-isolates+kv-ttl-wave", "bot-hot-object+ranker-slow-host",
         "far-session-objects+cpu-limit-kills")
SCENARIOS = ("steady", *SINGLES, *PAIRS)
_SETUPS = (
    {"fmt": "otlp-json", "semconv": "new", "ident": "region", "rum": True, "events": True, "ranker": True,
     "internals": True, "kv_db": True, "rps": 120.0, "hosts": 2, "workers": 3, "missing": 0.05},
    {"fmt": "jaeger", "semconv": "old", "ident": "name", "rum": False, "events": True, "ranker": False,
     "internals": True, "kv_db": False, "rps": 100.0, "hosts": 2, "workers": 2, "missing": 0.0},
    {"fmt": "zipkin", "semconv": "old", "ident": "colo", "rum": True, "events": False, "ranker": True,
     "internals": False, "kv_db": True, "rps": 140.0, "hosts": 3, "workers": 2, "missing": 0.03},
)
FAR_POP = ("nrt", "gru", "syd")  # by seed % 3: the PoP whose users' objects were backfilled in enam
BOT_POP = ("iad", "fra", "ord")
NOISY_POP = ("dfw", "cdg", "dfw")
FAILED_REGION = 0  # us-east4
SLOW_HOST = 0  # the first us-east4 host (host i: region i % 2)


def setup(seed: int) -> dict[str, Any]:
    return dict(_SETUPS[seed % 3])


def style(seed: int) -> sp.Style:
    s = setup(seed)
    return sp.Style(s["semconv"], s["ident"], s["rum"], s["events"], s["ranker"], s["internals"], s["kv_db"],
                    seed)


def pop_index(code: str) -> int:
    return next(k for k, p in enumerate(POPS) if p.code == code)


def truth(scenario: str, seed: int) -> tuple[Cause, ...]:
    if scenario not in SCENARIOS:
        raise ValueError(f"unknown {FAMILY} scenario {scenario!r}; one of {', '.join(SCENARIOS)}")
    st = style(seed)
    k = seed % 3
    edge = tuple(st.label(sp.WORKER, j) for j in range(len(POPS)))

    def at(code: str) -> tuple[str, ...]:
        return (st.label(sp.WORKER, pop_index(code)),)

    failed = tuple(st.label(sp.WORKER, j) for j, p in enumerate(POPS) if nearest_region(p) == FAILED_REGION)
    served_by_us = tuple(st.label(sp.WORKER, j) for j, p in enumerate(POPS) if nearest_region(p) == 0)
    kv = st.kv("CANDIDATES")
    if st.ranker:
        slow = Cause("slow_dependency", "downstream", st.rank_server, sp.RANKER,
                     (st.label(sp.RANKER, SLOW_HOST),), accept=("compute_bound",), side=("queueing",))
    else:
        slow = Cause("slow_dependency", "downstream", st.rank_client, sp.WORKER, served_by_us,
                     accept=("compute_bound",), side=("queueing",))
    causes = {
        "deploy-cold-isolates": Cause("cold_start", "ingress", st.root(), sp.WORKER, edge,
                                      side=("network", "queueing")),
        "kv-ttl-wave": Cause("cache_miss", "feature_hydration", kv, sp.WORKER, edge,
                             side=("network", "slow_dependency", "queueing")),
        "far-session-objects": Cause("network", "feature_hydration", st.session, sp.WORKER, at(FAR_POP[k])),
        "bot-hot-object": Cause("queueing", "feature_hydration", st.session, sp.WORKER, at(BOT_POP[k]),
                                accept=("lock_contention",)),
        "cpu-limit-kills": Cause("timeout_retry", "preprocessing", st.prepare_span(), sp.WORKER, edge,
                                 accept=("large_payload",), side=("compute_bound",)),
        "ranker-region-failover": Cause("network", "downstream", st.rank_client, sp.WORKER, failed,
                                        side=("queueing", "slow_dependency")),
        "h2-reset-storm": Cause("network", "downstream", st.rank_client, sp.WORKER, edge),
        "ranker-slow-host": slow,
        "noisy-isolate-json": Cause("large_payload", "parsing", st.parse_span(batch=True), sp.WORKER,
                                    at(NOISY_POP[k]), accept=("compute_bound",),
                                    side=("queueing", "slow_dependency")),
        "central-kv-write-backlog": Cause("slow_dependency", "feature_hydration", kv, sp.WORKER, edge,
                                          side=("queueing",)),
    }
    return tuple(causes[part] for part in scenario.split("+") if part != "steady")


def generate(scenario: str, requests: int, seed: int, **opts: Any) -> TraceTable:
    truth(scenario, seed)
    s = {**setup(seed), **opts}
    parts = frozenset(scenario.split("+")) - {"steady"}
    rng = random.Random(seed * 1_000_003 + 3535)
    table = TraceTable(seed, 0x35E)
    st = style(seed)
    res = sp.Resources(table, st, s["hosts"])
    k = seed % 3
    world = World.build(rng, s, parts, requests, pop_index(FAR_POP[k]), pop_index(BOT_POP[k]),
                        pop_index(NOISY_POP[k]), FAILED_REGION, SLOW_HOST)
    for req in run_requests(rng, world, requests):
        sp.write_request(table, res, req, rng, s["missing"])
    return table
