"""Blind family `php-faiss`: a PHP storefront's "similar products" endpoint calling a C++ retrieval
service (php_faiss_backends.py: the physics of the backends; php_faiss_spans.py: the conventions).

Shape: `storefront-nginx` (nginx with ngx_otel_module, in the same pod as PHP-FPM) receives
`GET /products/{id}/similar` and hands it over FastCGI to `storefront` (Laravel on PHP-FPM: a static
pool of pm.max_children worker processes per pod sharing one listen backlog; a request waits there
until a worker is free; one request per worker at a time; no threads, no GC events). Per request the
worker connects to a MySQL read replica through PDO (`PDO::__construct`: persistent connections are
reused per worker process, so a connect is only paid on a worker's first use of a replica), reads the
product (`PDOStatement::execute`), reads its embedding from Redis (`Redis::get`; a miss asks the
retrieval service's Embed endpoint and writes it back with `Redis::set`), calls
`ann.v1.Retrieval/Search` (gRPC; on the HTTP seed Guzzle's `GuzzleHttp\\Client::send` to
`POST /v1/search`; 1 s deadline, a failed call falls back to 24 bestsellers), hydrates the candidates
(`PDOStatement::execute`, `IN (...)`), re-ranks them (`SimilarProducts::rerank`, time per candidate)
and renders the Blade view (`view.render`, time per shown item). `ann-retrieval` (C++, 2-4 pods) serves
Search and Embed from a fixed pool of worker threads behind its completion queue: a call waits for a
worker, and its SERVER span starts when one takes it. Search scans `nprobe` inverted lists of a Faiss
IVF-PQ index memory-mapped from a volume (`faiss.search`); Embed tokenizes and runs a TensorRT encoder
behind a dynamic batcher (`encode_query` > `trt.enqueue`). A gRPC channel is persistent per PHP worker
process, so each worker keeps one retrieval pod (pick_first through the Service); Guzzle's connections
end with the request, so the HTTP seed picks a pod per call.

Healthy noise: jitter everywhere; 3 % embedding-cache misses; pm.max_requests = 500 recycles a few
workers mid-run (the new process pays a warm-up and its first connects); 1 % of MySQL statements hit a
cold buffer-pool page; Redis BGSAVE forks stall its event loop; jemalloc's background purge freezes each
retrieval process for ~1 ms every few seconds; one retrieval pod's index memory is NUMA-remote (scans
1.25x slower, all run).

Conventions by seed (seed % 3): 0: OTLP/JSON, new semconv (`server.address`, `db.query.text`), PHP and
nginx named by the OTel operator's `service.instance.id` (namespace.pod.container), C++ by host.name +
process.pid 1, gRPC, C++ manual spans exported. 1: Jaeger JSON, old semconv (`net.peer.name`,
`db.statement`), host.name + process.pid: every PHP-FPM worker process is its own instance (a recycled
worker comes back as a new one), HTTP via Guzzle, manual spans exported. 2: Zipkin v2, old semconv,
instances are endpoints (ip:port), gRPC, the C++ side exports only its SERVER spans.

Mechanisms (scenario: truth):
- `fpm-backlog`: a traffic burst above the pods' worker capacity (1.5x for 5 % of the run); requests
  wait in the FPM listen backlog between nginx's span start and the PHP span's start: queueing, stage
  queue, the Laravel SERVER span.
- `mysql-handshakes`: persistent connections turned off: every request pays a full connect (resolver,
  TCP, TLS 1.2, auth, session SETs: ~7 round trips + ~3 ms CPU) in `PDO::__construct`: network, stage
  feature_hydration (side: queueing, workers are held longer).
- `slow-replica`: one of three read replicas is I/O-bound (~6x, heavy tail); a third of the statements:
  slow_dependency at `PDOStatement::execute`.
- `embedding-evictions`: Redis at maxmemory evicts embedding keys (a new writer fills it; hit ratio
  0.97 -> 0.35 from 20 % of the run); misses run the GPU encoder through the batcher and are written
  back: cache_miss, stage feature_hydration, span = the Embed SERVER span (side: queueing at the
  batcher, slow_dependency).
- `index-swap`: a rolling swap to a new index from 25 % of the run; lists not yet in the page cache
  fault in from the volume (~2.6 ms per 880 KB list, one read at a time per pod), slow first
  queries decaying as popular lists become resident: cold_start at ann-retrieval (faiss.search, or the
  SERVER span where internals are not exported), accept cache_miss (the trace shows page-cache
  misses after the swap decaying: a cold cache and a cold instance read the same).
- `thp-stalls`: transparent-huge-page compaction (khugepaged / direct compaction holding mmap_lock)
  freezes one retrieval pod for tens of ms (median 60) every ~0.4 s; every in-flight call on it is
  stretched, calls arriving meanwhile are taken together when it ends, no runtime events anywhere:
  gc_pause (the vocabulary's name for a stop-the-world freeze of one process), accept cpu_throttling
  (its other name for a process-wide stall, a kernel-imposed one as this is; the vocabulary has none
  for a memory-management freeze, and neither name fits exactly: no runtime events, no ends on 100 ms
  period boundaries); side queueing and slow_dependency.
- `retrieval-saturation`: an untraced batch mailer sends heavy Search calls (nprobe 128, k 1000) for half
  the run; the worker pools run near saturation and the storefront's calls wait for a worker before
  their SERVER span starts: queueing at ann-retrieval (side: slow_dependency).
- `nprobe-raise`: nprobe 16 -> 128 after a recall tuning: every search scans 8x the lists:
  compute_bound at faiss.search (side: queueing, slow_dependency).
- `candidate-growth`: a "more like this" carousel asks ~7x the candidates (median 420) and renders up to
  120; hydration, re-rank and render grow with the count (`app.candidates.count`,
  `app.items.rendered`, response size): large_payload, stage postprocessing, `SimilarProducts::rerank`.
- Two causes: `slow-replica+thp-stalls`, `candidate-growth+embedding-evictions`,
  `fpm-backlog+mysql-handshakes` (the handshakes lengthen every worker's hold, the burst fills the backlog).

Truth instances: the instances the cause acts on as the store names them; for storefront causes on the
host-pid seed, the worker processes that exist from the start (replacements of recycled workers, born
mid-run, are not listed).
"""

from __future__ import annotations

import heapq
import random
from dataclasses import dataclass, field
from typing import Any

from reference_pipeline.simulate import php_faiss_spans as sp
from reference_pipeline.simulate.php_faiss_backends import (
    Batcher,
    Redis,
    RetrievalPod,
    connect_ms,
    freezes,
    list_popularity,
    query_ms,
)
from reference_pipeline.simulate.trace_table import (
    NS_PER_MS,
    NS_PER_S,
    Cause,
    Stalls,
    TraceTable,
    lognormal_ms,
    merge_intervals,
    poisson_arrivals,
)

FAMILY = "php-faiss"
SINGLES = ("fpm-backlog", "mysql-handshakes", "slow-replica", "embedding-evictions", "index-swap",
           "thp-stalls", "retrieval-saturation", "nprobe-raise", "candidate-growth")
PAIRS = ("slow-replica+thp-stalls", "candidate-growth+embedding-evictions", "fpm-backlog+mysql-handshakes")
SCENARIOS = ("steady", *SINGLES, *PAIRS)
MAX_REQUESTS = 500  # pm.max_requests
DEADLINE_MS = 1000.0
SLOW_REPLICA, NUMA_POD = 1, 0
_SETUPS = (
    {"fmt": "otlp-json", "semconv": "new", "ident": "instance-id", "transport": "grpc", "internals": True,
     "web_pods": 4, "workers": 8, "ann_pods": 3, "threads": 4, "rps": 200.0, "db_rtt_ms": 1.8},
    {"fmt": "jaeger", "semconv": "old", "ident": "host-pid", "transport": "http", "internals": True,
     "web_pods": 3, "workers": 10, "ann_pods": 2, "threads": 6, "rps": 170.0, "db_rtt_ms": 2.0},
    {"fmt": "zipkin", "semconv": "old", "ident": "endpoint", "transport": "grpc", "internals": False,
     "web_pods": 5, "workers": 6, "ann_pods": 4, "threads": 4, "rps": 240.0, "db_rtt_ms": 1.5},
)


def setup(seed: int) -> dict[str, Any]:
    return dict(_SETUPS[seed % 3])


def style(seed: int) -> sp.Style:
    s = setup(seed)
    return sp.Style(s["semconv"], s["ident"], s["transport"], s["internals"])


def thp_pod(seed: int) -> int:
    return 1 % setup(seed)["ann_pods"]


def truth(scenario: str, seed: int) -> tuple[Cause, ...]:
    if scenario not in SCENARIOS:
        raise ValueError(f"unknown {FAMILY} scenario {scenario!r}; one of {', '.join(SCENARIOS)}")
    s, st = setup(seed), style(seed)
    web = tuple(dict.fromkeys(st.label(sp.WEB, k, sp.first_pid(w))
                              for k in range(s["web_pods"]) for w in range(s["workers"])))
    ann = tuple(st.label(sp.ANN, j) for j in range(s["ann_pods"]))
    scan = st.scan_span()
    causes = {
        "fpm-backlog": Cause("queueing", "queue", st.root, sp.WEB, web),
        "mysql-handshakes": Cause("network", "feature_hydration", sp.CONNECT, sp.WEB, web,
                                  side=("queueing",)),
        "slow-replica": Cause("slow_dependency", "feature_hydration", sp.EXECUTE, sp.WEB, web),
        "embedding-evictions": Cause("cache_miss", "feature_hydration", st.server("embed"), sp.WEB, web,
                                     side=("queueing", "slow_dependency")),
        "index-swap": Cause("cold_start", "downstream", scan, sp.ANN, ann, accept=("cache_miss",),
                            side=("queueing", "slow_dependency")),
        "thp-stalls": Cause("gc_pause", "downstream", scan, sp.ANN, (ann[thp_pod(seed)],),
                            accept=("cpu_throttling",), side=("queueing", "slow_dependency")),
        "retrieval-saturation": Cause("queueing", "downstream", st.server("search"), sp.ANN, ann,
                                      side=("slow_dependency",)),
        "nprobe-raise": Cause("compute_bound", "downstream", scan, sp.ANN, ann,
                              side=("queueing", "slow_dependency")),
        "candidate-growth": Cause("large_payload", "postprocessing", sp.RERANK, sp.WEB, web),
    }
    return tuple(causes[part] for part in scenario.split("+") if part != "steady")


@dataclass
class _Worker:
    pid: int
    served: int
    ann_pod: int
    fresh: bool = False
    conns: set[int] = field(default_factory=set)


@dataclass
class _Fpm:
    """One pod's static pool: workers taken in order of when they free up (the shared backlog)."""

    workers: list[_Worker]
    free: list[tuple[float, int]]
    next_pid: int


def _storefront(rng: random.Random, s: dict[str, Any], ann_pods: int) -> list[_Fpm]:
    out = []
    for _ in range(s["web_pods"]):
        workers = [_Worker(sp.first_pid(w), rng.randrange(MAX_REQUESTS), rng.randrange(ann_pods),
                           conns=set(range(len(sp.REPLICAS)))) for w in range(s["workers"])]  # mid-life
        out.append(_Fpm(workers, [(0.0, w) for w in range(s["workers"])], sp.first_pid(s["workers"])))
    return out


def _retrieval(rng: random.Random, s: dict[str, Any], parts: set[str], run_ns: float,
               horizon: float, seed: int) -> list[RetrievalPod]:
    popularity = list_popularity(1.3)
    pods = []
    for j in range(s["ann_pods"]):
        pauses = freezes(rng, horizon, 4.0, 1.0, 0.4)  # jemalloc background purge
        if "thp-stalls" in parts and j == thp_pod(seed):
            pauses += freezes(rng, horizon, 0.4, 60.0, 0.5)
        batcher = Batcher(16, 2.0 * NS_PER_MS, 12.0 * NS_PER_MS, 2.0 * NS_PER_MS)
        swap = (0.25 + 0.12 * j / s["ann_pods"]) * run_ns if "index-swap" in parts else None
        pods.append(RetrievalPod(s["threads"], 1.25 if j == NUMA_POD else 1.0,
                                 Stalls(merge_intervals(pauses)), batcher, popularity, swap))
    return pods


def _call(rng: random.Random, pod: RetrievalPod, start: float, method: str, nprobe: int, k: int,
          http: bool) -> tuple[Any, float, bool]:
    """(what the pod did, the CLIENT span's end, whether the 1 s deadline cut it). Guzzle's curl
    handle lives as long as the PHP request: each HTTP call opens its TCP connection first."""
    net = 0.15 * NS_PER_MS
    handshake = 2 * net * rng.lognormvariate(0.0, 0.3) if http else 0.0
    arrive = start + handshake + net * rng.lognormvariate(0.0, 0.3)
    served = pod.search(rng, arrive, nprobe, k) if method == "search" else pod.embed(rng, arrive)
    decode = (0.04 + (0.0025 * k if method == "search" else 0.01)) * NS_PER_MS
    end = served.end + net * rng.lognormvariate(0.0, 0.3) + decode
    deadline = start + DEADLINE_MS * NS_PER_MS
    return served, (deadline + 0.2 * NS_PER_MS if end > deadline else end), end > deadline


def generate(scenario: str, requests: int, seed: int, **opts: Any) -> TraceTable:
    truth(scenario, seed)
    s = {**setup(seed), **opts}
    parts = set(scenario.split("+")) - {"steady"}
    rng = random.Random(seed * 1_000_003 + 1919)
    table = TraceTable(seed, 0x19F)
    st = style(seed)
    res = sp.Resources(table, st)
    run_s = requests / s["rps"]
    bursts = ()
    if "fpm-backlog" in parts:
        capacity = s["web_pods"] * s["workers"] / 0.035  # requests/s the pools serve at ~35 ms each
        bursts = ((0.35 * run_s, 0.05 * run_s, 1.5 * capacity / s["rps"]),)
    arrivals = poisson_arrivals(rng, s["rps"], requests, bursts)
    horizon = arrivals[-1] + 30 * NS_PER_S
    run_ns = run_s * NS_PER_S
    ann = _retrieval(rng, s, parts, run_ns, horizon, seed)
    fpm = _storefront(rng, s, len(ann))
    redis = Redis(Stalls(freezes(rng, horizon, 6.0, 9.0, 0.3)), 0.3)
    events = [(t, 0) for t in arrivals]
    if "retrieval-saturation" in parts:
        rate = 0.75 * s["threads"] * len(ann) / 0.033  # heavy calls of ~33 ms each
        events += [(0.3 * run_ns + t, 1) for t in poisson_arrivals(rng, rate, int(rate * 0.5 * run_s))]
    persistent = "mysql-handshakes" not in parts
    nprobe = 128 if "nprobe-raise" in parts else 16
    storm = (0.2 * run_ns, 0.28 * run_ns)  # evictions start, full thrash from
    for t0, kind in sorted(events):
        if kind == 1:
            j = rng.randrange(len(ann))
            served = ann[j].search(rng, t0, 128, 1000)
            sp.write_search(table, res, table.new_trace(), None, j, served, 128, 1000,
                            ann[j].swap_at is not None and served.scan_start >= ann[j].swap_at)
            continue
        k_pod = rng.randrange(len(fpm))
        pool = fpm[k_pod]
        free_at, slot = heapq.heappop(pool.free)
        w = pool.workers[slot]
        root_s = max(t0 + lognormal_ms(rng, 0.12, 0.3), free_at) + lognormal_ms(rng, 0.03, 0.3)
        t = root_s + lognormal_ms(rng, 8.0, 0.25) + (lognormal_ms(rng, 12.0, 0.35) if w.fresh else 0.0)
        replica = rng.randrange(len(sp.REPLICAS))
        slow = "slow-replica" in parts and replica == SLOW_REPLICA
        full = not persistent or replica not in w.conns
        con_s = t
        con_e = t + (connect_ms(rng, s["db_rtt_ms"]) if full else lognormal_ms(rng, 0.03, 0.3))
        if persistent:
            w.conns.add(replica)
        q1 = (con_e + lognormal_ms(rng, 0.03, 0.3), 0.0)
        q1 = (q1[0], q1[0] + query_ms(rng, s["db_rtt_ms"], 1, slow))
        share = 0.0
        if "embedding-evictions" in parts and t0 >= storm[0]:
            share = min(1.0, (t0 - storm[0]) / (storm[1] - storm[0]))
        get_s = q1[1] + lognormal_ms(rng, 0.1, 0.3)
        get_e = redis.call(rng, get_s, share > 0)
        t = get_e + lognormal_ms(rng, 0.05, 0.3)
        embed = cache_set = None
        if rng.random() >= 0.97 - 0.62 * share:
            j = w.ann_pod if st.transport == "grpc" else rng.randrange(len(ann))
            served, end, failed = _call(rng, ann[j], t, "embed", nprobe, 0, st.transport == "http")
            embed = sp.Call(t, end, failed, j, served)
            t = end + lognormal_ms(rng, 0.08, 0.3)
            if not failed:
                cache_set = (t, redis.call(rng, t, share > 0))
                t = cache_set[1]
        growth = "candidate-growth" in parts
        k = int(min(2000, max(60, 420 * rng.lognormvariate(0, 0.5)))) if growth else int(
            min(300, max(12, 60 * rng.lognormvariate(0, 0.4))))
        call_s = t + lognormal_ms(rng, 0.05, 0.3)
        j = w.ann_pod if st.transport == "grpc" else rng.randrange(len(ann))
        served, call_e, failed = _call(rng, ann[j], call_s, "search", nprobe, k, st.transport == "http")
        swapped = ann[j].swap_at is not None and served.scan_start >= ann[j].swap_at
        candidates = 24 if failed else k
        shown = min(candidates, 120 if growth else 24)
        h_s = call_e + lognormal_ms(rng, 0.05, 0.3)
        h_e = h_s + query_ms(rng, s["db_rtt_ms"], candidates, slow)
        r_s = h_e + lognormal_ms(rng, 0.02, 0.3)
        r_e = r_s + (0.4 + 0.035 * candidates) * NS_PER_MS * rng.lognormvariate(0.0, 0.15)
        v_s = r_e + lognormal_ms(rng, 0.02, 0.3)
        v_e = v_s + (1.4 + 0.09 * shown) * NS_PER_MS * rng.lognormvariate(0.0, 0.15)
        root_e = v_e + (0.15 + 0.004 * candidates + 0.003 * shown) * NS_PER_MS + lognormal_ms(rng, 0.1, 0.3)
        nginx_e = root_e + lognormal_ms(rng, 0.08, 0.3)
        sp.write_request(table, res, sp.Timeline(
            k_pod, w.pid, replica, (t0, nginx_e), (root_s, root_e), (con_s, con_e), q1, (get_s, get_e), embed,
            cache_set, sp.Call(call_s, call_e, failed, j, served), nprobe, k, (h_s, h_e), (r_s, r_e),
            (v_s, v_e), shown, candidates, rng.randrange(10_000, 990_000), swapped))
        freed = root_e + lognormal_ms(rng, 0.8, 0.4)  # the SDK's span export at request shutdown
        w.served, w.fresh = w.served + 1, False
        if w.served >= MAX_REQUESTS:  # pm.max_requests: the master forks a replacement
            pool.workers[slot] = _Worker(pool.next_pid, 0, rng.randrange(len(ann)), fresh=True)
            pool.next_pid += 1
            freed += lognormal_ms(rng, 2.0, 0.3)
        heapq.heappush(pool.free, (freed, slot))
    return table
