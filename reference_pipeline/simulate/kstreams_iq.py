"""Blind family `kstreams-iq`: real-time card-authorisation features served from Kafka Streams
interactive queries (kstreams_iq_physics.py: the JVMs, the stores, the batcher, the pool;
kstreams_iq_spans.py: the conventions).

Shape: `authz-api` (Java 17, Spring WebFlux on Reactor Netty, 4 pods, 4 event loops each; a request's
work and its client responses run on its connection's loop) answers `POST /authorize`. It reads the
card's rolling aggregates (1 min, 1 h, 24 h windows) with WebClient from `card-features`, a Kafka
Streams application (6 StatefulSet pods, the transactions topic's 12 partitions as 12 tasks, 2 per
instance, windowed RocksDB stores behind the caching layer, EOS with commits every 100 ms): any
instance receives the query (the Kubernetes Service), finds the key's active task in the streams
metadata and answers it locally or forwards it over HTTP to the owner (`/internal/aggregates`, one
hop, within or across zones). A store unavailable (InvalidStateStoreException while restoring, or
the owner's host gone) is answered 503; the API retries (Retry.backoff(3, 50 ms), jitter 0.5), then
scores without the aggregates. Then it calls `fraud-scorer` (BentoML 1.2, 2 pods: an API server and
one runner process `fraud_gbm` behind the adaptive batching dispatcher) and writes the decision to
Postgres through R2DBC's pool (max-size 4 per pod). Traces are a 12.5 % head sample: the other
requests load the batchers, the pools and the loops too.

Healthy noise: jitter, waves of traffic (1.4x for a tenth of the run), G1 young pauses in every JVM
(~6 ms every ~2.5 s), short commit flushes holding each store's lock, a ~96 % block-cache hit rate,
the odd gp3 read at 5-15 ms, cross-zone hops, a slow commit on Postgres, a descheduled runner.

Conventions by seed (seed % 3): 0: OTLP/JSON, the OTel Java agent (`POST /authorize`, `GET`,
new semconv, `INSERT authz.auth_decisions`), pods as `service.instance.id`, the forwarding hop
traced, BentoML's server and runner spans, G1 pauses as JFR-style `jdk.GarbageCollection` events on
server spans; no standby replicas (static membership: a restarted instance keeps its tasks and
restores them). 1: Jaeger JSON, Micrometer Tracing (`http post /authorize`, old tags, `query` for
R2DBC), host.name + process.pid, the hop excluded from tracing (its time is in the receiving
instance's span), no BentoML spans, pauses as `jvm.gc.pause.*` counters; one standby replica per
task (dynamic membership: a leaving instance's tasks fail over). 2: Zipkin v2, Micrometer (Brave),
endpoints as ip:port, the hop traced, BentoML's spans, no GC reporting, no standbys.

Mechanisms (scenario: truth):
- `rebalance-restore`: instance 2 restarts at a quarter of the run (emptyDir state): its two tasks
  are unavailable while the pod is gone (the forwarding fails fast) and then while it restores them
  from the changelog (~4 s); with standbys, only while the group rebalances (~2 s): the API's retries
  with back-off: cold_start at the features call, accept timeout_retry.
- `l0-write-stall`: instance 4's compactions cannot keep up: L0 builds past the slowdown trigger
  (20) and sometimes the stop trigger (36); the commit flush holds the caching store's lock while
  its puts are delayed or stopped, range scans merge every L0 file, compaction I/O queues ahead of
  reads: slow_dependency at the query's server span on instance 4, accept lock_contention.
- `retention-thrash`: a new 7-day velocity feature: the hourly store's retention is 7 days and the
  query fetches 168 windows: blocks per query 8 -> 20, block-cache hits 96 -> 45 %, the page cache
  no longer holds the stores: cache_miss at the query's span on every instance, accept slow_dependency.
- `hot-card`: a payment facilitator's pooled card (4 % of authorisations) on task 7 (instance 1):
  each commit flushes thousands of dirty windows with the store's lock held (~40 ms of every
  100 ms): lock_contention at the query's span on instance 1, accept queueing.
- `punctuator-throttle`: a wall-clock punctuator (every 2 s per task) scans the whole 1-h store; the
  2-CPU quota is spent early in each period and the JVM is throttled for the rest (a query arriving
  meanwhile is read, and its server span begins, when the next period starts): cpu_throttling on every
  instance, its time in the GET calls to them (the API's, and the forwarding hop's), accept compute_bound.
- `loop-blocked`: a token-vault SDK's synchronous HTTP call (~12 ms, 20 % of cards) runs on the Netty
  event loop: every request and client response pinned to that loop waits (no span of its own):
  queueing at the root span on every API pod, accept slow_dependency.
- `r2dbc-pool`: a card network's stand-in replay (6x the traffic for 15 % of the run) meets the
  pool of 4: the insert waits for a connection before its span starts: queueing at the root span.
- `batch-wait`: the runner's batching was retuned for a backfill's throughput (max_batch_size 64,
  max_latency_ms 150): at the live rate the dispatcher waits ~25 ms for batches to fill: queueing,
  stage queue, at the runner span (or the API's scoring call where BentoML exports nothing).
- `runner-cpu`: a model version computing TreeSHAP reason codes per row: batches take 3 + 1.0 ms a
  row, near the runner's capacity at this load: compute_bound, stage model_forward, side queueing.
- `g1-humongous`: the canary pods (1, 3) buffer the scorer's explanation payloads as 1-3 MB arrays:
  humongous allocations, frequent longer young pauses and Full GCs: gc_pause at the root, pods 1 and 3.
- Two causes: `retention-thrash+runner-cpu` (one release: a 7-day feature and a model that explains
  itself), `rebalance-restore+g1-humongous` (a deploy restarting a streams pod while the API canary
  runs), `hot-card+r2dbc-pool` (a stand-in replay while a pooled card is hot: two services).
"""

from __future__ import annotations

import random
from typing import Any

from reference_pipeline.simulate import kstreams_iq_flow as flow
from reference_pipeline.simulate import kstreams_iq_spans as sp
from reference_pipeline.simulate.trace_table import Cause, TraceTable

FAMILY = "kstreams-iq"
SINGLES = ("rebalance-restore", "l0-write-stall", "retention-thrash", "hot-card", "punctuator-throttle",
           "loop-blocked", "r2dbc-pool", "batch-wait", "runner-cpu", "g1-humongous")
PAIRS = ("retention-thrash+runner-cpu", "rebalance-restore+g1-humongous", "hot-card+r2dbc-pool")
SCENARIOS = ("steady", *SINGLES, *PAIRS)
_COMMON = {"sample": 0.125, "pool": 4, "commit_ms": 100.0}
_SETUPS = (
    {"fmt": "otlp-json", "names": "agent", "ident": "pod", "hop_traced": True, "bento_spans": True,
     "gc": "events", "standbys": 0, "rps": 150.0},
    {"fmt": "jaeger", "names": "micrometer", "ident": "host", "hop_traced": False, "bento_spans": False,
     "gc": "attrs", "standbys": 1, "rps": 130.0},
    {"fmt": "zipkin", "names": "micrometer", "ident": "ip", "hop_traced": True, "bento_spans": True,
     "gc": "none", "standbys": 0, "rps": 170.0},
)


def setup(seed: int) -> dict[str, Any]:
    return {**_COMMON, **_SETUPS[seed % 3]}


def style(seed: int) -> sp.Style:
    s = setup(seed)
    return sp.Style(s["names"], s["ident"], s["hop_traced"], s["bento_spans"], s["gc"])


def truth(scenario: str, seed: int) -> tuple[Cause, ...]:
    if scenario not in SCENARIOS:
        raise ValueError(f"unknown {FAMILY} scenario {scenario!r}; one of {', '.join(SCENARIOS)}")
    st = style(seed)
    pods = tuple(st.label(sp.API, k) for k in range(flow.API_PODS))
    streams = tuple(st.label(sp.STREAMS, k) for k in range(flow.INSTANCES))
    if st.bento_spans:
        bento: tuple[str, str, tuple[str, ...]] = (
            sp.RUNNER_SPAN, sp.BENTO, tuple(st.label(sp.BENTO, k) for k in range(flow.REPLICAS)))
    else:
        bento = (st.post, sp.API, pods)
    q, hyd = st.query_span, "feature_hydration"
    causes = {
        "rebalance-restore": Cause("cold_start", hyd, st.features, sp.STREAMS, (streams[flow.RESTART],),
                                   accept=("timeout_retry",)),
        "l0-write-stall": Cause("slow_dependency", hyd, q, sp.STREAMS, (streams[flow.L0_INSTANCE],),
                                accept=("lock_contention",)),
        "retention-thrash": Cause("cache_miss", hyd, q, sp.STREAMS, streams, accept=("slow_dependency",)),
        "hot-card": Cause("lock_contention", hyd, q, sp.STREAMS, (streams[flow.owner(flow.HOT_TASK)],),
                          accept=("queueing",)),
        "punctuator-throttle": Cause("cpu_throttling", hyd, st.get, sp.STREAMS, streams,
                                     accept=("compute_bound",)),
        "loop-blocked": Cause("queueing", None, st.root, sp.API, pods, accept=("slow_dependency",)),
        "r2dbc-pool": Cause("queueing", None, st.root, sp.API, pods),
        "batch-wait": Cause("queueing", "queue", *bento),
        "runner-cpu": Cause("compute_bound", "model_forward", *bento, side=("queueing",)),
        "g1-humongous": Cause("gc_pause", None, st.root, sp.API, tuple(pods[k] for k in flow.CANARY_PODS)),
    }
    return tuple(causes[part] for part in scenario.split("+") if part != "steady")


def generate(scenario: str, requests: int, seed: int, **opts: Any) -> TraceTable:
    truth(scenario, seed)
    s = {**setup(seed), **opts}
    parts = frozenset(scenario.split("+")) - {"steady"}
    rng = random.Random(seed * 1_000_003 + 3939)
    table = TraceTable(seed, 0x39A)
    res = sp.Resources(table, style(seed))
    world = flow.World.build(rng, parts, requests, s)
    for tl in world.timelines(rng):
        sp.write_request(table, res, tl, world.gc)
    return table
