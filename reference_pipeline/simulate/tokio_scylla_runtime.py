"""The physics of the blind family `tokio-scylla` (tokio_scylla.py): a tokio multi-threaded runtime's
worker threads and its bounded blocking pool, a ScyllaDB cluster (shard-per-core, speculative retry,
compaction), a pod-local RocksDB cache (block-cache misses, L0 write stalls), the resolver behind
glibc's getaddrinfo (ndots:5 search domains, conntrack-raced UDP packets), TCP/TLS connects (SYN drops
and the 1 s initial retransmission timeout) and the embedding provider (latency, a rate-limit window
answered with 429 + Retry-After, a per-host keep-alive pool the provider's edge closes after a number
of requests, Nagle against delayed ACK).

Times are float ns from the run's start; every class is driven by the family's event loop in time
order (tokio_scylla.py), so a queue sees its arrivals in the order they happen.
"""

from __future__ import annotations

import bisect
import heapq
import math
import random
from dataclasses import dataclass, field

from reference_pipeline.simulate.trace_table import NS_PER_MS, NS_PER_S, lognormal_ms

SEARCH_DOMAINS = 3  # embed.svc.cluster.local, svc.cluster.local, cluster.local; then the name as is
RESOLV_TIMEOUT_MS = 5000.0  # glibc's `timeout:5` before it resends a lost query
SYN_RTO_MS = 1000.0  # the kernel's initial retransmission timeout; doubled per further drop
DELAYED_ACK_MS = 40.0  # Linux's minimum delayed-ACK timer


class Runtime:
    """One pod's tokio workers. A task runs on its worker; a poll that computes without yielding holds
    the worker, and tasks queued behind it wait. Another worker steals some of them after a while (its
    search tick), never the LIFO-slot task: `p_steal` of the blocked tasks move."""

    def __init__(self, workers: int, p_steal: float = 0.2) -> None:
        self.free = [0.0] * workers
        self.p_steal = p_steal

    def run(self, rng: random.Random, t: float, home: int, cpu: float) -> tuple[float, float, int]:
        """A poll of `cpu` ns wanted at t on worker `home`: (start, end, worker it ran on)."""
        w = home
        start = max(t, self.free[w])
        if start > t + 0.05 * NS_PER_MS and rng.random() < self.p_steal:
            thief = min(range(len(self.free)), key=self.free.__getitem__)
            stolen = max(t + lognormal_ms(rng, 3.0, 0.8), self.free[thief])  # its next wake-up
            if stolen < start:
                w, start = thief, stolen
        self.free[w] = start + cpu
        return start, start + cpu, w

    def hold(self, worker: int, until: float) -> None:
        """The poll running on `worker` goes on until `until` (a blocking call inside it)."""
        self.free[worker] = max(self.free[worker], until)


class BlockingPool:
    """tokio's spawn_blocking pool: at most `threads` threads, extra jobs wait in its queue (FIFO).
    CPU-bound jobs share the pod's `cores` with each other (processor sharing, roughly)."""

    def __init__(self, threads: int, cores: int) -> None:
        self.free = [0.0] * threads
        heapq.heapify(self.free)
        self.cores = cores
        self.cpu_jobs: list[float] = []  # end times of the CPU-bound jobs running

    def take(self, t: float) -> float:
        return max(t, heapq.heappop(self.free))

    def give(self, t: float) -> None:
        heapq.heappush(self.free, t)

    def compute(self, t: float, work: float) -> float:
        """End of `work` ns of CPU started at t beside the CPU jobs running then."""
        self.cpu_jobs = [e for e in self.cpu_jobs if e > t]
        share = max(1.0, (len(self.cpu_jobs) + 1) / self.cores)
        end = t + work * share
        self.cpu_jobs.append(end)
        return end


@dataclass
class Shard:
    """One Scylla shard (one core of one node) serving the hot partition: a FIFO fed by our reads and
    an untraced Poisson stream from other clients (the web app reads the same partition)."""

    external_rps: float
    external_ms: float
    free_at: float = 0.0
    next_external: float = 0.0

    def serve(self, rng: random.Random, t: float, work: float) -> tuple[float, float]:
        while self.external_rps > 0 and self.next_external < t:
            a = self.next_external
            self.free_at = max(self.free_at, a) + lognormal_ms(rng, self.external_ms, 0.35)
            self.next_external = a + rng.expovariate(self.external_rps) * NS_PER_S
        start = max(t, self.free_at)
        self.free_at = start + work
        return start, self.free_at


@dataclass
class Read:
    """One CQL read as the driver saw it: its attempts (node, start, end: one, to the coordinator; the
    coordinator's own speculative reads are invisible to the driver) and the end."""

    attempts: list[tuple[int, float, float]]
    end: float


@dataclass
class Scylla:
    nodes: int
    quorum: bool
    spec_ms: float  # speculative_retry's threshold until the table's latency histogram has filled
    compacting: int | None = None
    compaction: tuple[float, float] = (0.0, 0.0)
    hot: dict[int, Shard] = field(default_factory=dict)  # node -> the shard holding the hot partition
    recent: list[float] = field(default_factory=list)  # replica read times (ns) the percentile is taken on
    threshold: float = 0.0

    def _learn(self, took: float) -> None:
        """The coordinators' read-latency histogram (recent reads): speculative_retry's p99 follows it,
        so when many reads are slow the threshold rises with them."""
        self.recent.append(took)
        if len(self.recent) >= 400:
            self.threshold = sorted(self.recent)[int(0.99 * len(self.recent))]
            del self.recent[:200]

    def _replica(self, rng: random.Random, t: float, node: int, kind: str, big: bool) -> float:
        """How long one replica takes to read: shard CPU (row cache) plus the odd SSTable read."""
        slow = self.compacting == node and self.compaction[0] <= t < self.compaction[1]
        cpu = lognormal_ms(rng, 0.12 if kind == "user" else 0.3, 0.3) * (3.0 if slow else 1.0)
        disk = 0.6 if slow else 0.01 if kind == "user" else 0.25  # compaction churns the cache
        if rng.random() < disk:  # an SSTable read; behind compaction's I/O on a compacting node
            cpu += lognormal_ms(rng, 25.0, 1.0) if slow else lognormal_ms(rng, 0.9, 0.5)
        took = cpu
        if big and node in self.hot:
            _, end = self.hot[node].serve(rng, t, lognormal_ms(rng, 2.6, 0.3))
            took = end - t + cpu
        self._learn(took)
        return took

    def read(self, rng: random.Random, t: float, kind: str, big: bool = False) -> Read:
        """A token-aware read: the coordinator is a replica chosen at random; LOCAL_ONE answers with
        its own read, QUORUM with the second of two; when no answer came within the table's p99
        (`speculative_retry = '99.0PERCENTILE'`, Scylla's default, on the coordinator) it asks one more
        replica. A compacting coordinator takes the request and relays the answer late."""
        rtt = lognormal_ms(rng, 0.22, 0.25)
        order = rng.sample(sorted(self.hot) if big else range(self.nodes), 3)  # the key's replicas
        coord = order[0]
        arrive = t + rtt / 2
        backlog = 0.0
        if self.compacting == coord and self.compaction[0] <= t < self.compaction[1]:
            backlog = lognormal_ms(rng, 8.0, 0.8)  # the reactor shares its core with compaction
        first = arrive + backlog + self._replica(rng, arrive, coord, kind, big)
        answers = [first]
        if self.quorum:
            hop = lognormal_ms(rng, 0.1, 0.3)
            answers.append(arrive + backlog + hop + self._replica(rng, arrive, order[1], kind, big) + hop)
        need = 2 if self.quorum else 1
        done = sorted(answers)[need - 1]
        threshold = arrive + backlog + max(self.spec_ms * NS_PER_MS, self.threshold)
        if done > threshold:
            hop = lognormal_ms(rng, 0.1, 0.3)
            extra = threshold + hop + self._replica(rng, threshold, order[2 if self.quorum else 1], kind, big)
            answers.append(extra + hop)
            done = sorted(answers)[need - 1]
        end = done + rtt / 2
        return Read([(coord, t, end)], end)


class RocksDb:
    """The pod-local cache. Reads hit the block cache or read an SST block from the local SSD. Writes
    go to the memtable; when L0 files pile up (compaction behind) writes are slowed, then stopped until
    compaction catches up: `stops` are those intervals; every writer inside one waits for its end."""

    def __init__(self, stops: list[tuple[float, float]], slowdowns: list[tuple[float, float]]) -> None:
        self.stops = sorted(stops)
        self.slow = sorted(slowdowns)
        self._starts = [a for a, _ in self.stops]
        self._slow_starts = [a for a, _ in self.slow]

    def get(self, rng: random.Random, items: int) -> tuple[float, bool]:
        work = (0.04 + 0.0015 * items) * NS_PER_MS * rng.lognormvariate(0.0, 0.2)
        miss = rng.random() < 0.04
        if miss:
            work += lognormal_ms(rng, 0.35, 0.6) * (1 + items // 64)
        return work, miss

    def put(self, rng: random.Random, t: float) -> float:
        """How long a write started at t blocks its thread."""
        work = lognormal_ms(rng, 0.03, 0.3)
        k = bisect.bisect_right(self._starts, t) - 1
        if k >= 0 and t < self.stops[k][1]:
            return self.stops[k][1] - t + work
        k = bisect.bisect_right(self._slow_starts, t) - 1
        if k >= 0 and t < self.slow[k][1]:
            work += rng.uniform(0.5, 4.0) * NS_PER_MS  # the delayed write rate's sleep
        return work


def write_stalls(rng: random.Random, horizon: float, every_s: float, stop_ms: float
                 ) -> tuple[list[tuple[float, float]], list[tuple[float, float]]]:
    """L0 pile-ups: a slowdown phase, then a stop lasting until compaction clears L0."""
    stops, slow = [], []
    t = rng.uniform(0.05, 0.5) * every_s * NS_PER_S
    while t < horizon:
        ramp = rng.uniform(0.1, 0.3) * every_s * NS_PER_S
        slow.append((t, t + ramp))
        length = lognormal_ms(rng, stop_ms, 0.5)
        stops.append((t + ramp, t + ramp + length))
        t += ramp + length + rng.uniform(0.5, 1.5) * every_s * NS_PER_S
    return stops, slow


def resolve_ms(rng: random.Random, race: float) -> tuple[float, int]:
    """getaddrinfo for the provider's name under ndots:5: each search domain answers NXDOMAIN, then the
    name itself; A and AAAA go out together from one socket, and a packet lost to the conntrack insert
    race is resent only after the resolver's 5 s timeout. Returns (ms, packets lost)."""
    total, lost = 0.0, 0
    for _ in range(SEARCH_DOMAINS + 1):
        total += 0.35 * rng.lognormvariate(0.0, 0.35)
        if rng.random() < race:
            total += RESOLV_TIMEOUT_MS
            lost += 1
    return total, lost


def syn_ms(rng: random.Random, rtt_ms: float, drop: float) -> tuple[float, int]:
    """TCP connect: one RTT, plus 1 s, 2 s, ... for each SYN the peer's full listen queue dropped."""
    total, drops = rtt_ms * rng.lognormvariate(0.0, 0.15), 0
    while rng.random() < drop and drops < 3:
        total += SYN_RTO_MS * 2**drops
        drops += 1
    return total, drops


@dataclass
class Conn:
    free_at: float
    uses: int
    born: float = 0.0


class ProviderPool:
    """hyper's per-host pool for one pod: an idle connection is reused, none idle opens a new one (HTTP/1.1
    does not wait for a busy one); the provider's edge closes a connection after `max_uses` requests."""

    def __init__(self, rng: random.Random, warm: int, max_uses: int) -> None:
        self.max_uses = max_uses
        self.conns = [Conn(0.0, rng.randrange(max_uses)) for _ in range(warm)]
        self.closed_before = -1.0  # the peer closed every connection opened before this

    def checkout(self, t: float) -> Conn | None:
        idle = [c for c in self.conns if c.free_at <= t]
        if not idle:
            return None
        conn = max(idle, key=lambda c: c.free_at)  # hyper hands out the most recently used first
        self.conns.remove(conn)
        return conn

    def new(self, t: float) -> Conn:
        return Conn(t, 0, t)

    def checkin(self, conn: Conn, t: float) -> None:
        conn.free_at = t
        conn.uses += 1
        if conn.uses < self.max_uses and conn.born >= self.closed_before:
            self.conns.append(conn)

    def flush(self, t: float) -> None:
        """The peer closed every connection: idle ones go now, busy ones when their exchange ends."""
        self.conns.clear()
        self.closed_before = t


class RateLimit:
    """The provider's per-API-key quota per minute: once a minute's quota is spent, every call until the
    minute ends is answered 429 with Retry-After = whole seconds to the reset (at least 1). `spent`:
    (when the quota ran out, when the window resets)."""

    def __init__(self, spent: list[tuple[float, float]]) -> None:
        self.spent = sorted(spent)

    def admit(self, t: float) -> int | None:
        """None when admitted, else the Retry-After seconds."""
        for a, b in self.spent:
            if a <= t < b:
                return max(1, math.ceil((b - t) / NS_PER_S))
        return None
