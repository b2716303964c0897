"""Blind family `feast-redis`: click-through-rate scoring for a display-ads exchange, each bid request
scored within 40 ms (feast_redis_physics.py: the physics of the shards, connections, TF Serving, the Go
runtime and the Kafka producer; feast_redis_spans.py: the conventions).

Shape: `ctr-scorer` (Go, a gRPC server, 6 pods, GOGC=100, a goroutine per request) serves
`ctr.v1.Scorer/Score`. Per request it reads the user's, the 20-60 ad candidates' and the context's
features (40-120 features) from a Feast-like online store on a Redis Cluster: 6 shards, each a
single-threaded primary (with a replica, not read), keys hashed to 16,384 slots (ad keys hash-tagged by
campaign); one pipeline of HMGETs per shard, in parallel across shards; the read waits for the slowest
shard. A shard runs commands one at a time: its load is the whole exchange's traffic (the traces are a
~10 % head sample), so a command waits behind the work queued ahead of it, and anything that blocks the
event loop (a fork for BGSAVE, a slow command) delays everything queued behind it. The go-redis pool
dials a new connection when no idle one is left (concurrency peaks: ~3 % of pipelines), using the IPs
CLUSTER SLOTS gave it. Then it scores the candidates on TensorFlow Serving (gRPC, round robin over 3
CPU hosts; server-side batching: max_batch_size 64 examples, batch_timeout_micros 2,000, 4 batch threads;
a request's examples must fit in the open batch or close it), and logs the decision to Kafka (franz-go,
fire-and-forget: `Produce` returns at once unless its buffer is full). A request whose features arrive
after the caller's 40 ms deadline is answered DEADLINE_EXCEEDED without scoring.

Healthy noise: jitter; Poisson and wave-like load on every shard; each shard's own small BGSAVE fork (a
4 GB primary: ~8 ms every ~9 s, the run being a compressed sample of the day) and the odd blocking
expiry of a big hash; ~3 % of pipelines dial; cross-zone hops for the pods rescheduled into another zone
than their shards; the Go GC of a 240 MB live heap (~30 ms marks, sub-ms stop-the-world); a TF Serving
batch descheduled now and then.

Conventions by seed (seed % 3): 0: OTLP/JSON, new semconv (`server.address`), pods named by
`service.instance.id` (the pod name), redisotel spans per shard pipeline (`redis.dial` under a pipeline
that dials), no `db.statement`, TF Serving's server spans exported with `tfs.batching.queue_time_us`, GC
cycles as `go.gc` events on the root span. 1: Jaeger JSON, old semconv (`net.peer.name`), host-network
pods named by node (host.name + process.pid 1, one pod per node), pipelines with `db.statement`, no TF
Serving spans, GC as `runtime.go.gc.*` counters on the root span. 2: Zipkin v2, old semconv, pods as
endpoint IPs, the whole Redis read as one `feast.online_read` span, no TF Serving spans, no GC at all.

Mechanisms (scenario: truth):
- `bgsave-fork`: shard 3 grew to 38 GB (a new feature view): its BGSAVE fork copies the page tables,
  stalling the shard ~320 ms every ~2.5 s: slow_dependency at the shard's pipeline (feature_hydration).
- `slow-hgetall`: a batch job's HGETALL of a 200 k-field advertiser hash on shard 4 every ~0.45 s
  blocks it ~35 ms; commands queued behind wait: slow_dependency, accept queueing (head-of-line).
- `slot-migration`: a resharding moves slots from shard 2 to a new shard in another zone: MIGRATE
  batches block shard 2 (~6 ms each, ~40 % of the time) and keys already moved get ASK replies,
  answered by a second round (ASKING + HMGET) to the new shard after the first: slow_dependency,
  accept network (the redirect round trips).
- `hot-key`: one advertiser's big hash, read by 80 % of requests, keeps shard 5 near saturation
  (utilisation ~0.98 with the traffic's waves: queues build and drain): slow_dependency, accept queueing.
- `ndots-dns`: a client library upgrade keeps one idle connection per shard (most pipelines dial) and
  re-resolves the shard's hostname per dial under ndots:5 (4 search domains' NXDOMAINs first):
  network at `redis.dial`.
- `conntrack-full`: node 3's conntrack table is full (another tenant's connection churn): a new
  connection's SYN is dropped with probability 0.55, retransmitted after 1 s, then 2 s more: the
  pods on that node: network at `redis.dial`, accept timeout_retry (the TCP retransmission timer).
- `tf-batch-burst`: a traffic surge (2.3x for 30 % of the run) fills TF Serving's batch queues:
  queueing, stage queue, at TF Serving's server span where exported, else the Predict call (side
  slow_dependency at the shards, whose load also grows).
- `thp-compaction`: transparent huge pages on TF Serving host 1: 12 % of its batches stall in direct
  compaction (~45 ms) allocating their tensors: slow_dependency at Predict (host 1), accept gc_pause
  (a memory-management stall of the process), side queueing.
- `gc-leak`: a feature-cache leak grew pods 1 and 2's live heap to 2.6 GB: ~0.5 s marks every ~3 s
  (dedicated workers and assists take the CPU: goroutines wait for a P, CPU work stretches, ms-long
  stop-the-world phases): gc_pause at the root span, pods 1 and 2.
- `kafka-buffer`: a Kafka broker's disk stalls its fsyncs; the records of the partitions it leads fill
  the producer's shared buffer and `Produce` blocks until it recovers: slow_dependency at the
  producer span (downstream), accept queueing (waiting for buffer space).
- Two causes: `ndots-dns+conntrack-full` (the per-dial connections are what meets the full table),
  `bgsave-fork+gc-leak` (two slow growths: a shard's memory and a pod's heap), `kafka-buffer+tf-batch-burst`
  (a traffic surge while a broker is slow: each at its own tier).
"""

from __future__ import annotations

import random
from typing import Any

import numpy as np

from reference_pipeline.simulate import feast_redis_spans as sp
from reference_pipeline.simulate.feast_redis_physics import (
    BUCKET_NS,
    Scored,
    Shard,
    TfHost,
    blocked_intervals,
    dial,
    go_runtime,
    load_profile,
    produce_blocked,
)
from reference_pipeline.simulate.trace_table import (
    NS_PER_MS,
    NS_PER_S,
    Cause,
    TraceTable,
    lognormal_ms,
    merge_intervals,
    poisson_arrivals,
)

FAMILY = "feast-redis"
SINGLES = ("bgsave-fork", "slow-hgetall", "slot-migration", "hot-key", "ndots-dns", "conntrack-full",
           "tf-batch-burst", "thp-compaction", "gc-leak", "kafka-buffer")
PAIRS = ("ndots-dns+conntrack-full", "bgsave-fork+gc-leak", "kafka-buffer+tf-batch-burst")
SCENARIOS = ("steady", *SINGLES, *PAIRS)
SHARDS, PODS, TF_HOSTS = 6, 6, 3
FORK_SHARD, HGETALL_SHARD, SOURCE_SHARD, HOT_SHARD, NEW_SHARD = 3, 4, 2, 5, 6
CONNTRACK_NODE, THP_HOST, GC_PODS = 3, 1, (1, 2)
DEADLINE_MS = 40.0
_EVEN = [1.0 / SHARDS] * SHARDS
TOTAL_RPS = 2000.0  # the exchange's traffic: the traces are a head sample of it (8.5-11.5 % by seed)
_COMMON = {"shard_rho": 0.3, "dial_p": 0.03}
_SETUPS = (
    {"fmt": "otlp-json", "semconv": "new", "ident": "pod", "redis": "pipelines", "statements": False,
     "tf_spans": True, "gc": "events", "nodes": (0, 0, 1, 2, 3, 3), "rps": 200.0},
    {"fmt": "jaeger", "semconv": "old", "ident": "node", "redis": "pipelines", "statements": True,
     "tf_spans": False, "gc": "attrs", "nodes": (0, 1, 2, 3, 4, 5), "rps": 170.0},
    {"fmt": "zipkin", "semconv": "old", "ident": "ip", "redis": "fanout", "statements": False,
     "tf_spans": False, "gc": "none", "nodes": (0, 0, 1, 2, 3, 3), "rps": 230.0},
)


def setup(seed: int) -> dict[str, Any]:
    return {**_COMMON, **_SETUPS[seed % 3]}


def style(seed: int) -> sp.Style:
    s = setup(seed)
    return sp.Style(s["semconv"], s["ident"], s["redis"], s["statements"], s["tf_spans"], s["gc"], s["nodes"])


def conntrack_pods(seed: int) -> tuple[int, ...]:
    return tuple(k for k, node in enumerate(setup(seed)["nodes"]) if node == CONNTRACK_NODE)


def truth(scenario: str, seed: int) -> tuple[Cause, ...]:
    if scenario not in SCENARIOS:
        raise ValueError(f"unknown {FAMILY} scenario {scenario!r}; one of {', '.join(SCENARIOS)}")
    st = style(seed)
    pods = tuple(st.label(k) for k in range(PODS))
    fetch, hyd = st.fetch_span, "feature_hydration"
    if st.tf_spans:
        tf_where: tuple[str, tuple[str, ...]] = (sp.TFS, tuple(st.tf_label(j) for j in range(TF_HOSTS)))
        thp_where: tuple[str, tuple[str, ...]] = (sp.TFS, (st.tf_label(THP_HOST),))
    else:
        tf_where = thp_where = (sp.SCORER, pods)
    causes = {
        "bgsave-fork": Cause("slow_dependency", hyd, fetch, sp.SCORER, pods),
        "slow-hgetall": Cause("slow_dependency", hyd, fetch, sp.SCORER, pods, accept=("queueing",)),
        "slot-migration": Cause("slow_dependency", hyd, fetch, sp.SCORER, pods, accept=("network",)),
        "hot-key": Cause("slow_dependency", hyd, fetch, sp.SCORER, pods, accept=("queueing",)),
        "ndots-dns": Cause("network", hyd, st.dial_span, sp.SCORER, pods),
        "conntrack-full": Cause("network", hyd, st.dial_span, sp.SCORER,
                                tuple(st.label(k) for k in conntrack_pods(seed)), accept=("timeout_retry",)),
        "tf-batch-burst": Cause("queueing", "queue", sp.PREDICT, *tf_where, side=("slow_dependency",)),
        "thp-compaction": Cause("slow_dependency", "model_forward", sp.PREDICT, *thp_where,
                                accept=("gc_pause",), side=("queueing",)),
        "gc-leak": Cause("gc_pause", None, sp.ROOT, sp.SCORER, tuple(st.label(k) for k in GC_PODS)),
        "kafka-buffer": Cause("slow_dependency", "downstream", st.produce, sp.SCORER, pods,
                              accept=("queueing",)),
    }
    return tuple(causes[part] for part in scenario.split("+") if part != "steady")


def _shards(rng: random.Random, parts: set[str], horizon: float, run_ns: float, rho: float,
            bursts: tuple[tuple[float, float, float], ...]) -> list[Shard]:
    buckets = int(horizon // BUCKET_NS) + 1
    out = []
    for s in range(SHARDS + 1):
        forks = blocked_intervals(rng, horizon, 9.0, 8.0, 0.3)  # its own BGSAVE fork (a 4 GB primary)
        if s == FORK_SHARD and "bgsave-fork" in parts:  # a 38 GB primary: ~10x the page tables
            forks = blocked_intervals(rng, horizon, 2.5, 320.0, 0.35)
        blocked = forks + blocked_intervals(rng, horizon, 2.0, 2.5, 0.5)  # expiring a big hash
        mean = rho if s < SHARDS else 0.1
        if s == HGETALL_SHARD and "slow-hgetall" in parts:
            blocked += blocked_intervals(rng, horizon, 0.45, 35.0, 0.5)
        if s == SOURCE_SHARD and "slot-migration" in parts:
            blocked += blocked_intervals(rng, horizon, 0.010, 6.0, 0.6, start_s=0.15 * run_ns / NS_PER_S)
        if s == HOT_SHARD and "hot-key" in parts:
            mean = 0.98
        out.append(Shard(load_profile(rng, buckets, mean, bursts, run_ns), merge_intervals(blocked)))
    return out


def _pipe(rng: random.Random, shard: Shard, index: int, t: float, commands: int, rtt: float, dial_p: float,
          resolve: bool, drop_p: float, hot: bool, ask: bool, gc) -> sp.Pipe:
    conn = dial(rng, t, rtt, resolve, drop_p) if rng.random() < dial_p else None
    send = conn.end if conn else t
    arrive = send + 0.5 * rtt * rng.lognormvariate(0.0, 0.2)
    served = arrive + shard.wait(arrive)
    work = commands * 0.008 * NS_PER_MS * rng.lognormvariate(0.0, 0.2) + (0.12 * NS_PER_MS if hot else 0.0)
    reply = served + work + 0.5 * rtt * rng.lognormvariate(0.0, 0.2) + commands * 0.001 * NS_PER_MS
    end = gc.cpu(gc.wake(rng, reply), commands * 0.012 * NS_PER_MS)
    return sp.Pipe(index, t, end, commands, conn, ask)


def generate(scenario: str, requests: int, seed: int, **opts: Any) -> TraceTable:
    truth(scenario, seed)
    s = {**setup(seed), **opts}
    parts = set(scenario.split("+")) - {"steady"}
    rng = random.Random(seed * 1_000_003 + 3737)
    table = TraceTable(seed, 0x37F)
    st = style(seed)
    res = sp.Resources(table, st)
    run_s = requests / s["rps"]
    bursts = ((0.35 * run_s, 0.3 * run_s, 2.3),) if "tf-batch-burst" in parts else ()
    arrivals = poisson_arrivals(rng, s["rps"], requests, bursts)
    run_ns = run_s * NS_PER_S
    horizon = arrivals[-1] + 8 * NS_PER_S
    shards = _shards(rng, parts, horizon, run_ns, s["shard_rho"], bursts)
    gcs = [go_runtime(rng, horizon, 2600.0 if leak else 240.0, 900.0 if leak else 380.0, leak)
           for leak in (("gc-leak" in parts and k in GC_PODS) for k in range(PODS))]
    blocked = produce_blocked(rng, horizon, "kafka-buffer" in parts, 1.4)
    dial_p = 0.9 if "ndots-dns" in parts else s["dial_p"]
    drop = {k: 0.35 for k in conntrack_pods(seed)} if "conntrack-full" in parts else {}
    ask_p = 0.03 if "slot-migration" in parts else 0.0
    migrate_from = 0.15 * run_ns
    rr = [rng.randrange(TF_HOSTS) for _ in range(PODS)]
    nrng = np.random.default_rng(rng.getrandbits(63))
    pending: list[dict[str, Any]] = []
    submissions: list[tuple[float, int, int, int]] = []  # (time, task, host, examples)
    for r, t0 in enumerate(arrivals):
        pod = rng.randrange(PODS)
        gc, zone = gcs[pod], s["nodes"][pod] % 3
        root_s = gc.wake(rng, t0 + lognormal_ms(rng, 0.05, 0.3))
        candidates = rng.randint(20, 60)
        features = min(120, max(40, int(candidates * 1.6 + rng.randint(8, 24))))
        user = rng.randrange(10_000_000)
        counts = [0] * SHARDS
        counts[user % SHARDS] += 1
        counts[rng.randrange(SHARDS)] += 1  # the publisher / context key
        for shard, n in enumerate(nrng.multinomial(candidates, _EVEN).tolist()):  # ad keys, by slot
            counts[shard] += n
        hot = "hot-key" in parts and rng.random() < 0.8
        if hot:
            counts[HOT_SHARD] += 1
        fetch_s = gc.cpu(root_s, lognormal_ms(rng, 0.15, 0.3))
        pipes = []
        for shard, n in enumerate(counts):
            if n == 0:
                continue
            rtt = (0.2 if shard % 3 == zone else 0.7) * NS_PER_MS
            sent = fetch_s + lognormal_ms(rng, 0.02, 0.4)
            pipes.append(_pipe(rng, shards[shard], shard, sent, n, rtt, dial_p, "ndots-dns" in parts,
                               drop.get(pod, 0.0), hot and shard == HOT_SHARD, False, gc))
        first = max(p.end for p in pipes)
        moved = 0  # keys of the source shard in slots already moved: ASK replies
        if fetch_s >= migrate_from:
            moved = sum(rng.random() < ask_p for _ in range(counts[SOURCE_SHARD]))
        if moved:
            pipes.append(_pipe(rng, shards[NEW_SHARD], NEW_SHARD, first + lognormal_ms(rng, 0.01, 0.3), moved,
                               (0.2 if zone == 2 else 0.7) * NS_PER_MS, dial_p, "ndots-dns" in parts,
                               drop.get(pod, 0.0), False, True, gc))
        joined = gc.wake(rng, max(p.end for p in pipes))
        fetch_e = gc.cpu(joined, features * 0.006 * NS_PER_MS * rng.lognormvariate(0.0, 0.2))
        late = fetch_e > root_s + DEADLINE_MS * NS_PER_MS
        item = {"r": r, "pod": pod, "root_s": root_s, "candidates": candidates, "features": features,
                "user": user, "fetch": (fetch_s, fetch_e), "pipes": pipes, "late": late}
        if not late:
            host = rr[pod] = (rr[pod] + 1) % TF_HOSTS
            pred_s = gc.cpu(fetch_e, candidates * 0.004 * NS_PER_MS)
            item.update(host=host, pred_s=pred_s)
            sent = pred_s + 0.35 * NS_PER_MS * rng.lognormvariate(0.0, 0.2)
            submissions.append((sent, r, host, candidates))
        pending.append(item)
    # the untraced ~90 %: their Predict calls share the batch queues
    untraced = TOTAL_RPS - s["rps"]
    for k, t in enumerate(poisson_arrivals(rng, untraced, int(requests * untraced / s["rps"]), bursts)):
        sent = t + lognormal_ms(rng, 7.0, 0.3)
        submissions.append((sent, -1 - k, rng.randrange(TF_HOSTS), rng.randint(20, 60)))
    submissions.sort()
    hosts = [TfHost(4, 64, 2.0 * NS_PER_MS, 0.03 if "thp-compaction" in parts and j == THP_HOST else 0.0)
             for j in range(TF_HOSTS)]
    scored: dict[int, Scored] = {}
    for t, task, host, examples in submissions:
        hosts[host].submit(rng, task, t, examples, scored)
    for h in hosts:
        h.flush(rng, scored)
    for item in pending:
        pod, gc = item["pod"], gcs[item["pod"]]
        predict = produce = sc = None
        if item["late"]:
            root_e = item["fetch"][1] + lognormal_ms(rng, 0.05, 0.3)
        else:
            sc = scored[item["r"]]
            pred_e = gc.cpu(gc.wake(rng, sc.end + 0.35 * NS_PER_MS * rng.lognormvariate(0.0, 0.2)),
                            item["candidates"] * 0.002 * NS_PER_MS)
            predict = (item["pred_s"], pred_e)
            prod_s = gc.cpu(pred_e, lognormal_ms(rng, 0.08, 0.3))
            prod_e = prod_s + lognormal_ms(rng, 0.006, 0.4)
            for a, b in blocked:
                if a <= prod_s < b:
                    prod_e = b + lognormal_ms(rng, 0.02, 0.4)
            produce = (prod_s, prod_e)
            root_e = gc.cpu(prod_e, lognormal_ms(rng, 0.06, 0.3))
        root = (item["root_s"], root_e)
        sp.write_request(table, res, sp.Timeline(
            pod, root, item["candidates"], item["features"], item["fetch"], item["pipes"], predict,
            item.get("host", 0), sc, produce, item["late"], gc.overlapping(*root), gc.count_before(root_e),
            item["user"]))
    return table
