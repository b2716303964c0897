"""Blind family `pgvector-search`: semantic search for a help centre ("find the article that answers
this question"), Go + PostgreSQL with pgvector (pgvector_search_db.py: the Postgres physics;
pgvector_search_app.py: the Go runtime and TorchServe's batching; pgvector_search_spans.py: the
conventions).

Shape: `ask-api` (Go net/http, 4 pods, GOMAXPROCS 2 from the CPU limit, GOGC=100 and a GOMEMLIMIT)
serves `POST /v1/ask`: it decodes the question, embeds it with a small sentence-transformer on
`embedder` (TorchServe on CPU, 2 pods of 2 workers, batches of up to 8 with max_batch_delay 5 ms),
then runs one read transaction through PgBouncer (transaction mode, default_pool_size 20 per
database/user pair, one pool per server): `BEGIN`, `SET LOCAL hnsw.ef_search = 40` (a session SET
would leak to other clients of the pool), `SELECT ... WHERE tenant_id = $1 ORDER BY embedding <=> $2
LIMIT 20` over an HNSW index (pgvector 0.8, iterative scan: the walk goes on until 20 rows pass the
tenant filter), the 20 rows read and parsed in Go (`sql.rows`), `COMMIT`; it re-ranks the 20 in Go,
logs the ask with a synchronous `INSERT INTO ask_log` on the primary (its own writer pool), and
returns the top 3. Reads go to two streaming replicas (4 vCPU, shared buffers 8 GB, the 12 GB HNSW
index partly in the OS page cache, partly on an EBS gp3 volume: ~1 ms a random read); the app reads
from the primary (8 vCPU) while replica lag is over 5 s. PgBouncer has no spans: a transaction that
waits for a server connection waits inside its BEGIN statement's span.

Healthy noise: jitter everywhere; ~2 % of a walk's page touches read from disk (the odd 8-30 ms EBS
hiccup); 0.5 % of walks wander (5x the tuples); tenants of different sizes (smaller ones walk
further); Go GC cycles every few seconds on every pod (~15 ms of mark, sub-ms pauses); the WAL flush of
each INSERT.

Conventions by seed (seed % 3): 0: OTLP/JSON, new semconv (`server.address`, `db.query.text`),
instances by pod name (`service.instance.id`), TorchServe's spans with `ts.queue_time_ms`, GC cycles as
`go.gc` events on the server span. 1: Jaeger JSON, old semconv (`net.peer.name`), no statements,
`service.instance.id` = ip:port, TorchServe's spans without the queue time, GC events. 2: Zipkin v2,
new semconv, statements, instances are endpoints (ip:port), no TorchServe spans, no GC events.

Mechanisms (scenario: truth):
- `pgbouncer-burst`: traffic 10x for 2 % of the run: the replicas' CPU saturates (statements stretch
  under processor sharing), transactions hold their server connections longer, the pools of 20 fill
  and clients wait in PgBouncer's queue inside BEGIN: queueing at `sql.conn.begin_tx`, stage
  downstream (side: slow_dependency, the stretched statements).
- `replica-restart`: replica 1 restarts at 12 % of the run (1.5 s down, reads to replica 2) and comes
  back with empty shared buffers and page cache: its walks read most pages from disk, fewer as the
  hot head of the graph is read back in: cache_miss at `sql.conn.query`, accept cold_start (a cold
  instance and a cold cache read the same), side slow_dependency.
- `checkpoint-storm`: a re-embedding job's UPDATEs fill max_wal_size every ~3.5 s: checkpoints back to
  back, each ending in a ~1.2 s sync phase during which the primary's WAL flushes queue behind the
  data-file writes: every INSERT's commit waits (tens of ms): slow_dependency at `sql.conn.exec` (the
  writer pool of 20 holds ~7 such commits at a time: no wait for a connection).
- `selective-tenant`: two newly onboarded tenants with 0.5 % and 1.5 % of the rows: their walks visit
  ~20/s tuples (4,000 and 1,300) over colder pages: only their queries slow, in proportion to the
  selectivity: slow_dependency at `sql.conn.query`, accept compute_bound (the query's own work
  grows), side cache_miss.
- `plan-flip`: northwind's bulk import lands at 30 % of the run (180k rows) after the last ANALYZE: the
  planner, estimating a few hundred rows, switches its queries to the tenant index + an exact
  distance sort over every row: slow_dependency at `sql.conn.query`, accept compute_bound.
- `ebs-credits`: replica 2's volume has spent its burst credits: capped at baseline IOPS with replay
  and other readers using most of it (rho 0.85): each read waits in the device queue, so a query
  slows in proportion to its page reads, all run long: slow_dependency at `sql.conn.query`.
- `reembed-job`: an untraced re-embedding job sends 256-token passages to TorchServe (~85 % of the
  workers' capacity) from 15 % of the run: questions wait for a worker and ride in batches of
  passages: queueing at the embedder (`POST /predictions/minilm-l6`, stage queue; on the seed without
  TorchServe spans, ask-api's client span, stage downstream), side slow_dependency.
- `heap-near-memlimit`: one ask-api pod's live heap (an article cache grown) sits near GOMEMLIMIT:
  GC cycles back to back, half the CPU to the collector, heavy mark assists on the goroutines that
  parse rows and re-rank: gc_pause on that pod (the server span, no stage), side compute_bound.
- `replica-lag`: a bulk import on the primary puts the replicas > 5 s behind from 25 % to 80 % of the
  run: reads go to the primary, busy with the import (CPU, a churned cache, slower reads):
  slow_dependency at `sql.conn.query` (its reader pool stays below 20: no wait in BEGIN).
- Two causes: `replica-restart+pgbouncer-burst` (a cold replica's slow walks hold connections while a
  burst arrives), `checkpoint-storm+reembed-job` (one re-embedding job: its passages on TorchServe,
  its UPDATEs' WAL on the primary), `heap-near-memlimit+selective-tenant`.
"""

from __future__ import annotations

import random
from typing import Any

import numpy as np

from reference_pipeline.simulate import pgvector_search_spans as sp
from reference_pipeline.simulate.pgvector_search_app import GoRuntime, TorchServe
from reference_pipeline.simulate.pgvector_search_db import (
    Bouncer,
    Disk,
    PageCache,
    Server,
    checkpoints,
    commit_ns,
)
from reference_pipeline.simulate.trace_table import (
    NS_PER_S,
    Cause,
    TraceTable,
    lognormal_ms,
    poisson_arrivals,
)

FAMILY = "pgvector-search"
SINGLES = ("pgbouncer-burst", "replica-restart", "checkpoint-storm", "selective-tenant", "plan-flip",
           "ebs-credits", "reembed-job", "heap-near-memlimit", "replica-lag")
PAIRS = ("replica-restart+pgbouncer-burst", "checkpoint-storm+reembed-job",
         "heap-near-memlimit+selective-tenant")
SCENARIOS = ("steady", *SINGLES, *PAIRS)
GC_POD = 2
POOL = 20
TENANTS = (("acme", 0.22), ("globex", 0.17), ("initech", 0.14), ("northwind", 0.12), ("umbrella", 0.10),
           ("hooli", 0.09), ("stark", 0.085), ("wayne", 0.075))
SELECTIVE = (("lumen-legal", 0.005), ("pied-piper", 0.015))
FLIP_TENANT, FLIP_ROWS = "northwind", 180_000
_SETUPS = (
    {"fmt": "otlp-json", "semconv": "new", "ident": "pod", "statement": True, "torchserve": "queue-attr",
     "gc_events": True, "rps": 150.0, "api_pods": 4, "emb_pods": 2, "emb_workers": 2},
    {"fmt": "jaeger", "semconv": "old", "ident": "ip-port", "statement": False, "torchserve": "plain",
     "gc_events": True, "rps": 130.0, "api_pods": 4, "emb_pods": 2, "emb_workers": 2},
    {"fmt": "zipkin", "semconv": "new", "ident": "endpoint", "statement": True, "torchserve": "none",
     "gc_events": False, "rps": 170.0, "api_pods": 4, "emb_pods": 2, "emb_workers": 2},
)


def setup(seed: int) -> dict[str, Any]:
    return dict(_SETUPS[seed % 3])


def style(seed: int) -> sp.Style:
    s = setup(seed)
    return sp.Style(s["semconv"], s["ident"], s["statement"], s["torchserve"], s["gc_events"])


def truth(scenario: str, seed: int) -> tuple[Cause, ...]:
    if scenario not in SCENARIOS:
        raise ValueError(f"unknown {FAMILY} scenario {scenario!r}; one of {', '.join(SCENARIOS)}")
    s, st = setup(seed), style(seed)
    api = tuple(st.label(sp.API, k) for k in range(s["api_pods"]))
    emb = tuple(st.label(sp.EMB, k) for k in range(s["emb_pods"]))
    db = "downstream"
    traced = st.torchserve != "none"
    causes = {
        "pgbouncer-burst": Cause("queueing", db, sp.BEGIN, sp.API, api, side=("slow_dependency",)),
        "replica-restart": Cause("cache_miss", db, sp.QUERY, sp.API, api, accept=("cold_start",),
                                 side=("slow_dependency",)),
        "checkpoint-storm": Cause("slow_dependency", db, sp.EXEC, sp.API, api),
        "selective-tenant": Cause("slow_dependency", db, sp.QUERY, sp.API, api, accept=("compute_bound",),
                                  side=("cache_miss",)),
        "plan-flip": Cause("slow_dependency", db, sp.QUERY, sp.API, api, accept=("compute_bound",)),
        "ebs-credits": Cause("slow_dependency", db, sp.QUERY, sp.API, api),
        "reembed-job": (Cause("queueing", "queue", sp.TS_SERVER, sp.EMB, emb, side=("slow_dependency",))
                        if traced else Cause("queueing", db, st.embed_client, sp.API, api,
                                             side=("slow_dependency",))),
        "heap-near-memlimit": Cause("gc_pause", None, st.root, sp.API, (api[GC_POD],),
                                    side=("compute_bound",)),
        "replica-lag": Cause("slow_dependency", db, sp.QUERY, sp.API, api),
    }
    return tuple(causes[part] for part in scenario.split("+") if part != "steady")


def tenants(parts: set[str]) -> tuple[tuple[str, float], ...]:
    """(tenant, fraction of the rows); traffic follows the fraction, the new tenants ask 3 % each."""
    return TENANTS + (SELECTIVE if "selective-tenant" in parts else ())


def _servers(parts: set[str], run_ns: float) -> list[Server]:
    restart = 0.12 * run_ns + 1.5 * NS_PER_S if "replica-restart" in parts else None
    primary = Server(sp.SERVERS[0], 8, PageCache(), Disk())
    if "replica-lag" in parts:  # the import: index inserts on 3 cores, its writes and a churned cache
        primary = Server(sp.SERVERS[0], 8, PageCache(miss_scale=1.8), Disk(slow=1.6, rho=0.35), 3.0)
    return [primary, Server(sp.SERVERS[1], 4, PageCache(cold_from=restart), Disk()),
            Server(sp.SERVERS[2], 4, PageCache(), Disk(rho=0.85 if "ebs-credits" in parts else 0.0))]


def _embedder(rng: random.Random, s: dict[str, Any], parts: set[str], reqs: list[dict], run_ns: float,
              table: TraceTable, res: sp.Resources) -> None:
    """Every call's batch on its TorchServe pod (the re-embedding job's passages beside them)."""
    for j in range(s["emb_pods"]):
        items = [(r["arrive"], lognormal_ms(rng, 0.7, 0.25), i) for i, r in enumerate(reqs) if r["emb"] == j]
        if "reembed-job" in parts:
            rate = 0.85 * s["emb_workers"] * 8 / (0.002 + 8 * 0.0055)
            t, stop = 0.15 * run_ns, max(r["arrive"] for r in reqs) + 0.5 * NS_PER_S
            while t < stop:
                t += rng.expovariate(rate) * NS_PER_S
                items.append((t, lognormal_ms(rng, 5.5, 0.15), -1))
        items.sort()
        batches = TorchServe(s["emb_workers"]).serve(rng, [(a, c) for a, c, _ in items])
        for (arrive, _c, i), batch in zip(items, batches, strict=True):
            done = batch.end + lognormal_ms(rng, 0.15, 0.3)
            embed = sp.Embed(j, arrive, done, batch)
            if i >= 0:
                reqs[i]["embed"] = embed
            elif res.style.torchserve != "none":
                sp.write_embed(table, res, table.new_trace(), None, embed, 256)


def generate(scenario: str, requests: int, seed: int, **opts: Any) -> TraceTable:
    truth(scenario, seed)
    s = {**setup(seed), **opts}
    parts = set(scenario.split("+")) - {"steady"}
    rng = random.Random(seed * 1_000_003 + 3303)
    nrng = np.random.default_rng(seed * 7919 + 33)
    table = TraceTable(seed, 0x21D)
    res = sp.Resources(table, style(seed))
    run_s = requests / s["rps"]
    run_ns = run_s * NS_PER_S
    bursts = ((0.4 * run_s, 0.02 * run_s, 10.0),) if "pgbouncer-burst" in parts else ()
    arrivals = poisson_arrivals(rng, s["rps"], requests, bursts)
    horizon = arrivals[-1] + 30 * NS_PER_S
    go = [GoRuntime(rng, horizon, "heap-near-memlimit" in parts and k == GC_POD, 37 + 11 * k)
          for k in range(s["api_pods"])]
    names, weights = zip(*((n, f if f > 0.05 else 0.03) for n, f in tenants(parts)), strict=True)
    fraction = dict(tenants(parts))
    reqs: list[dict] = []
    for t0 in arrivals:  # receive, decode, send the question to the embedder
        pod = rng.randrange(s["api_pods"])
        root_s = t0 + lognormal_ms(rng, 0.05, 0.3)
        t = go[pod].run(rng, go[pod].run(rng, root_s, 0.12, 20), 0.05, 8)
        reqs.append({"pod": pod, "tenant": rng.choices(names, weights)[0], "root_s": root_s, "call_s": t,
                     "emb": rng.randrange(s["emb_pods"]), "arrive": t + lognormal_ms(rng, 0.25, 0.3)})
    _embedder(rng, s, parts, reqs, run_ns, table, res)
    servers = _servers(parts, run_ns)
    readers = [Bouncer(POOL) for _ in servers]
    down = (0.12 * run_ns, 0.12 * run_ns + 1.5 * NS_PER_S) if "replica-restart" in parts else None
    lag = (0.25 * run_ns, 0.8 * run_ns) if "replica-lag" in parts else None
    flip_at = 0.3 * run_ns if "plan-flip" in parts else None
    for r in reqs:  # the embedding back, parsed; BEGIN sent
        g = go[r["pod"]]
        r["call_e"] = r["embed"].done + lognormal_ms(rng, 0.25, 0.3)
        r["begin_s"] = g.run(rng, r["call_e"], 0.25, 60)
        if lag and lag[0] <= r["begin_s"] < lag[1]:
            r["server"] = sp.PRIMARY
        elif down and down[0] <= r["begin_s"] < down[1]:
            r["server"] = sp.REPLICA_2
        else:
            r["server"] = rng.choice((sp.REPLICA_1, sp.REPLICA_2))
    for r in sorted(reqs, key=lambda x: x["begin_s"]):  # the read transaction, through PgBouncer
        g, server, pool = go[r["pod"]], servers[r["server"]], readers[r["server"]]
        rtt = lognormal_ms(rng, 0.4, 0.2)
        got, held = pool.take(r["begin_s"] + rtt / 2)
        r["begin"] = (r["begin_s"], got + lognormal_ms(rng, 0.05, 0.3) + rtt / 2)
        set_s = r["begin"][1] + lognormal_ms(rng, 0.02, 0.3)
        r["set"] = (set_s, set_s + rtt + lognormal_ms(rng, 0.04, 0.3))
        q_s = r["set"][1] + lognormal_ms(rng, 0.03, 0.3)
        if flip_at is not None and r["tenant"] == FLIP_TENANT and q_s >= flip_at:
            work, _, _ = server.exact(nrng, q_s, FLIP_ROWS, held)
        else:
            work, _, _ = server.walk(nrng, q_s, fraction[r["tenant"]], held)
        r["query"] = (q_s, q_s + rtt + work)
        r["rows"] = (r["query"][1], g.run(rng, r["query"][1] + lognormal_ms(rng, 0.1, 0.3), 1.0, 350))
        c_s = r["rows"][1] + lognormal_ms(rng, 0.02, 0.3)
        r["commit"] = (c_s, c_s + rtt + lognormal_ms(rng, 0.03, 0.3))
        pool.give(r["commit"][1] - rtt / 2)
        rr_s = r["commit"][1] + lognormal_ms(rng, 0.02, 0.3)
        r["rerank"] = (rr_s, g.run(rng, rr_s, 1.4, 220))
        r["insert_s"] = g.run(rng, r["rerank"][1], 0.05, 10)
    syncs = checkpoints(rng, horizon, 3.5, 1.2) if "checkpoint-storm" in parts else []
    writer = Bouncer(POOL)
    for r in sorted(reqs, key=lambda x: x["insert_s"]):  # the ask_log INSERT on the primary
        rtt = lognormal_ms(rng, 0.4, 0.2)
        got, _ = writer.take(r["insert_s"] + rtt / 2)
        work = lognormal_ms(rng, 0.25, 0.3) + commit_ns(rng, got, syncs)
        writer.give(got + work)
        r["insert"] = (r["insert_s"], got + work + rtt / 2)
    for q, r in enumerate(reqs):
        g = go[r["pod"]]
        end = g.run(rng, r["insert"][1], 0.2, 30) + lognormal_ms(rng, 0.05, 0.3)
        cycles = g.ended_within(r["root_s"], end) if res.style.gc_events else []
        sp.write_ask(table, res, sp.Ask(r["pod"], r["tenant"], r["server"], (r["root_s"], end),
                                        (r["call_s"], r["call_e"]), r["embed"], r["begin"], r["set"],
                                        r["query"], r["rows"], r["commit"], r["rerank"], r["insert"], cycles),
                     q)
    return table
