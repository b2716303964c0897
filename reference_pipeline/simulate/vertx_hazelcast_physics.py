"""The physics of the blind family `vertx-hazelcast` (vertx_hazelcast.py): Vert.x event loops (one
thread each, work placed in its first idle gap, blocked whole by a synchronous call), the bounded
executeBlocking pool, ZGC allocation stalls and the JIT's warm-up on one JVM, a client-side Hazelcast
near cache over partitioned members (migrations, retry pause), Envoy's egress circuit breaker and
outlier ejection, and a Triton-like model server (a dynamic batcher, two model instances per GPU).
Times are float ns from the run's start.
"""

from __future__ import annotations

import heapq
import math
import random
from collections import OrderedDict
from dataclasses import dataclass, field

from reference_pipeline.simulate.trace_table import NS_PER_MS, NS_PER_S, Stalls, WorkerPool

PARTITIONS = 271
RETRY_PAUSE_MS = 1000.0  # hazelcast.client.invocation.retry.pause.millis
WORKER_POOL = 20  # Vert.x's default worker pool size


def jitter(rng: random.Random, sigma: float) -> float:
    """A log-normal factor of median 1 (random.gauss: the same law as lognormvariate, faster)."""
    return math.exp(rng.gauss(0.0, sigma))


def lognormal(rng: random.Random, median_ms: float, sigma: float) -> float:
    """One log-normal duration in ns from its median (ms) and the sd of its logarithm."""
    return median_ms * NS_PER_MS * math.exp(rng.gauss(0.0, sigma))


class Loop:
    """One Vert.x event-loop thread: it runs one thing at a time, in the order work becomes runnable
    (the run resumes requests in time order); allocation stalls of the JVM freeze it while it runs."""

    def __init__(self, stalls: Stalls) -> None:
        self.free = 0.0
        self.stalls = stalls

    def run(self, t: float, work: float) -> tuple[float, float]:
        """(start, end) of `work` ns of running made runnable at t."""
        start = self.stalls.settle(max(t, self.free))
        self.free = self.stalls.run(start, work)
        return start, self.free

    def block(self, t: float, length: float) -> tuple[float, float]:
        """A synchronous call made on the loop: the thread is held for `length` of wall time."""
        start = self.stalls.settle(max(t, self.free))
        self.free = start + length
        return start, self.free


def zgc_stalls(
    rng: random.Random, horizon: float, leak_from: float | None, run_ns: float
) -> list[tuple[float, float]]:
    """Allocation stalls of one JVM. Healthy ZGC keeps up: a rare stall of 1-3 ms when a burst of
    allocation meets a cycle. With a leak the live set grows from `leak_from`: cycles run back to back
    and allocating threads stall for 10-200 ms, more often as the heap fills."""
    out = []
    t = rng.expovariate(1 / 4.0) * NS_PER_S
    while t < horizon:
        length = lognormal(rng, 1.6, 0.4)
        out.append((t, t + length))
        t += length + rng.expovariate(1 / 4.0) * NS_PER_S
    if leak_from is not None:
        t = leak_from
        while t < horizon:
            fill = min(1.0, (t - leak_from) / (0.5 * run_ns))  # the live set's share of the headroom
            length = min(220.0, lognormal(rng, 30.0 + 70.0 * fill, 0.55) / NS_PER_MS) * NS_PER_MS
            out.append((t, t + length))
            t += length + rng.expovariate(1.0 / (0.5 - 0.35 * fill)) * NS_PER_S
    return out


@dataclass
class Pod:
    """One reco-gateway JVM: its event loops, the executeBlocking pool, its allocation stalls, and
    the JIT's state (work runs interpreted, then C1, then C2 as invocations pile up)."""

    loops: list[Loop]
    pool: WorkerPool
    stalls: Stalls
    born: float = 0.0  # when the process started (a rolling deploy's new pod)
    cold: bool = False
    served: int = 0

    tier: int = 0  # the hot path's tier: 0 interpreted, 3 C1, 4 C2

    def compiled(self) -> int | None:
        """The tier the hot path was just compiled to (a JFR compilation event), if it changed."""
        jit = self.jit()
        tier = 4 if jit < 1.3 else 3 if jit < 5.0 else 0
        if tier == self.tier:
            return None
        self.tier = tier
        return tier

    def jit(self) -> float:
        """CPU multiplier: interpreted code ~9x slower than C2, C1 ~2.5x; compile thresholds are
        invocation counts, so warm-up follows the requests the pod served."""
        if not self.cold:
            return 1.0
        return 1.0 + 5.5 * math.exp(-self.served / 60.0) + 2.5 * math.exp(-self.served / 400.0)


class NearCache:
    """A per-pod LRU near cache of item features, pre-warmed; `clear` is an invalidation wave."""

    def __init__(self, capacity: int, warm: list[int]) -> None:
        self.capacity = capacity
        self.entries: OrderedDict[int, None] = OrderedDict.fromkeys(warm[:capacity])
        self.wave: tuple[float, float] | None = None  # a bulk update's invalidations: (from, to)
        self.emptied = False

    def lookup(self, rng: random.Random, t: float, keys: list[int]) -> list[int]:
        """The keys that miss (and are fetched, then put back)."""
        if self.wave is not None and not self.emptied and t >= self.wave[0]:
            self.entries.clear()  # the first invalidation batches empty the whole cache
            self.emptied = True
        misses = []
        for key in keys:
            if key in self.entries and rng.random() > 0.004:  # TTL / max-idle expiry
                self.entries.move_to_end(key)
            else:
                misses.append(key)
        storm = self.wave is not None and self.wave[0] <= t < self.wave[1]
        for key in misses:
            if storm and rng.random() < 0.8:
                self.entries.pop(key, None)  # invalidated again by the update still running
                continue
            self.entries[key] = None
            if len(self.entries) > self.capacity:
                self.entries.popitem(last=False)
        return misses

    def invalidate(self, start: float, end: float) -> None:
        """A bulk update from `start` to `end`: its invalidation events empty the cache at once, and
        entries put back while it runs are mostly invalidated again."""
        self.wave = (start, end)


@dataclass
class Member:
    """One Hazelcast member: each partition's operations run on its partition thread (partition mod
    threads), one at a time, in arrival order."""

    threads: list[float]  # when each partition thread is free
    slow: Stalls  # member-side GC pauses

    def op(self, partition: int, t: float, work: float) -> tuple[float, float]:
        i = partition % len(self.threads)
        start = self.slow.settle(max(t, self.threads[i]))
        self.threads[i] = self.slow.run(start, work)
        return start, self.threads[i]


@dataclass
class Cluster:
    """Partitioned IMaps over members (owner = partition's primary). A member restart makes its
    partitions migrate: first its backups are promoted elsewhere, then partitions migrate back
    when it rejoins, `parallel` at a time; an operation on a migrating partition gets a retryable
    exception and the client tries again after the retry pause."""

    members: list[Member]
    rtt_ms: float
    migrating: dict[int, list[tuple[float, float]]] = field(default_factory=dict)  # partition -> (from, to)
    down: tuple[float, float, int] | None = None  # (left, rejoined, member)

    def __post_init__(self) -> None:
        """The partition table: primaries spread evenly over the members, in no particular order."""
        owners = [p % len(self.members) for p in range(PARTITIONS)]
        random.Random(len(self.members)).shuffle(owners)
        self.owners = owners

    def owner(self, partition: int, t: float) -> int:
        m = self.owners[partition]
        if self.down is not None and self.down[0] <= t < self.down[1] and m == self.down[2]:
            return (
                (m + 1 + partition // len(self.members)) % len(self.members) if len(self.members) > 1 else m
            )
        return m

    def restart(self, rng: random.Random, member: int, left: float, rejoin: float, parallel: int) -> None:
        """The member leaves at `left` (promotions ~0.4 s), comes back at `rejoin` (migrations back)."""
        self.down = (left, rejoin, member)
        mine = [p for p in range(PARTITIONS) if self.owners[p] == member]
        for p in mine:
            self.migrating.setdefault(p, []).append((left, left + lognormal(rng, 380.0, 0.25)))
        slots = [rejoin] * parallel
        for p in mine:
            start = heapq.heappop(slots)
            end = start + lognormal(rng, 240.0, 0.3)  # ~40 MB of entries + backups per partition
            self.migrating.setdefault(p, []).append((start, end))
            heapq.heappush(slots, end)

    def busy(self, partition: int, t: float) -> float | None:
        """When the migration holding `partition` at t ends (None if it is not migrating)."""
        for a, b in self.migrating.get(partition, ()):
            if a <= t < b:
                return b
        return None

    def call(
        self, rng: random.Random, t: float, keys: list[int], per_key_ms: float
    ) -> tuple[float, list[int]]:
        """A get / getAll: one operation per partition, on the owning member's partition thread, all
        in parallel: (when the last reply is back, the keys whose partition was migrating: the client
        tries those again after the retry pause)."""
        groups: dict[int, list[int]] = {}
        for key in keys:
            groups.setdefault(key % PARTITIONS, []).append(key)
        end, again = t, []
        half = self.rtt_ms / 2 * NS_PER_MS
        for partition, mine in groups.items():
            arrive = t + half * jitter(rng, 0.25)
            member = self.members[self.owner(partition, arrive)]
            start, done = member.op(
                partition, arrive, (0.02 + per_key_ms * len(mine)) * NS_PER_MS * jitter(rng, 0.3)
            )
            end = max(end, done + half * jitter(rng, 0.25))
            if self.migrating and self.busy(partition, start) is not None:
                again += mine
        return end, again


@dataclass
class Envoy:
    """One gateway pod's Envoy egress to the model-server cluster: round robin over the hosts not
    ejected; a circuit breaker on outstanding requests (503 with response flag UO at once when
    full); outlier detection ejects a host after 5 consecutive 5xx, for 30 s x its ejections."""

    hosts: int
    max_pending: int
    outstanding: int = 0
    rr: int = 0
    consecutive: dict[int, int] = field(default_factory=dict)
    ejected_until: dict[int, float] = field(default_factory=dict)
    ejections: dict[int, int] = field(default_factory=dict)

    def admit(self, t: float) -> bool:
        return self.outstanding < self.max_pending

    def pick(self, t: float) -> int:
        live = [h for h in range(self.hosts) if self.ejected_until.get(h, -1.0) <= t] or list(
            range(self.hosts)
        )
        self.rr += 1
        return live[self.rr % len(live)]

    def hold(self, t: float) -> None:
        self.outstanding += 1

    def done(self, host: int, end: float, failed: bool) -> None:
        self.outstanding -= 1
        if not failed:
            self.consecutive[host] = 0
            return
        self.consecutive[host] = self.consecutive.get(host, 0) + 1
        if self.consecutive[host] >= 5:
            self.ejections[host] = self.ejections.get(host, 0) + 1
            self.ejected_until[host] = end + 30.0 * NS_PER_S * self.ejections[host]
            self.consecutive[host] = 0


@dataclass
class Inference:
    arrive: float
    queue_end: float  # the batch was dispatched to a model instance
    end: float
    batch: int
    instance: int
    failed: bool = False


@dataclass
class Batch:
    opened: float
    dispatch: float
    instance: int
    size: int = 1
    run_ns: float = 0.0

    @property
    def end(self) -> float:
        return self.dispatch + self.run_ns


@dataclass
class ModelHost:
    """A Triton-like server on one GPU: a dynamic batcher (up to `max_batch` requests, a maximum
    queue delay) feeding two model instances; a batch runs base + per request x its size. Requests
    arrive in time order: one joins the batch being collected until it is dispatched (when the delay
    is out and an instance is free) or full."""

    delay_ns: float
    base_ns: float
    per_ns: float
    max_batch: int = 8
    broken_from: float | None = None  # the GPU failed (every inference errors at once)
    batches: list[Batch | None] = field(default_factory=lambda: [None, None])
    collecting: Batch | None = None

    def _free(self, i: int) -> float:
        b = self.batches[i]
        return 0.0 if b is None else b.end

    def join(self, rng: random.Random, t: float) -> Batch | None:
        """The batch a request arriving at t rides (None: the broken GPU fails it at once)."""
        if self.broken_from is not None and t >= self.broken_from:
            return None
        b = self.collecting
        if b is not None and t < b.dispatch and b.size < self.max_batch:
            b.size += 1
        else:
            i = min(range(len(self.batches)), key=self._free)
            b = Batch(t, max(t + self.delay_ns, self._free(i)), i)
            self.batches[i] = self.collecting = b
        b.run_ns = (self.base_ns + self.per_ns * b.size) * jitter(rng, 0.05)
        return b
