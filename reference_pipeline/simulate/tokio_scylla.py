"""Blind family `tokio-scylla`: a text-embedding + re-ranking API in Rust (tokio_scylla_runtime.py: the
physics; tokio_scylla_spans.py: the conventions).

Shape: `search-gateway` (Go, 2 pods) serves `GET /api/search` and calls `embed-api` (`POST /v1/rerank`;
axum on a multi-threaded tokio runtime, one worker thread per core: 4-8 cores, 3-5 pods). The handler's
task runs on one worker; every poll that computes without yielding holds that worker, and the tasks
queued behind it wait (another worker steals some of them after a while, never the one running). Per
request: tokenisation inline (`embed_api::text::tokenize`), then `join!` of the features and the query
embedding. Features (`embed_api::features::load`): a RocksDB multi-get inline (block-cache misses read
the local SSD), the user's features from ScyllaDB (always; `user_features`) and the item vectors the
cache lacks (`item_vectors`); the misses are written back inline (`embed_api::cache::put`). ScyllaDB:
3 or 6 nodes, RF 3, shard-per-core; the driver is token-aware (the coordinator is a replica); LOCAL_ONE
or QUORUM by seed; the table's `speculative_retry = '99.0PERCENTILE'` (Scylla's default) makes the
coordinator ask one more replica after the p99 of its recent replica reads (so the threshold rises when
many reads are slow; the driver sees none of it: one driver attempt per read).
The query embedding (a moka LRU in front, 12 % hits) comes from an external provider over HTTPS in the
same cloud region (5 ms RTT; `embed_api::provider::embed`, reqwest on hyper: a per-host keep-alive pool;
the provider's edge closes a connection after 16-20 requests, so some calls open a new one: getaddrinfo
on the blocking pool under ndots:5 (three search domains answer NXDOMAIN before the name itself), TCP,
TLS 1.3). Re-ranking: a cross-encoder in ONNX Runtime (`ort::session::run`, one intra-op thread, 0.4 ms
per candidate, ~40 candidates) behind `spawn_blocking` (a bounded pool: 4x the cores; its CPU-bound jobs
share the cores), wrapped by `embed_api::rerank::score`, whose span also covers the wait for a thread.

Healthy noise: jitter everywhere; 4 % block-cache misses; 25 % of requests miss some item vectors;
1 % of user reads and 25 % of item reads touch an SSTable; speculative reads now and then; connection
churn (new connections, DNS, handshakes); a rare conntrack-raced DNS packet (5 s); RocksDB's short
write slowdowns on every pod; 3 % anonymous users (one partition).

Conventions by seed (seed % 3): 0: OTLP/JSON, new semconv, `service.instance.id`, driver and
hyper-util spans exported, tower-http span named `POST /v1/rerank`. 1: Jaeger JSON, old semconv,
host.name + process.pid, only our own spans (the reads are CLIENT spans), tower-http's default span
name `request`, QUORUM on 6 nodes. 2: Zipkin v2, old semconv, endpoints (ip:port), internals exported.
No runtime or GC events anywhere (Rust; tokio emits no spans).

Mechanisms (scenario: truth):
- `inline-rerank`: a deploy calls the re-ranker directly from the async handler; each run holds its
  worker for its whole length and the co-scheduled tasks wait (server spans start late behind the
  gateway's CLIENT span, gaps open between a request's children): queueing at the server span, accept
  compute_bound (the blocking compute is the reason).
- `blocking-burst`: a traffic burst (3.5x for 7 % of the run); the re-rank jobs share the cores, the
  blocking pool fills and jobs wait for a thread inside `embed_api::rerank::score` before
  `ort::session::run` starts: queueing (side compute_bound: the runs stretch while the cores are shared).
- `hot-partition`: a campaign sends 35 % anonymous traffic from 15 % of the run; the anonymous user's
  partition is large and read by other clients too, so its shard on each replica queues (the
  coordinator's speculative reads land on the same hot shard of another replica): slow_dependency at
  `user_features`, accept queueing.
- `scylla-compaction`: a major compaction on one node: its reads are slower and, as coordinator, it
  relays late; speculative retry rescues some of the reads it does not coordinate: slow_dependency at
  `user_features`.
- `rocksdb-write-stall`: on one pod L0 files pile up; writes slow, then stop until compaction catches
  up; the inline `cache::put` holds its worker meanwhile (side queueing on that pod):
  slow_dependency at `embed_api::cache::put`, accept lock_contention (writers wait on the stall).
- `dns-conntrack`: a kube-proxy change sends lookups through conntrack'd DNAT; A/AAAA packets sent
  together lose the insert race (10 % per pair), each loss waits glibc's 5 s timeout: network at the
  provider CLIENT span, accept timeout_retry (side queueing: the lookups hold blocking threads).
- `provider-rate-limit`: the minute's quota runs out at 55 % of the run; calls until the reset get 429 +
  Retry-After and retry after it: timeout_retry at the provider CLIENT span, accept slow_dependency.
- `syn-retransmit`: the provider's edge closes every pooled connection at 40 % of the run; all clients
  reconnect, its listen queue overflows and SYNs are dropped for 1.5 s: 1 s (3 s) retransmission
  timeouts: network at the provider CLIENT span.
- `nagle-delayed-ack`: a client-library upgrade drops TCP_NODELAY; the body, written after the headers,
  waits for the ACK the provider delays ~40 ms on every reused connection: network at the provider
  CLIENT span, accept slow_dependency.
- `reranker-swap`: MiniLM-L-12 replaces MiniLM-L-6 (twice the layers: 1.8x the time per candidate):
  compute_bound at `ort::session::run` (side queueing at the blocking pool).
- Two causes: `scylla-compaction+dns-conntrack`, `hot-partition+nagle-delayed-ack`,
  `rocksdb-write-stall+provider-rate-limit`.

Truth instances: the embed-api pods as the store names them (all of them; the stalled pod alone for
`rocksdb-write-stall`). Scylla and the provider export no spans: their causes are named where their
time shows, at the embed-api's spans.
"""

from __future__ import annotations

import heapq
import random
from typing import Any

from reference_pipeline.simulate import tokio_scylla_spans as sp
from reference_pipeline.simulate.tokio_scylla_runtime import (
    DELAYED_ACK_MS,
    BlockingPool,
    ProviderPool,
    RateLimit,
    RocksDb,
    Runtime,
    Scylla,
    Shard,
    resolve_ms,
    syn_ms,
    write_stalls,
)
from reference_pipeline.simulate.trace_table import (
    NS_PER_MS,
    NS_PER_S,
    Cause,
    TraceTable,
    lognormal_ms,
    poisson_arrivals,
)

FAMILY = "tokio-scylla"
SINGLES = ("inline-rerank", "blocking-burst", "hot-partition", "scylla-compaction", "rocksdb-write-stall",
           "dns-conntrack", "provider-rate-limit", "syn-retransmit", "nagle-delayed-ack", "reranker-swap")
PAIRS = ("scylla-compaction+dns-conntrack", "hot-partition+nagle-delayed-ack",
         "rocksdb-write-stall+provider-rate-limit")
SCENARIOS = ("steady", *SINGLES, *PAIRS)
COMPACTING_NODE = 1
PROVIDER_RTT_MS = 5.0  # the provider serves from the same cloud region
_SETUPS = (
    {"fmt": "otlp-json", "semconv": "new", "ident": "instance-id", "internals": True,
     "server": "POST /v1/rerank", "pods": 4, "cores": 4, "rps": 520.0, "nodes": 3, "quorum": False,
     "spec_ms": 6.0, "max_uses": 20},
    {"fmt": "jaeger", "semconv": "old", "ident": "host-pid", "internals": False, "server": "request",
     "pods": 3, "cores": 8, "rps": 700.0, "nodes": 6, "quorum": True, "spec_ms": 8.0, "max_uses": 16},
    {"fmt": "zipkin", "semconv": "old", "ident": "endpoint", "internals": True, "server": "POST /v1/rerank",
     "pods": 5, "cores": 6, "rps": 860.0, "nodes": 3, "quorum": False, "spec_ms": 5.0, "max_uses": 16},
)


def setup(seed: int) -> dict[str, Any]:
    return dict(_SETUPS[seed % 3])


def style(seed: int) -> sp.Style:
    s = setup(seed)
    return sp.Style(s["semconv"], s["ident"], s["internals"], s["server"])


def stall_pod(seed: int) -> int:
    return 1 % setup(seed)["pods"]


def truth(scenario: str, seed: int) -> tuple[Cause, ...]:
    if scenario not in SCENARIOS:
        raise ValueError(f"unknown {FAMILY} scenario {scenario!r}; one of {', '.join(SCENARIOS)}")
    s, st = setup(seed), style(seed)
    pods = tuple(st.label(sp.API, k) for k in range(s["pods"]))
    causes = {
        "inline-rerank": Cause("queueing", "queue", st.server, sp.API, pods, accept=("compute_bound",)),
        "blocking-burst": Cause("queueing", "queue", sp.RERANK, sp.API, pods, side=("compute_bound",)),
        "hot-partition": Cause("slow_dependency", "feature_hydration", sp.USER, sp.API, pods,
                               accept=("queueing",)),
        "scylla-compaction": Cause("slow_dependency", "feature_hydration", sp.USER, sp.API, pods),
        "rocksdb-write-stall": Cause("slow_dependency", "feature_hydration", sp.CACHE_PUT, sp.API,
                                     (pods[stall_pod(seed)],), accept=("lock_contention",),
                                     side=("queueing",)),
        "dns-conntrack": Cause("network", "downstream", st.client, sp.API, pods, accept=("timeout_retry",),
                               side=("queueing",)),
        "provider-rate-limit": Cause("timeout_retry", "downstream", st.client, sp.API, pods,
                                     accept=("slow_dependency",)),
        "syn-retransmit": Cause("network", "downstream", st.client, sp.API, pods),
        "nagle-delayed-ack": Cause("network", "downstream", st.client, sp.API, pods,
                                   accept=("slow_dependency",)),
        "reranker-swap": Cause("compute_bound", "model_forward", sp.ORT, sp.API, pods, side=("queueing",)),
    }
    return tuple(causes[part] for part in scenario.split("+") if part != "steady")


class _Pod:
    def __init__(self, rng: random.Random, s: dict[str, Any], stalls: tuple[list, list]) -> None:
        self.runtime = Runtime(s["cores"])
        self.pool = BlockingPool(4 * s["cores"], s["cores"])
        self.rocks = RocksDb(*stalls)
        self.conns = ProviderPool(rng, 3, s["max_uses"])


class _Sim:
    """The run's state and its event loop: (time, seq, step, request) popped in time order."""

    def __init__(self, s: dict[str, Any], parts: set[str], requests: int, seed: int) -> None:
        self.s, self.parts = s, parts
        self.rng = rng = random.Random(seed * 1_000_003 + 2222)
        self.table = TraceTable(seed, 0x22)
        self.res = sp.Resources(self.table, style(seed))
        run_s = requests / s["rps"]
        self.run_ns = run_ns = run_s * NS_PER_S
        bursts = ((0.45 * run_s, 0.07 * run_s, 3.5),) if "blocking-burst" in parts else ()
        self.arrivals = poisson_arrivals(rng, s["rps"], requests, bursts)
        horizon = self.arrivals[-1] + 60 * NS_PER_S
        self.pods = []
        for k in range(s["pods"]):
            stalls = write_stalls(rng, horizon, 6.0, 3.0)
            if "rocksdb-write-stall" in parts and k == stall_pod(seed):
                stalls = write_stalls(rng, horizon, 0.5, 250.0)
            self.pods.append(_Pod(rng, s, stalls))
        self.scylla = Scylla(s["nodes"], s["quorum"], s["spec_ms"])
        if "scylla-compaction" in parts:
            self.scylla.compacting = COMPACTING_NODE
            self.scylla.compaction = (0.1 * run_ns, horizon)
        if "hot-partition" in parts:
            ours = s["rps"] * 0.35 * (2 if s["quorum"] else 1) / 3 * 0.0026  # our share of a hot shard
            other = (0.93 - ours) / 0.0026  # the web app's reads of the partition: the shard ~93 % busy
            self.scylla.hot = {n: Shard(other, 2.6, 0.0, rng.expovariate(other) * NS_PER_S)
                               for n in (0, 1, 2)}
        self.limit = RateLimit([(0.55 * run_ns, 0.55 * run_ns + 0.9 * NS_PER_S)]
                               if "provider-rate-limit" in parts else [])
        self.race = 0.1 if "dns-conntrack" in parts else 0.002
        self.flush_at = 0.4 * run_ns if "syn-retransmit" in parts else None
        self.model = 1 if "reranker-swap" in parts else 0
        self.consistency = "QUORUM" if s["quorum"] else "LOCAL_ONE"
        self.events: list[tuple[float, int, str, dict[str, Any]]] = []
        self.seq = 0

    def at(self, t: float, step: str, req: dict[str, Any]) -> None:
        self.seq += 1
        heapq.heappush(self.events, (t, self.seq, step, req))

    def poll(self, req: dict[str, Any], t: float, cpu: float) -> tuple[float, float]:
        """One poll of the request's task on its pod's runtime (it may move to another worker)."""
        pod = self.pods[req["pod"]]
        start, end, req["worker"] = pod.runtime.run(self.rng, t, req["worker"], cpu)
        return start, end

    def loop(self) -> TraceTable:
        rng = self.rng
        for t0 in self.arrivals:
            gw_s = t0
            client_s = gw_s + lognormal_ms(rng, 0.35, 0.3)
            pod = rng.randrange(self.s["pods"])
            req = {"gw_pod": rng.randrange(2), "pod": pod, "worker": rng.randrange(self.s["cores"]),
                   "gateway_s": gw_s, "client_s": client_s}
            self.at(client_s + lognormal_ms(rng, 0.15, 0.3), "start", req)
        if self.flush_at is not None:
            self.at(self.flush_at, "flush", {})
        while self.events:
            t, _, step, req = heapq.heappop(self.events)
            getattr(self, f"_{step}")(t, req)
        return self.table

    def _flush(self, t: float, req: dict[str, Any]) -> None:
        for pod in self.pods:
            pod.conns.flush(t)

    def _start(self, t: float, req: dict[str, Any]) -> None:
        rng, pod = self.rng, self.pods[req["pod"]]
        chars = int(min(2000, max(20, 220 * rng.lognormvariate(0.0, 0.6))))
        items = int(min(100, max(8, 40 * rng.lognormvariate(0.0, 0.3))))
        parse = lognormal_ms(rng, 0.05, 0.3)
        tok = (0.12 + 0.0025 * chars) * NS_PER_MS * rng.lognormvariate(0.0, 0.1)
        get, block_miss = pod.rocks.get(rng, items)
        start, end = self.poll(req, t, parse + tok + get)
        misses = 0 if rng.random() > 0.25 else min(items, 1 + int(rng.expovariate(1 / 4)))
        anon_share = 0.03
        if "hot-partition" in self.parts and start > 0.15 * self.run_ns:
            anon_share = 0.35
        anon = rng.random() < anon_share
        big = anon and "hot-partition" in self.parts
        issue = end + lognormal_ms(rng, 0.02, 0.3)
        user = self.scylla.read(rng, issue, "user", big)
        item_read = self.scylla.read(rng, issue + 0.01 * NS_PER_MS, "items") if misses else None
        req.update(chars=chars, tokens=int(chars / 4.2), items=items, misses=misses, block_miss=block_miss,
                   server=start, tokenize=(start + parse, start + parse + tok),
                   cache_get=(start + parse + tok, end), user=user, user_start=issue, anonymous=anon,
                   item_read=item_read, attempts=[], provider=None)
        if rng.random() > 0.12:  # the moka LRU misses: ask the provider
            req["provider"] = (issue, self._provider(issue, req))
        self.at(max(user.end, item_read.end if item_read else 0.0), "features", req)

    def _provider(self, t: float, req: dict[str, Any]) -> float:
        """Attempts at the provider from t (429s retried after Retry-After, at most 3); their end."""
        rng, pod = self.rng, self.pods[req["pod"]]
        for _ in range(3):
            conn = pod.conns.checkout(t)
            a = sp.Attempt(t, t, 200)
            if conn is None:  # a new connection: getaddrinfo on a blocking thread, then TCP and TLS
                thread = pod.pool.take(t)
                dns, a.dns_lost = resolve_ms(rng, self.race)
                a.resolve = (thread, thread + dns * NS_PER_MS)
                pod.pool.give(a.resolve[1])
                drop = 0.0
                if self.flush_at is not None and self.flush_at <= t < self.flush_at + 1.5 * NS_PER_S:
                    drop = 0.45
                tcp, a.syn_drops = syn_ms(rng, PROVIDER_RTT_MS, drop)
                tls = PROVIDER_RTT_MS * rng.lognormvariate(0.0, 0.15) + 1.2 * rng.lognormvariate(0.0, 0.3)
                a.connect = (a.resolve[1], a.resolve[1] + (tcp + tls) * NS_PER_MS)
                sent = a.connect[1]
                conn_uses = None
            else:
                sent = t + lognormal_ms(rng, 0.04, 0.3)
                conn_uses = conn
            arrive = sent + PROVIDER_RTT_MS / 2 * NS_PER_MS * rng.lognormvariate(0.0, 0.1)
            if "nagle-delayed-ack" in self.parts and conn is not None:
                arrive += (DELAYED_ACK_MS + rng.uniform(0.0, 4.0)) * NS_PER_MS
            retry_after = self.limit.admit(arrive)
            back = PROVIDER_RTT_MS / 2 * NS_PER_MS * rng.lognormvariate(0.0, 0.1)
            if retry_after is not None:
                a.end, a.status, a.retry_after = arrive + lognormal_ms(rng, 0.6, 0.3) + back, 429, retry_after
            else:
                work = lognormal_ms(rng, 18.0, 0.25) + 0.01 * req["tokens"] * NS_PER_MS
                a.end = arrive + work + back
            req["attempts"].append(a)
            if conn_uses is None:
                conn_uses = pod.conns.new(a.end)
            pod.conns.checkin(conn_uses, a.end)
            if retry_after is None:
                return a.end
            t = a.end + retry_after * NS_PER_S + lognormal_ms(rng, 1.0, 0.3)
        return req["attempts"][-1].end

    def _features(self, t: float, req: dict[str, Any]) -> None:
        rng, pod = self.rng, self.pods[req["pod"]]
        wake = lognormal_ms(rng, 0.02, 0.3)
        if req["misses"]:
            start, _ = self.poll(req, t + wake, lognormal_ms(rng, 0.01, 0.3))
            put = pod.rocks.put(rng, start)
            pod.runtime.hold(req["worker"], start + put)  # a blocking write inside the poll
            req["put"] = (start, start + put)
            done = start + put
        else:
            req["put"] = None
            _, done = self.poll(req, t + wake, lognormal_ms(rng, 0.01, 0.3))
        req["features"] = (req["tokenize"][1], done)
        ready = max(done, req["provider"][1] if req["provider"] else 0.0)
        self.at(ready + lognormal_ms(rng, 0.02, 0.3), "rerank", req)

    def _rerank(self, t: float, req: dict[str, Any]) -> None:
        rng, pod = self.rng, self.pods[req["pod"]]
        per_item = 0.72 if self.model else 0.4  # ms per (query, passage) pair, one intra-op thread
        work = (0.3 + per_item * req["items"]) * NS_PER_MS * rng.lognormvariate(0.0, 0.08)
        req["inline"] = "inline-rerank" in self.parts
        if req["inline"]:
            start, end = self.poll(req, t, work)
            req["rerank_s"], req["ort"] = start, (start + 0.01 * NS_PER_MS, end)
            self._respond(end, req)
            return
        start, _ = self.poll(req, t, lognormal_ms(rng, 0.02, 0.3))
        thread = pod.pool.take(start + 0.01 * NS_PER_MS)
        end = pod.pool.compute(thread, work)
        pod.pool.give(end)
        req["rerank_s"], req["ort"] = start, (thread + 0.005 * NS_PER_MS, end)
        self.at(end + lognormal_ms(rng, 0.02, 0.3), "respond", req)

    def _respond(self, t: float, req: dict[str, Any]) -> None:
        rng = self.rng
        start, end = self.poll(req, t, (0.08 + 0.002 * req["items"]) * NS_PER_MS * rng.lognormvariate(0, 0.2))
        server_e = end + lognormal_ms(rng, 0.03, 0.3)
        client_e = server_e + lognormal_ms(rng, 0.15, 0.3)
        gw_e = client_e + lognormal_ms(rng, 0.25, 0.3)
        prov = req["provider"]
        sp.write_request(self.table, self.res, sp.Timeline(
            req["gw_pod"], req["pod"], (req["gateway_s"], gw_e), (req["client_s"], client_e),
            (req["server"], server_e), req["tokenize"], req["chars"], req["tokens"], req["features"],
            req["cache_get"], req["items"], req["misses"], req["block_miss"], req["user"], req["user_start"],
            req["anonymous"], req["item_read"], req["put"], prov, req["attempts"],
            (req["rerank_s"], req["ort"][1] if req["inline"] else start), req["ort"], self.model,
            req["inline"]),
            self.consistency)


def generate(scenario: str, requests: int, seed: int, **opts: Any) -> TraceTable:
    truth(scenario, seed)
    s = {**setup(seed), **opts}
    return _Sim(s, set(scenario.split("+")) - {"steady"}, requests, seed).loop()
