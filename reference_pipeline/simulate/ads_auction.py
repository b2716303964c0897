"""Blind family `ads-auction`: an OpenRTB ad auction in Go behind an Istio sidecar, fanning out to
candidate-index shards, reading budgets from Redis and scoring candidates on a CTR model server.

Shape: `ad-auction` (Go 1.22, 4-6 pods over three zones, GOMAXPROCS = the node's 16 cores) serves
`POST /v1/auction` (otelhttp; named `/v1/auction` on old-semconv seeds): `parse_bid_request`, then
`retrieve_candidates`, which calls every shard of `ad-index` at once (gRPC
`adindex.v1.CandidateIndex/Retrieve`, 6-12 shards of two replicas each, C++; SERVER span with a
`scan_postings` child) and merges the answers; `budget.lookup` (a Redis `mget` of the candidates'
advertisers; keys it does not find are read from the primary store, Aerospike, `aerospike.batch_get`,
and written back with a Redis `pipeline`); `ctr.score`, which builds the feature tensor and calls the
model server (2 pods): TorchServe on CPU on even seeds (HTTP `POST` to `ctr-torchserve`, 2 workers a
pod, batchSize 16, maxBatchDelay 5 ms; its SERVER span `POST /predictions/ctr_dcn` holds the batch's
`inference`, the time in the batcher is the gap before it), TF Serving on a GPU on odd seeds (gRPC
`tensorflow.serving.PredictionService/Predict` to `ctr-tfserving`, one batch thread, max_batch_size
32, batch_timeout 2 ms; its SERVER span holds `batching_queue` and `session_run`); a batch runs for
a fixed cost plus a cost per candidate row; `run_auction` (second price, bid
shading, pacing), `encode_bid_response`, and a Kafka PRODUCER span for the auction log that is
acknowledged after the response went out. Redis and Aerospike are not traced.

Conventions by seed: OTLP/JSON lines (seed mod 3 = 0), Jaeger UI JSON (1: the Go service reports with
jaeger-client-go's `hostname`/`ip` tags), Zipkin v2 (2: instances are endpoint ip:port). Old semconv
(`http.method`, `net.peer.name`, `db.statement`) on seeds 0, 3 (mod 4), new (`http.request.method`,
`server.address`, `db.query.text`) on 1, 2. The Envoy sidecar's inbound span (service
`ad-auction.ads`, Istio's `<host>:<port>/*` name) is the root on Zipkin seeds and on seed 0 (mod 4);
elsewhere the Go SERVER span is. GC cycles are `go.runtime.gc` events on the Go SERVER span
(`go.gc.pause_ms`, `go.gc.mark_ms`) on seeds 0, 1 (mod 4) only. Instances are pod names (OTLP:
`k8s.pod.name`, with `service.instance.id` on odd seeds; Jaeger: `hostname`), Zipkin: ip:port.

Healthy noise: GC cycles every few seconds (marks of ~55 ms with light assists, STW of 0.05-0.4 ms),
budget keys deleted by pacing updates (a few misses), a posting list out of the page cache now and
then, index swaps of a few ms, cross-zone hops, video creatives in 4 % of the slots.

Mechanisms (model in ads_auction_runtime.py and ads_auction_calls.py):

- `straggler-shard`: one index pod (shard 1) sits on a degraded node: its scans take 5.5x as long,
  with a wider tail; every request waits for its slowest shard, and half of shard 1's calls land on
  it. slow_dependency at `ad-index`, that pod (a few of its calls reach the deadline: timeout_retry
  is side).
- `gc-assist`: every auction pod reloads its advertiser catalog every 1-3 s (a release that
  dropped the delta updates): 0.5-1 s of allocating 1.5 GB/s with both snapshots live (+1 GB).
  A GC cycle then starts every ~0.8 s, its mark lasts 300-450 ms (the live heap over 3 GB/s of
  mark workers), and allocating goroutines are charged mark assists (running at 1/8 of their
  speed); STW phases grow to 0.3-2 ms. The CPU spans of every
  request in a mark (parse, merge, decode, tensor, auction, encode) stretch. gc_pause at ad-auction.
- `budget-cache-cold`: the budget Redis is replaced by an empty one at 30 % of the run (a deploy);
  every key misses, the primary store reads each missing advertiser's campaign records in one batch
  (its time grows with them), and the keys are written back, so misses decay as advertisers refill
  (popular ones first). The miss storm also loads the primary: its per-record time grows with the
  records read in the last 250 ms. cache_miss at `budget.lookup` (the Aerospike reads are slow
  calls: slow_dependency is side).
- `ctr-batcher-saturation`: a traffic burst (a big publisher's campaign) offers the model server
  1.15x its full-batch capacity for 12 % of the run (it runs at 31-39 % of it otherwise): batches
  fill up and requests wait in the batcher, longer and longer until the burst ends. The batch's
  own run time grows only with its rows. queueing at the model server (stage queue: the wait is
  `batching_queue` on TF Serving, the SERVER span's time before `inference` on TorchServe).
- `zone-jitter`: the auction pods in zone c sit on nodes whose uplink saturates: their cross-zone
  packets see ms of jitter and ~1 % of messages wait for a TCP retransmission (>= 200 ms). The gap
  between their CLIENT spans and the peer's SERVER spans grows; network at those pods (the shard
  calls that pass the deadline are retried: timeout_retry is side).
- `cpu-throttling`: the auction pods' CPU limit cut to ~1.25x their mean use; Go's 16 Ps spend the
  quota early in a busy period (GC marks add 4 cores' worth), and the pod is stopped until the
  period's end: every goroutine's work resumes on a 100 ms boundary, and a request arriving then
  is read after it (queueing is side).
- `many-slots`: 12 % of the requests come from an app feed asking for 20-48 slots, mostly video
  (VAST of 10-25 kB per bid, up to 3 bids a slot): the response reaches MBs, and
  `encode_bid_response` (encoding/json at ~35 MB/s) and the sidecar's transfer grow with it.
  large_payload at `encode_bid_response` (stage serialization).
- `shard-deadline-retry`: a new index build makes every shard pod swap segments under a write lock
  every 3-8 s, stalling its handlers 100-300 ms; calls that hit a stall end at the 50 ms deadline
  with DEADLINE_EXCEEDED and are retried on the other replica. timeout_retry at ad-auction (the
  stalled shards are side: slow_dependency).

Two causes: `gc-assist+straggler-shard`, `budget-cache-cold+ctr-batcher-saturation`,
`many-slots+shard-deadline-retry`.
"""

from __future__ import annotations

import random
from typing import Any

from reference_pipeline.simulate import ads_auction_spans as spans
from reference_pipeline.simulate.ads_auction_calls import (
    BudgetCache,
    ModelCall,
    ShardPod,
    campaigns,
    fan_out,
    hop,
    run_batcher,
)
from reference_pipeline.simulate.ads_auction_runtime import (
    PERIOD,
    PodClock,
    gc_cycles,
    gc_windows,
    throttle_windows,
)
from reference_pipeline.simulate.trace_table import (
    NS_PER_MS,
    NS_PER_S,
    Cause,
    Stalls,
    TraceTable,
    lognormal_ms,
    poisson_arrivals,
    random_pauses,
)

FAMILY = "ads-auction"
SCENARIOS = ("steady", "straggler-shard", "gc-assist", "budget-cache-cold", "ctr-batcher-saturation",
             "zone-jitter", "cpu-throttling", "many-slots", "shard-deadline-retry",
             "gc-assist+straggler-shard", "budget-cache-cold+ctr-batcher-saturation",
             "many-slots+shard-deadline-retry")
FORMATS = ("otlp-json", "jaeger", "zipkin")
DEADLINE_MS = 50.0
STRAGGLER_SHARD = 1
FLAKY_ZONE = 2


def setup(seed: int) -> dict[str, Any]:
    fmt = FORMATS[seed % 3]
    return {"fmt": fmt, "server": "torchserve" if seed % 2 == 0 else "tfserving",
            "shards": (8, 6, 12, 10)[seed % 4], "pods": (5, 4, 6)[seed % 3], "model_pods": 2,
            "load": (0.5, 0.45, 0.55)[seed % 3], "semconv": "new" if seed % 4 in (1, 2) else "old",
            "sidecar": fmt == "zipkin" or seed % 4 == 0, "gc_events": seed % 4 < 2,
            "instance_id": seed % 2 == 1, "straggler_replica": seed % 2,
            "pod_key": "host.name" if seed % 4 == 3 else "k8s.pod.name"}


def truth(scenario: str, seed: int) -> tuple[Cause, ...]:
    if scenario not in SCENARIOS:
        raise ValueError(f"unknown {FAMILY} scenario {scenario!r}; one of {', '.join(SCENARIOS)}")
    s = setup(seed)
    names = spans.Names(s)
    pods = tuple(names.auction_label(k) for k in range(s["pods"]))
    flaky = tuple(names.auction_label(k) for k in range(s["pods"]) if k % 3 == FLAKY_ZONE)
    model = spans.MODEL_SERVERS[s["server"]]
    models = tuple(names.model_label(k) for k in range(s["model_pods"]))
    causes = {
        "straggler-shard": Cause("slow_dependency", "downstream", spans.SHARD_RPC, spans.INDEX,
                                 (names.shard_label(STRAGGLER_SHARD, s["straggler_replica"]),),
                                 side=("timeout_retry",)),
        "gc-assist": Cause("gc_pause", None, names.root, spans.AUCTION, pods),
        "budget-cache-cold": Cause("cache_miss", "feature_hydration", "budget.lookup", spans.AUCTION, pods,
                                   side=("slow_dependency",)),
        "ctr-batcher-saturation": Cause("queueing", "queue", model["queue_span"], model["service"], models),
        "zone-jitter": Cause("network", "downstream", spans.SHARD_RPC, spans.AUCTION, flaky,
                             side=("timeout_retry",)),
        "cpu-throttling": Cause("cpu_throttling", None, names.root, spans.AUCTION, pods, side=("queueing",)),
        "many-slots": Cause("large_payload", "serialization", "encode_bid_response", spans.AUCTION, pods),
        "shard-deadline-retry": Cause("timeout_retry", "downstream", spans.SHARD_RPC, spans.AUCTION, pods,
                                      side=("slow_dependency",)),
    }
    return () if scenario == "steady" else tuple(causes[part] for part in scenario.split("+"))


def _draw_request(rng: random.Random, t0: float, s: dict[str, Any], feed: bool) -> dict[str, Any]:
    """What a bid request asks for and the CPU its handling needs (ns), drawn before any timing."""
    if feed:
        slots, video_share = rng.randint(20, 48), 0.6
    else:
        slots, video_share = rng.choices((1, 2, 3, 4), (50, 25, 15, 10))[0], 0.04
    resp = 200
    bids = 0
    for _ in range(slots):
        n = rng.choices((0, 1, 2, 3), (10, 45, 30, 15))[0]
        size = rng.uniform(10_000, 25_000) if rng.random() < video_share else rng.uniform(1_200, 2_500)
        bids += n
        resp += int(n * (size + 300))
    req = 600 + slots * rng.randint(700, 1_100)
    rows = rng.randint(60, 160)
    r = {"arrive": t0, "pod": rng.randrange(s["pods"]), "slots": slots, "bids": bids, "resp_bytes": resp,
         "req_bytes": req, "rows": rows, "k_adv": rng.randint(15, 45),
         "parse": lognormal_ms(rng, 0.12, 0.3) + req / 60e6 * 1e9,
         "merge": lognormal_ms(rng, 0.25 + 0.05 * s["shards"], 0.3),
         "tensor": lognormal_ms(rng, 0.3 + 0.004 * rows, 0.3),
         "auction": lognormal_ms(rng, 1.6 + 0.06 * slots, 0.35),
         "encode": lognormal_ms(rng, 0.08, 0.3) + resp / 35e6 * 1e9}
    r["cpu"] = r["parse"] + r["merge"] + r["tensor"] + r["auction"] + r["encode"] + 1.5 * NS_PER_MS
    return r


def _shard_pods(rng: random.Random, s: dict[str, Any], parts: set[str], horizon: float
                ) -> list[list[ShardPod]]:
    out = []
    for sh in range(s["shards"]):
        replicas = []
        for r in range(2):
            median, sigma = 3.5 * rng.uniform(0.85, 1.2), 0.35
            if "straggler-shard" in parts and (sh, r) == (STRAGGLER_SHARD, s["straggler_replica"]):
                median, sigma = median * 5.5, 0.45
            swaps = random_pauses(rng, horizon, (3.0, 8.0), (100.0, 300.0)) if (
                "shard-deadline-retry" in parts) else random_pauses(rng, horizon, (20.0, 60.0), (3.0, 10.0))
            replicas.append(ShardPod(sh, r, (sh + r) % 3, median, sigma, Stalls(swaps)))
        out.append(replicas)
    return out


def _clocks(rng: random.Random, s: dict[str, Any], parts: set[str], reqs: list[dict[str, Any]],
            horizon: float) -> tuple[list[PodClock], list[list[Any]]]:
    """Each auction pod's GC cycles (from its allocation) and, when throttled, its CFS stops."""
    steps = int(horizon // (5 * NS_PER_MS)) + 1
    clocks, cycles = [], []
    for p in range(s["pods"]):
        alloc = [0.0] * steps
        for r in reqs:
            if r["pod"] == p:
                alloc[min(int(r["arrive"] // (5 * NS_PER_MS)), steps - 1)] += 0.45 / 0.005  # MB/s
        live = [160.0] * steps
        if "gc-assist" in parts:
            for a, b in random_pauses(rng, horizon, (1.0, 3.0), (500.0, 1000.0)):
                for k in range(int(a // (5 * NS_PER_MS)), min(int(b // (5 * NS_PER_MS)), steps)):
                    alloc[k] += 1500.0
                    live[k] += 1000.0
        stw = (0.3, 2.0) if "gc-assist" in parts else (0.05, 0.4)
        mine = gc_cycles(rng, horizon, alloc, live, 100.0, 3_000.0, stw)
        windows = gc_windows(mine)
        if "cpu-throttling" in parts:
            phase = rng.uniform(0.0, PERIOD)
            demand = [0.0] * (int(horizon // PERIOD) + 2)
            for r in reqs:
                if r["pod"] == p:
                    demand[int((r["arrive"] - phase) // PERIOD) + 1] += r["cpu"] / NS_PER_MS
            quota = 1.25 * sum(demand) / max(1, int(reqs[-1]["arrive"] // PERIOD))
            windows += throttle_windows(demand, mine, quota, phase - PERIOD)
        clocks.append(PodClock(windows))
        cycles.append(mine)
    return clocks, cycles


def generate(scenario: str, requests: int, seed: int, **opts: Any) -> TraceTable:
    truth(scenario, seed)
    s = {**setup(seed), **opts}
    parts = set(scenario.split("+"))
    rng = random.Random(seed * 1_000_081 + 88)
    table = TraceTable(seed, 0xAD5)
    model = spans.MODEL_SERVERS[s["server"]]
    capacity = s["model_pods"] * model["workers"] * model["max_batch"] * 1000.0 / (
        model["fixed_ms"] + model["row_ms"] * 110.0 * model["max_batch"])
    rps = s["load"] * 0.7 * capacity  # the model fleet runs at `load` of 70 % of its full-batch capacity
    nominal = requests / rps
    bursts: tuple[tuple[float, float, float], ...] = ()
    if "ctr-batcher-saturation" in parts:
        bursts = ((0.55 * nominal, 0.12 * nominal, 1.15 / (s["load"] * 0.7)),)
    arrivals = poisson_arrivals(rng, rps, requests, bursts)
    horizon = arrivals[-1] + 3 * NS_PER_S
    reqs = [_draw_request(rng, t0, s, "many-slots" in parts and rng.random() < 0.12) for t0 in arrivals]
    clocks, cycles = _clocks(rng, s, parts, reqs, horizon)
    shards = _shard_pods(rng, s, parts, horizon)
    cache = BudgetCache(rng, horizon, 0.3 * nominal * NS_PER_S if "budget-cache-cold" in parts else None)
    deadline = DEADLINE_MS * NS_PER_MS
    names = spans.Names(s)
    res = spans.resources(table, rng, s, names)
    calls = []
    for i, r in enumerate(reqs):  # the request up to the model call, in arrival order
        clock, zone = clocks[r["pod"]], r["pod"] % 3
        flaky = "zone-jitter" in parts and zone == FLAKY_ZONE
        r["app_start"] = clock.settle(r["arrive"] + lognormal_ms(rng, 0.15, 0.3))
        r["parse_s"] = r["app_start"] + lognormal_ms(rng, 0.02, 0.4)
        r["parse_e"] = clock.run(r["parse_s"], r["parse"])
        r["fan_s"] = r["parse_e"] + lognormal_ms(rng, 0.01, 0.4)
        r["attempts"], done = fan_out(rng, r["fan_s"], clock, zone, flaky, shards, r["slots"], deadline)
        r["fan_e"] = clock.run(done, r["merge"])
        t = r["budget_s"] = r["fan_e"] + lognormal_ms(rng, 0.01, 0.4)
        advertisers = cache.advertisers(rng, r["k_adv"])
        missing = cache.missing(t, advertisers)
        r["adv"], r["missing"], r["records"] = len(advertisers), len(missing), sum(map(campaigns, missing))
        reply = clock.settle(t + 2 * hop(rng, zone != 0, flaky)
                             + lognormal_ms(rng, 0.12 + 0.003 * r["adv"], 0.3))
        r["mget"] = (t, clock.run(reply, lognormal_ms(rng, 0.02 + 0.002 * r["adv"], 0.3)))
        t = r["mget"][1]
        if missing:
            a_s = t + lognormal_ms(rng, 0.02, 0.4)
            slow = cache.primary_load(a_s, r["records"])
            a_e = clock.settle(a_s + 2 * hop(rng, zone != 0, flaky) + lognormal_ms(
                rng, 1.0 + 0.22 * r["records"] * slow, 0.25))
            w_e = clock.settle(a_e + 2 * hop(rng, zone != 0, flaky) + lognormal_ms(
                rng, 0.15 + 0.01 * len(missing), 0.3))
            r["aerospike"], r["pipeline"] = (a_s, a_e), (a_e, w_e)
            cache.write_back(missing)
            t = w_e
        r["budget_e"] = clock.run(t, lognormal_ms(rng, 0.03, 0.3))
        r["score_s"] = r["budget_e"] + lognormal_ms(rng, 0.01, 0.4)
        r["call_s"] = clock.run(r["score_s"], r["tensor"])
        m = rng.randrange(s["model_pods"])
        r["model_pod"] = m
        r["model_arrive"] = r["call_s"] + hop(rng, zone != m % 3, flaky) + lognormal_ms(rng, 0.05, 0.3)
        calls.append(ModelCall(r["model_arrive"], i, m, r["rows"]))
    batches = run_batcher(calls, s["model_pods"], model["workers"], model["max_batch"], model["delay_ms"],
                          lambda rows: lognormal_ms(rng, model["fixed_ms"] + model["row_ms"] * rows, 0.08))
    for i, r in enumerate(reqs):  # the rest of the request, now that the model answered
        clock, zone = clocks[r["pod"]], r["pod"] % 3
        flaky = "zone-jitter" in parts and zone == FLAKY_ZONE
        r["batch_s"], r["batch_e"], r["batch_size"] = batches[i]
        r["model_e"] = r["batch_e"] + lognormal_ms(rng, 0.08, 0.3)
        reply = r["model_e"] + hop(rng, zone != r["model_pod"] % 3, flaky)
        r["call_e"] = clock.run(clock.settle(reply), lognormal_ms(rng, 0.02 + 0.0005 * r["rows"], 0.3))
        r["score_e"] = clock.run(r["call_e"], lognormal_ms(rng, 0.02, 0.3))
        r["auction_s"] = r["score_e"] + lognormal_ms(rng, 0.01, 0.4)
        r["auction_e"] = clock.run(r["auction_s"], r["auction"])
        r["encode_s"] = r["auction_e"] + lognormal_ms(rng, 0.01, 0.4)
        r["encode_e"] = clock.run(r["encode_s"], r["encode"])
        r["app_end"] = clock.run(r["encode_e"], lognormal_ms(rng, 0.03, 0.3) + r["resp_bytes"] / 400e6 * 1e9)
        acked = r["encode_e"] + rng.uniform(0.5, 5.0) * NS_PER_MS + lognormal_ms(rng, 2.0, 0.4)  # linger, ack
        r["log"] = (r["encode_e"] + lognormal_ms(rng, 0.01, 0.4), clock.settle(acked))
        r["end"] = r["app_end"] + lognormal_ms(rng, 0.1, 0.3) + r["resp_bytes"] / 60e6 * 1e9
        spans.emit(table, s, names, res, r, cycles[r["pod"]])
    return table
