"""The physics of the blind family `feast-redis` (feast_redis.py): the Redis Cluster shards (one
single-threaded primary each, as a fluid queue of work with its blocked intervals), connection dials
(ndots:5 resolution, SYN drops on a full conntrack table), TF Serving's batch scheduler on each host
(all traffic, traced or not), the Go runtime's GC cycles per pod, and the Kafka producer's buffer.
Times are ns from the run's start.
"""

from __future__ import annotations

import bisect
import heapq
import random
from dataclasses import dataclass, field

import numpy as np

from reference_pipeline.simulate.trace_table import NS_PER_MS, NS_PER_S, lognormal_ms

BUCKET_NS = 0.5 * NS_PER_MS  # the shards' fluid model resolves load and capacity per half millisecond


def blocked_intervals(rng: random.Random, horizon: float, every_s: float, median_ms: float, sigma: float,
                      start_s: float = 0.0, until: float | None = None) -> list[tuple[float, float]]:
    """Intervals at exponential gaps (mean `every_s`) with log-normal lengths, from `start_s`: the
    shard's event loop runs nothing else meanwhile (a fork's page-table copy, one slow command, a
    MIGRATE batch waiting for the target's RESTORE)."""
    out = []
    t = start_s * NS_PER_S + rng.expovariate(1.0 / every_s) * NS_PER_S
    stop = horizon if until is None else until
    while t < stop:
        length = lognormal_ms(rng, median_ms, sigma)
        out.append((t, t + length))
        t += length + rng.expovariate(1.0 / every_s) * NS_PER_S
    return out


class Shard:
    """One Redis primary: a single thread that runs commands one at a time. Its load is the whole
    cluster's traffic (traced or not) as a utilisation per bucket (`rho`: seconds of command work
    arriving per second); `blocked` intervals (a fork, a slow command) run nothing. The work waiting
    when a command arrives (the Lindley recursion of the fluid queue) is served at the shard's
    capacity after it: a command arriving during a blocked interval waits for its end and for
    everything that queued behind the block."""

    def __init__(self, rho: np.ndarray, blocked: list[tuple[float, float]]) -> None:
        n = len(rho)
        capacity = np.ones(n)
        for a, b in blocked:
            k0, k1 = int(a // BUCKET_NS), int(b // BUCKET_NS)
            if k0 >= n:
                continue
            if k0 == k1:
                capacity[k0] -= (b - a) / BUCKET_NS
                continue
            capacity[k0] -= (k0 + 1) - a / BUCKET_NS
            capacity[k0 + 1:min(k1, n)] = 0.0
            if k1 < n:
                capacity[k1] -= b / BUCKET_NS - k1
        capacity = np.clip(capacity, 0.0, 1.0)
        # Lindley's recursion b' = max(0, b + arriving - served) as the walk minus its running minimum:
        # the work (ns) waiting at the start of each bucket
        walk = np.concatenate(([0.0], np.cumsum((rho - capacity) * BUCKET_NS)))
        self.backlog = walk - np.minimum(np.minimum.accumulate(walk), 0.0)
        self.served = np.concatenate(([0.0], np.cumsum(capacity * BUCKET_NS)))  # capacity served by bucket k
        self.capacity = capacity
        self.blocked = sorted(blocked)

    def wait(self, t: float) -> float:
        """How long a command arriving at t waits before the thread runs it."""
        k = min(int(t // BUCKET_NS), len(self.capacity) - 1)
        frac = t / BUCKET_NS - k
        ahead = self.backlog[k] + (self.backlog[k + 1] - self.backlog[k]) * frac
        done = self.served[k] + self.capacity[k] * BUCKET_NS * frac  # capacity used up to t
        j = bisect.bisect_left(self.served, done + ahead + 1.0)  # first bucket edge past the work ahead
        if j >= len(self.served):
            return ahead
        # inside bucket j-1, the remaining work is served at that bucket's capacity
        cap = self.capacity[j - 1] * BUCKET_NS
        over = self.served[j] - (done + ahead)
        end = j * BUCKET_NS - (over / cap * BUCKET_NS if cap > 0 else 0.0)
        return max(0.0, end - t)


def load_profile(rng: random.Random, buckets: int, mean: float,
                 bursts: tuple[tuple[float, float, float], ...], run_ns: float) -> np.ndarray:
    """A shard's utilisation per bucket: `mean` times the traffic multiple, with the traffic's slow
    drift (auctions come in waves) and the Poisson noise of ~hundreds of commands per bucket."""
    nrng = np.random.default_rng(rng.getrandbits(63))
    t = np.arange(buckets) * BUCKET_NS
    multiple = np.ones(buckets)
    for start, length, m in bursts:
        multiple[(t >= start * NS_PER_S) & (t < (start + length) * NS_PER_S)] = m
    slow = np.repeat(nrng.normal(0.0, 0.04, buckets // 200 + 1), 200)[:buckets]  # 100 ms waves
    slow = np.convolve(slow, np.ones(5) / 5, mode="same")
    fast = nrng.normal(0.0, 0.08, buckets)
    return np.clip(mean * multiple * (1.0 + slow + fast), 0.0, None)


# --- connections -------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Dial:
    start: float
    dns_end: float  # == start where no name is resolved (the IPs of CLUSTER SLOTS)
    syn_drops: int
    end: float


SEARCH_DOMAINS = 4  # feast.svc.cluster.local, svc.cluster.local, cluster.local, ec2.internal


def dial(rng: random.Random, t: float, rtt: float, resolve: bool, drop_p: float) -> Dial:
    """A new TCP connection to a shard and go-redis' HELLO. With `resolve`, the shard's hostname
    (two dots, under ndots:5) is first tried with each search domain: A and AAAA in parallel to
    CoreDNS, an NXDOMAIN each (the last domain goes to the VPC resolver), then the name as given.
    With `drop_p`, each SYN is dropped by a full conntrack table with that probability: the
    retransmission timer fires after 1 s, then 2 s more (3 s in all)."""
    dns_end = t
    if resolve:
        for k in range(SEARCH_DOMAINS + 1):
            median = 1.8 if k == SEARCH_DOMAINS - 1 else 0.7  # the VPC resolver / CoreDNS on another node
            one, other = lognormal_ms(rng, median, 0.5), lognormal_ms(rng, median, 0.5)
            dns_end += max(one, other)
    drops = 0
    rto = (1.0 * NS_PER_S, 2.0 * NS_PER_S)
    syn = dns_end
    while drops < 2 and rng.random() < drop_p:
        syn += rto[drops]
        drops += 1
    end = syn + rtt * rng.lognormvariate(0.0, 0.2) + rtt * rng.lognormvariate(0.0, 0.2)  # SYN/ACK, HELLO
    return Dial(t, dns_end, drops, end + lognormal_ms(rng, 0.03, 0.3))


# --- TF Serving ----------------------------------------------------------------------------------------

@dataclass
class Scored:
    arrive: float
    start: float  # its batch began on a batch thread
    end: float
    batch_examples: int
    rejected: bool = False


@dataclass
class TfHost:
    """One TF Serving host's shared batch scheduler for the CTR model: tasks join the open batch
    while their examples fit in `max_batch` (a task that does not fit closes it); an open batch also
    closes `timeout` after its first task; closed batches wait FIFO for one of `threads` batch
    threads; a batch runs in base + per-example time. `stall` is a per-batch chance of a direct
    compaction stall while the batch's tensors are allocated (transparent huge pages)."""

    threads: int
    max_batch: int
    timeout_ns: float
    stall_p: float = 0.0
    free: list[float] = field(default_factory=list)
    open_at: float = -1.0
    examples: int = 0
    members: list[tuple[int, float]] = field(default_factory=list)
    queued: list[float] = field(default_factory=list)  # start times of closed batches (max_enqueued)

    def __post_init__(self) -> None:
        self.free = [0.0] * self.threads

    def _close(self, rng: random.Random, at: float, out: dict[int, Scored]) -> None:
        start = max(at, heapq.heappop(self.free))
        work = (1.4 + 0.032 * self.examples) * NS_PER_MS * rng.lognormvariate(0.0, 0.1)
        if rng.random() < 0.003:  # healthy noise: an inter-op thread descheduled
            work += lognormal_ms(rng, 4.0, 0.5)
        if self.stall_p and rng.random() < self.stall_p:
            work += lognormal_ms(rng, 45.0, 0.55)
        end = start + work
        heapq.heappush(self.free, end)
        for task, arrive in self.members:
            out[task] = Scored(arrive, start, end, self.examples)
        self.open_at, self.examples, self.members = -1.0, 0, []

    def submit(self, rng: random.Random, task: int, t: float, examples: int, out: dict[int, Scored]) -> None:
        """Submissions in time order; results land in `out` when their batch closes."""
        if self.members and t >= self.open_at + self.timeout_ns:
            self._close(rng, self.open_at + self.timeout_ns, out)
        if self.members and self.examples + examples > self.max_batch:
            self._close(rng, t, out)
        if not self.members:
            self.open_at = t
        self.members.append((task, t))
        self.examples += examples
        if self.examples >= self.max_batch:
            self._close(rng, t, out)

    def flush(self, rng: random.Random, out: dict[int, Scored]) -> None:
        if self.members:
            self._close(rng, self.open_at + self.timeout_ns, out)


# --- the Go runtime --------------------------------------------------------------------------------------

@dataclass
class GoRuntime:
    """One ctr-scorer pod's GC: cycles whose concurrent mark (in `marks`) takes 25 % of the CPU for
    its dedicated workers and makes allocating goroutines assist, so a goroutine waking up inside a
    mark waits for a P and its CPU work is stretched; two short stop-the-world phases per cycle
    (sweep termination, mark termination) in `stw`."""

    marks: list[tuple[float, float]]
    stw: list[tuple[float, float]]
    cycles: list[tuple[float, int, int, float]]  # (start, cycle number, live heap bytes, pause ns)
    sched_ms: float  # median wait for a P when waking inside a mark
    stretch: float  # CPU work inside a mark takes this much longer
    _starts: list[float] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._starts = [a for a, _ in self.marks]
        self._stw = [a for a, _ in self.stw]

    def _in(self, starts: list[float], spans: list[tuple[float, float]], t: float
            ) -> tuple[float, float] | None:
        k = bisect.bisect_right(starts, t) - 1
        return spans[k] if k >= 0 and t < spans[k][1] else None

    def wake(self, rng: random.Random, t: float) -> float:
        """When a goroutine made runnable at t runs."""
        pause = self._in(self._stw, self.stw, t)
        if pause:
            t = pause[1]
        if self._in(self._starts, self.marks, t):
            t += lognormal_ms(rng, self.sched_ms, 0.7)
        return t

    def cpu(self, t: float, work: float) -> float:
        """When `work` ns of a goroutine's CPU started at t ends."""
        mark = self._in(self._starts, self.marks, t)
        return t + (work * self.stretch if mark else work)

    def overlapping(self, a: float, b: float) -> list[tuple[float, int, int, float]]:
        return [c for c in self.cycles if a <= c[0] < b]

    def count_before(self, t: float) -> tuple[int, float]:
        """(GC cycles completed by t, their total stop-the-world ns): the runtime's counters."""
        k = bisect.bisect_right(self._starts, t)
        return k, sum(c[3] for c in self.cycles[:k])


def go_runtime(rng: random.Random, horizon: float, live_mb: float, alloc_mb_s: float,
               leak: bool) -> GoRuntime:
    """GOGC=100: a cycle starts when the heap reaches twice the live heap after the last one; the
    mark scans the live heap (~0.12 ms per MB with 4 Ps; 0.18 for the leaked cache's
    pointer-dense map). A feature-cache leak grows the live heap:
    marks take hundreds of ms and the cache's map churn raises the allocation rate."""
    marks, stw, cycles = [], [], []
    t = rng.uniform(0.0, live_mb / alloc_mb_s) * NS_PER_S
    n = 1000 + rng.randrange(4000)
    while t < horizon:
        mark = live_mb * (0.18 if leak else 0.12) * NS_PER_MS * rng.lognormvariate(0.0, 0.15)
        pause1 = lognormal_ms(rng, 0.4 if leak else 0.08, 0.4)
        pause2 = lognormal_ms(rng, 1.6 if leak else 0.12, 0.4)
        stw += [(t, t + pause1), (t + pause1 + mark, t + pause1 + mark + pause2)]
        marks.append((t, t + pause1 + mark + pause2))
        cycles.append((t, n, int(live_mb * 1048576 * rng.uniform(0.98, 1.02)), pause1 + pause2))
        n += 1
        t += pause1 + mark + pause2 + live_mb / alloc_mb_s * NS_PER_S * rng.uniform(0.85, 1.15)
    return GoRuntime(marks, stw, cycles, 3.0 if leak else 0.15, 3.0 if leak else 1.3)


# --- Kafka ---------------------------------------------------------------------------------------------

def produce_blocked(rng: random.Random, horizon: float, slow_broker: bool, fill_s: float
                    ) -> list[tuple[float, float]]:
    """When a pod's producer buffer is full and `Produce` blocks. A slow broker (a disk stalling its
    fsyncs, acks=all waiting on it) leaves the records of the partitions it leads in the buffer; once
    the buffer (shared by all partitions) is full, `fill_s` after the broker slowed, every Produce
    blocks until the broker recovers and the buffer drains. Healthy: the buffer never fills."""
    if not slow_broker:
        return []
    out = []
    t = rng.uniform(0.3, 1.2) * NS_PER_S
    while t < horizon:
        length = rng.uniform(2.2, 3.2) * NS_PER_S
        full = t + fill_s * NS_PER_S * rng.uniform(0.9, 1.1)
        if full < t + length:
            out.append((full, t + length + lognormal_ms(rng, 4.0, 0.3)))
        t += length + rng.uniform(2.5, 4.5) * NS_PER_S
    return out
