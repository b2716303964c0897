"""Blind family `cpp-thrift`: a feed-recommendation ranking service in C++ on fbthrift
(cpp_thrift_host.py: the physics of a ranker host and of its backends; cpp_thrift_spans.py: the
conventions). No garbage collector anywhere in the serving path.

Shape: `feed-api` (8-16 processes) serves `FeedService/getFeed` and calls `ranker.Ranker/rank` over
Thrift; its client-side load balancer picks a ranker host by power of two choices (the one of two random
healthy hosts with fewer of its own calls outstanding: each process counts only its own). Traces are
head-sampled at the feed-api (1 in 4-6 requests); every request, sampled or not, goes through the model,
so the traced ones see the load of all. `ranker` (6-8 hosts, C++): IO threads (epoll loops) read a
request and put it on the bounded queue of a fixed CPU worker pool (24-32 threads on 16 cores); a
request waits there until a worker is free (its `ranker.Rank` SERVER span starts when the handler runs;
a full queue sheds the request with a loadshedding error and the feed-api retries once on another host).
The handler is synchronous (the worker blocks on each call's future): a multiget through the host's
mcrouter (consistent hashing over 16 memcached boxes, per-shard requests in parallel; a box marked down
is served by the failover route to the other region, +30-60 ms), on a miss `FeatureService.getFeatures`
on the Java feature service; the user's embedding from an in-process LRU (a miss calls
`getUserEmbedding`); the TorchScript ranking model in process (4 intra-op threads; its work grows with
the candidate count, 200-2000; when more intra-op threads are running than cores, each inference gets a
share); the re-ranking model on the top 50; `AdsBlender.blend` on the ads-blending service (80 ms client
timeout; a hedged retry to another host after 40 ms, first answer wins, the loser cancelled; both
failed: no ads); the counter bumps under the process-wide metrics std::mutex; the reply. Memory:
jemalloc, THP `always`: a host whose memory fragmented enters direct compaction when it faults, and the
faulting thread stalls 50-500 ms, with any other thread that faults meanwhile (not every thread). NUMA:
a process on one socket with its memory on the other computes 20-40 % slower.

Healthy noise: jitter; 0.4 % of memcached keys miss; 8 % of embedding lookups miss; brief THP stalls
(a few ms) now and then on every host; the metrics exporter scrape every 15 s holds the mutex a few ms;
young-GC pauses in the Java feature service; a slow auction in 0.6 % of blends (some hedges fire);
retransmits at memcached.

Conventions by seed (seed % 3): 0: OTLP/JSON, new semconv (`server.address`, `db.operation.name`), a
random `service.instance.id` per process, the ranker's manual spans exported, the candidate count on
the forward span, no runtime events. 1: Jaeger JSON, old semconv (`net.peer.name`), host.name +
process.pid, manual spans exported, no candidate count, a `process.runtime.page_fault_stall` span
event for each page-fault stall of 20 ms or more. 2: Zipkin v2, old semconv, instances are endpoints
(ip:port), only the Thrift and memcache spans (no manual spans inside the handler), the candidate count
on the SERVER span, no runtime events.

Mechanisms (scenario: truth):
- `thp-compaction`: one host's memory is fragmented after a long uptime: direct compaction windows
  (median 170 ms, 50-500) every ~0.5 s; a thread that faults in one (an inference, allocating most,
  80 % of the time; other steps less) stalls to its end, others run on: gc_pause (the vocabulary's
  name for a memory-management pause of a process's threads; no collector here, but it is the memory
  manager's pause), accept cpu_throttling (the kernel holding the process's threads off useful work);
  stage model_forward, the forward span (the SERVER span where manual spans are not exported); side
  queueing.
- `slow-metrics-scrape`: the exporter's scrape holds the metrics mutex 250-1200 ms (median 600) every
  15 s on every host; handlers finishing meanwhile block on the counter bump, the pool fills:
  lock_contention, stage postprocessing, `ServiceStats::record` (or the SERVER span); side queueing.
- `worker-burst`: a burst to ~1.3x what the fleet's cores serve, for 6 % of the run: the cores and
  then the worker pools saturate; requests wait in the bounded queue (for up to ~0.5 s; alone the
  burst does not reach the bound of 4x the workers, with `candidate-growth` it does: ~9 % of the
  first attempts shed at 2,000 requests, each retried on another host): queueing, stage queue, the
  SERVER span; side compute_bound (inferences share the cores).
- `numa-remote`: one host moved to a cgroup on one socket (8 cores) with its memory left on the
  other: its compute 1.4x slower on half the cores: compute_bound at the forward span on that host
  (side queueing).
- `memcached-evictions`: the key space grew past the tier's memory: key misses 0.4 % -> 18 % from 20 %
  of the run (ramping over a tenth of it); misses go to the feature service, busier (2.5x the work,
  a longer tail): cache_miss, stage feature_hydration, `Thrift/Client/getFeatures` (side
  slow_dependency).
- `mcrouter-failover`: one memcached box marked down from 25 % of the run: its shard's keys are served
  from the other region (+30-60 ms) and a multiget waits for its slowest shard: network, stage
  feature_hydration, `Memcache/Client/multiget`, accept slow_dependency.
- `rolling-restart`: half the hosts restarted one after another: each comes back as a new process
  with an empty embedding LRU (misses call the feature service, refilling over minutes) and cold
  TorchScript graphs (each worker thread's first runs profile them): cache_miss at
  `Thrift/Client/getUserEmbedding`, stage feature_hydration, the restarted processes; accept
  cold_start (they are new instances, slow until warm).
- `slow-ads-blender`: the ads-blending service slows (median 16 -> 58 ms, heavy tail) from 20 % of the
  run: hedges fire at 40 ms, attempts time out at 80 ms, some requests lose their ads: timeout_retry,
  stage downstream, `Thrift/Client/blendAds`, accept slow_dependency (side queueing).
- `candidate-growth`: a product change sends ~2.5x the candidates (500-6000): the ranking model's work
  grows with the count: compute_bound at the forward span, accept large_payload (the request's
  candidate list is what grew); side queueing.
- `cpu-steal`: a noisy neighbour on one host's hypervisor steals 45 % of its CPU: everything it runs
  is slower, continuously (no pause, no period boundary): cpu_throttling (the process gets less CPU
  than it asks for), accept compute_bound; stage model_forward, that host.
- Two causes: `thp-compaction+slow-metrics-scrape`, `memcached-evictions+slow-ads-blender`,
  `candidate-growth+worker-burst`.

Truth instances: ranker processes as the store names them; for `rolling-restart`, the restarted
processes (on the endpoint seed the same ip:port as before).
"""

from __future__ import annotations

import random
from typing import Any

from reference_pipeline.simulate import cpp_thrift_spans as sp
from reference_pipeline.simulate.cpp_thrift_flow import Run
from reference_pipeline.simulate.trace_table import Cause, TraceTable

FAMILY = "cpp-thrift"
SINGLES = ("thp-compaction", "slow-metrics-scrape", "worker-burst", "numa-remote", "memcached-evictions",
           "mcrouter-failover", "rolling-restart", "slow-ads-blender", "candidate-growth", "cpu-steal")
PAIRS = ("thp-compaction+slow-metrics-scrape", "memcached-evictions+slow-ads-blender",
         "candidate-growth+worker-burst")
SCENARIOS = ("steady", *SINGLES, *PAIRS)
_SETUPS = (
    {"fmt": "otlp-json", "semconv": "new", "ident": "instance-id", "internals": True, "count_on": sp.FORWARD,
     "stall_events": False, "transport": "http2", "hosts": 8, "workers": 32,
     "rps": 100.0, "sample": 5, "feeds": 12},
    {"fmt": "jaeger", "semconv": "old", "ident": "host-pid", "internals": True, "count_on": None,
     "stall_events": True, "transport": "framed", "hosts": 6, "workers": 24,
     "rps": 80.0, "sample": 6, "feeds": 8},
    {"fmt": "zipkin", "semconv": "old", "ident": "endpoint", "internals": False, "count_on": sp.RANK,
     "stall_events": False, "transport": "http2", "hosts": 6, "workers": 32,
     "rps": 110.0, "sample": 4, "feeds": 16},
)


def setup(seed: int) -> dict[str, Any]:
    return dict(_SETUPS[seed % 3])


def style(seed: int) -> sp.Style:
    s = setup(seed)
    return sp.Style(seed, s["semconv"], s["ident"], s["internals"], s["count_on"], s["stall_events"],
                    s["transport"])


def special_host(seed: int, what: str) -> int:
    """The one host a single-host cause acts on."""
    hosts = setup(seed)["hosts"]
    return {"thp-compaction": 2, "numa-remote": 3, "cpu-steal": 4}[what] % hosts


def restarted(seed: int) -> tuple[int, ...]:
    """The hosts a rolling restart takes down, in order (half of them)."""
    return tuple(range(setup(seed)["hosts"] // 2))


def truth(scenario: str, seed: int) -> tuple[Cause, ...]:
    if scenario not in SCENARIOS:
        raise ValueError(f"unknown {FAMILY} scenario {scenario!r}; one of {', '.join(SCENARIOS)}")
    s, st = setup(seed), style(seed)
    hosts = tuple(st.label(sp.RANKER, k) for k in range(s["hosts"]))

    def one(what: str) -> tuple[str, ...]:
        return (st.label(sp.RANKER, special_host(seed, what)),)

    fwd = st.forward_span()
    causes = {
        "thp-compaction": Cause("gc_pause", "model_forward", fwd, sp.RANKER, one("thp-compaction"),
                                accept=("cpu_throttling",), side=("queueing",)),
        "slow-metrics-scrape": Cause("lock_contention", "postprocessing", st.stats_span(), sp.RANKER, hosts,
                                     side=("queueing",)),
        "worker-burst": Cause("queueing", "queue", sp.RANK, sp.RANKER, hosts, side=("compute_bound",)),
        "numa-remote": Cause("compute_bound", "model_forward", fwd, sp.RANKER, one("numa-remote"),
                             side=("queueing",)),
        "memcached-evictions": Cause("cache_miss", "feature_hydration", sp.GET_FEATURES, sp.RANKER, hosts,
                                     side=("slow_dependency",)),
        "mcrouter-failover": Cause("network", "feature_hydration", sp.MULTIGET, sp.RANKER, hosts,
                                   accept=("slow_dependency",)),
        "rolling-restart": Cause("cache_miss", "feature_hydration", sp.GET_EMBEDDING, sp.RANKER,
                                 tuple(st.label(sp.RANKER, k, 1) for k in restarted(seed)),
                                 accept=("cold_start",), side=("queueing",)),
        "slow-ads-blender": Cause("timeout_retry", "downstream", sp.BLEND, sp.RANKER, hosts,
                                  accept=("slow_dependency",), side=("queueing",)),
        "candidate-growth": Cause("compute_bound", "model_forward", fwd, sp.RANKER, hosts,
                                  accept=("large_payload",), side=("queueing",)),
        "cpu-steal": Cause("cpu_throttling", "model_forward", fwd, sp.RANKER, one("cpu-steal"),
                           accept=("compute_bound",)),
    }
    return tuple(causes[part] for part in scenario.split("+") if part != "steady")


def generate(scenario: str, requests: int, seed: int, **opts: Any) -> TraceTable:
    truth(scenario, seed)
    s = {**setup(seed), **opts}
    parts = frozenset(scenario.split("+")) - {"steady"}
    rng = random.Random(seed * 1_000_003 + 2828)
    table = TraceTable(seed, 0x28C)
    res = sp.Resources(table, style(seed))
    run = Run(rng, s, parts, requests, {w: special_host(seed, w) for w in ("thp-compaction", "numa-remote",
                                                                         "cpu-steal")}, restarted(seed))
    for request in run.requests():
        sp.write_request(table, res, request)
    return table
