"""The backends of the blind family `search-bff` (search_bff.py): an Elasticsearch cluster whose query
goes to every shard, a gunicorn re-ranker with a fixed number of sync workers that are recycled after
`max_requests`, a memcached tier behind a consistent-hash ring, and a Node keep-alive agent's socket
pool. Each is a discrete-event model: it is asked for one call at a time, in the order the BFF makes
them, and answers with the times the call's spans need.
"""

from __future__ import annotations

import bisect
import heapq
import random
from dataclasses import dataclass, field

from reference_pipeline.simulate.trace_table import NS_PER_MS, NS_PER_S, lognormal_ms

# --- Elasticsearch --------------------------------------------------------------------------------


@dataclass
class ShardCall:
    shard: int
    node: int
    start: float
    end: float


@dataclass
class SearchReply:
    query: list[ShardCall]
    fetch: list[ShardCall]
    coord_node: int
    coord_start: float
    coord_end: float
    body_bytes: int


class EsCluster:
    """`nodes` data nodes holding `shards` primaries with one replica each (never on the same node).
    A search goes to one copy of every shard (adaptive replica selection: the copy on the node with
    the shorter recent response time, most of the time); the query phase ends with the slowest shard,
    then the fetch phase reads the page's documents from the shards that hold them. A node in a long
    merge (`slow_node`) serves its shard copies several times slower, with a heavy tail."""

    def __init__(self, rng: random.Random, nodes: int, shards: int, slow_node: int | None) -> None:
        self.rng, self.nodes, self.shards, self.slow_node = rng, nodes, shards, slow_node
        self.copies = [(s % nodes, (s + 1 + s // nodes) % nodes) for s in range(shards)]
        self.copies = [(a, b if b != a else (a + 1) % nodes) for a, b in self.copies]

    def _shard_time(self, node: int, docs: int) -> float:
        rng = self.rng
        t = lognormal_ms(rng, 5.0, 0.35) + docs * 0.02 * NS_PER_MS
        if rng.random() < 0.012:  # a young GC or a refresh on the data node
            t += rng.uniform(10.0, 45.0) * NS_PER_MS
        if node == self.slow_node:  # segment merges saturate the node's disk: every read waits on I/O
            t = t * rng.uniform(2.5, 4.0) + lognormal_ms(rng, 30.0, 0.7)
        return t

    def search(self, t: float, page_items: int, doc_kb: float) -> SearchReply:
        rng = self.rng
        coord = rng.randrange(self.nodes)
        coord_start = t + lognormal_ms(rng, 0.4, 0.3)
        query: list[ShardCall] = []
        for shard, copies in enumerate(self.copies):
            node = copies[rng.random() < 0.5]
            if self.slow_node in copies and rng.random() < 0.35:  # ARS steers some reads away
                node = copies[0] if copies[1] == self.slow_node else copies[1]
            s = coord_start + lognormal_ms(rng, 0.3, 0.3)
            query.append(ShardCall(shard, node, s, s + self._shard_time(node, page_items)))
        reduce_at = max(q.end for q in query) + lognormal_ms(rng, 0.5, 0.3)
        fetch: list[ShardCall] = []
        holders = sorted({rng.randrange(self.shards) for _ in range(min(page_items, 3 * self.shards))})
        per_shard_kb = page_items * doc_kb / max(len(holders), 1)
        for shard in holders:
            node = next(q.node for q in query if q.shard == shard)
            s = reduce_at + lognormal_ms(rng, 0.3, 0.3)
            work = lognormal_ms(rng, 1.5, 0.3) + per_shard_kb * 0.012 * NS_PER_MS  # stored fields
            if node == self.slow_node:
                work = work * rng.uniform(2.0, 3.0) + lognormal_ms(rng, 12.0, 0.6)
            fetch.append(ShardCall(shard, node, s, s + work))
        body = int(page_items * doc_kb * 1024 + 6_000 + rng.randrange(2_000))  # hits + aggregations
        coord_end = max(f.end for f in fetch) + lognormal_ms(rng, 0.4, 0.3) + body / 400e6 * NS_PER_S
        return SearchReply(query, fetch, coord, coord_start, coord_end, body)


# --- gunicorn re-ranker ---------------------------------------------------------------------------


@dataclass
class Worker:
    pod: int
    pid: int
    free_at: float
    served: int = 0
    limit: int = 0  # max_requests with its jitter; 0: never recycled
    cold: bool = False


@dataclass
class RerankCall:
    pod: int
    pid: int
    start: float  # the worker accepted the connection
    features_end: float
    score_start: float
    end: float  # the worker wrote the response
    cold_ms: float


@dataclass
class Gunicorn:
    """`pods` x `workers` sync workers: a worker handles one request at a time and the others wait in
    the pod's listen backlog; the earliest-free worker accepts next. With `max_requests` a worker exits
    after that many requests (plus jitter); the arbiter forks a new one that boots (imports) and loads
    the model on its first request, its first requests slower while its caches warm."""

    rng: random.Random
    pods: int
    workers: int
    max_requests: int = 0
    jitter: int = 0
    pool: list[list[Worker]] = field(default_factory=list)
    started: list[tuple[str, int, int]] = field(default_factory=list)  # (reason, pod, pid) of new workers

    def __post_init__(self) -> None:
        self.pool = [[self._worker(p, 0.0, cold=False) for _ in range(self.workers)]
                     for p in range(self.pods)]

    def _worker(self, pod: int, ready: float, cold: bool) -> Worker:
        limit = self.max_requests + self.rng.randrange(self.jitter + 1) if self.max_requests else 0
        pid = self.rng.randrange(20, 32_000)
        if cold:
            self.started.append(("recycled", pod, pid))
        # the workers running when the run starts were forked at different times: their counts differ
        served = 0 if cold or not limit else self.rng.randrange(limit)
        return Worker(pod, pid, ready, served=served, limit=limit, cold=cold)

    def handle(self, t: float, candidates: int) -> RerankCall:
        rng = self.rng
        pod = rng.randrange(self.pods)
        workers = self.pool[pod]
        k = min(range(len(workers)), key=lambda i: workers[i].free_at)
        w = workers[k]
        start = max(t, w.free_at) + lognormal_ms(rng, 0.15, 0.3)
        features = lognormal_ms(rng, 6.0, 0.25) + candidates * 0.08 * NS_PER_MS
        score = lognormal_ms(rng, 8.0, 0.2) + candidates * 0.15 * NS_PER_MS
        cold_ms = 0.0
        if w.limit:
            if w.served == 0 and w.cold:  # lazy model load and first imports on the first request
                cold_ms = rng.uniform(600.0, 1100.0)
            elif w.served < 30 and w.cold:  # its in-process feature cache still filling from the store
                cold_ms = 120.0 * 0.88 ** w.served * rng.uniform(0.7, 1.3)
        features_end = start + features
        score_start = features_end + lognormal_ms(rng, 0.1, 0.3)
        end = score_start + score + cold_ms * NS_PER_MS + lognormal_ms(rng, 0.3, 0.3)
        w.served += 1
        w.free_at = end + lognormal_ms(rng, 0.1, 0.3)
        if w.limit and w.served >= w.limit:  # exits; the arbiter forks a replacement that boots first
            workers[k] = self._worker(pod, w.free_at + rng.uniform(0.4, 0.8) * NS_PER_S, cold=True)
        return RerankCall(pod, w.pid, start, features_end, score_start, end, cold_ms)

    def capacity_rps(self, candidates: int) -> float:
        service_ms = 6.0 + 8.0 + candidates * 0.23 + 0.8
        return self.pods * self.workers * 1000.0 / service_ms


# --- memcached ------------------------------------------------------------------------------------


class MemcachedRing:
    """Ketama-style consistent hashing: each node owns the keys whose hash falls before its points on
    the ring. A key misses when it was evicted (a few %), or when its node restarted after the key was
    last set; a miss is read from the database and set again, so popular keys come back first."""

    def __init__(self, rng: random.Random, nodes: int, restart: tuple[int, float] | None) -> None:
        self.rng, self.nodes, self.restart = rng, nodes, restart
        points = sorted((rng.getrandbits(32), n) for n in range(nodes) for _ in range(160))
        self.keys = [p for p, _ in points]
        self.owner = [n for _, n in points]
        self.key_hash: dict[int, int] = {}
        self.set_at: dict[int, float] = {}

    def node_of(self, product: int) -> int:
        h = self.key_hash.setdefault(product, random.Random(product * 2654435761).getrandbits(32))
        return self.owner[bisect.bisect(self.keys, h) % len(self.keys)]

    def lookup(self, t: float, products: list[int]) -> dict[int, tuple[list[int], list[int]]]:
        """node -> (keys asked, keys missed) for one multi-get at time t."""
        out: dict[int, tuple[list[int], list[int]]] = {}
        for product in products:
            node = self.node_of(product)
            asked, missed = out.setdefault(node, ([], []))
            asked.append(product)
            emptied = self.restart is not None and node == self.restart[0] and t >= self.restart[1]
            lost = emptied and self.set_at.get(product, -1.0) < self.restart[1]  # type: ignore[index]
            if lost or self.rng.random() < 0.03:
                missed.append(product)
        return out

    def refill(self, t: float, products: list[int]) -> None:
        for product in products:
            self.set_at[product] = t


# --- keep-alive agent -----------------------------------------------------------------------------


class SocketAgent:
    """http.Agent({keepAlive: true, maxSockets}) towards one host, per process: a request takes a
    free socket or waits in the agent's queue (FIFO) until a response frees one."""

    def __init__(self, max_sockets: int) -> None:
        self.free = [0.0] * max_sockets
        heapq.heapify(self.free)

    def acquire(self, t: float) -> float:
        return max(t, heapq.heappop(self.free))

    def release(self, t: float) -> None:
        heapq.heappush(self.free, t)
