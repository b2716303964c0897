"""The physics of the blind family `kstreams-iq` (kstreams_iq.py): G1 pauses in the JVMs, a Reactor
Netty event loop's stalls, a Kafka Streams instance answering an interactive query from its RocksDB
windowed stores (block cache, page cache, L0 files, the caching layer's lock held by the stream
thread's commit flush, CFS-throttled periods, restoration after a restart), BentoML's adaptive
batching dispatcher in front of one runner process, and R2DBC's connection pool. Times are ns from
the run's start.
"""

from __future__ import annotations

import bisect
import heapq
import random
from dataclasses import dataclass, field

from reference_pipeline.simulate.trace_table import NS_PER_MS, NS_PER_S, Stalls, lognormal_ms, merge_intervals


def exp_intervals(rng: random.Random, start: float, stop: float, every_s: float, median_ms: float,
                  sigma: float) -> list[tuple[float, float]]:
    """Intervals at exponential gaps (mean `every_s`) with log-normal lengths between start and stop."""
    out = []
    t = start + rng.expovariate(1.0 / every_s) * NS_PER_S
    while t < stop:
        length = lognormal_ms(rng, median_ms, sigma)
        out.append((t, t + length))
        t += length + rng.expovariate(1.0 / every_s) * NS_PER_S
    return out


# --- G1 ----------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class GcPause:
    start: float
    end: float
    gc_id: int
    name: str  # JFR's jdk.GarbageCollection name: G1New, G1Old (a mixed pause), G1Full
    cause: str  # "G1 Evacuation Pause", "G1 Humongous Allocation", "Allocation Failure"


def g1_pauses(rng: random.Random, horizon: float, humongous: bool) -> list[GcPause]:
    """A 4 GB heap with 2 MB regions. Healthy: young evacuation pauses of ~6 ms every ~2.5 s. With
    humongous allocations (objects of 1 MB and more, each in its own contiguous regions, allocated
    straight into the old generation): every one starts a concurrent cycle check, young pauses come
    about 6x as often and longer (humongous regions to reclaim, the remembered sets of the regions
    they reference), and when no contiguous free regions are left the allocation fails: to-space
    exhausted, then a single-threaded-phase Full GC of the whole heap (hundreds of ms)."""
    out: list[GcPause] = []
    gc_id = rng.randrange(200, 900)
    t = rng.uniform(0.0, 2.5) * NS_PER_S
    next_full = rng.uniform(2.0, 5.0) * NS_PER_S if humongous else float("inf")
    while t < horizon:
        if t >= next_full:
            length, name, cause = lognormal_ms(rng, 520.0, 0.3), "G1Full", "Allocation Failure"
            next_full = t + rng.uniform(4.0, 7.0) * NS_PER_S
        elif humongous and rng.random() < 0.5:
            length, name, cause = lognormal_ms(rng, 35.0, 0.4), "G1New", "G1 Humongous Allocation"
        else:
            length, name = lognormal_ms(rng, 6.0, 0.35), "G1New" if rng.random() < 0.85 else "G1Old"
            cause = "G1 Evacuation Pause"
        out.append(GcPause(t, t + length, gc_id, name, cause))
        gc_id += 1
        t += length + (rng.uniform(0.2, 0.6) if humongous else rng.uniform(1.6, 3.4)) * NS_PER_S
    return out


def pauses_in(pauses: list[GcPause], a: float, b: float) -> list[GcPause]:
    return [g for g in pauses if g.start < b and g.end > a]


# --- a Kafka Streams instance --------------------------------------------------------------------------

BLOCKS_PER_QUERY = 8  # 1 min store: 1 block, 1 h: 2, 24 h: 5 (hourly hopping windows over 2-3 segments)


@dataclass
class StreamsInstance:
    """One card-features pod: a JVM (G1 pauses and CFS-throttled periods in `stalls`), a shared RocksDB
    block cache over its tasks' windowed stores, the page cache under it and an EBS gp3 volume.
    `l0_cycles`: (start, end, peak files) of an L0 build-up that ends in a compaction (range scans
    merge every L0 file; the compaction's reads and writes queue ahead of ours on the disk).
    `flushes[task]`: the intervals in which that task's stream thread holds the caching store's lock
    (its commit flush: dirty cache entries written to RocksDB and the changelog). `down`: when the
    pod is not serving (restarting), `restoring[task]`: until when a task's stores are restored."""

    stalls: Stalls
    pauses: list[GcPause]
    hit_p: float
    page_p: float
    blocks: int = BLOCKS_PER_QUERY
    l0_cycles: list[tuple[float, float, float]] = field(default_factory=list)
    flushes: dict[int, list[tuple[float, float]]] = field(default_factory=dict)
    down: tuple[float, float] | None = None
    restoring: dict[int, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._l0 = [a for a, _, _ in self.l0_cycles]
        self._flush_starts = {k: [a for a, _ in v] for k, v in self.flushes.items()}

    def hold_lock(self, task: int, intervals: list[tuple[float, float]]) -> None:
        """The task's commit flushes (the store's lock held), in time order."""
        self.flushes[task] = intervals
        self._flush_starts[task] = [a for a, _ in intervals]

    def is_down(self, t: float) -> bool:
        return self.down is not None and self.down[0] <= t < self.down[1]

    def unavailable(self, task: int, t: float) -> bool:
        """Whether `store()` throws InvalidStateStoreException for the task's key at t."""
        return task in self.restoring and t < self.restoring[task]

    def l0_files(self, t: float) -> tuple[float, bool]:
        """(L0 files at t, whether a compaction is running): files build up, then an L0->L1 compaction
        takes the last fifth of the cycle."""
        k = bisect.bisect_right(self._l0, t) - 1
        if k < 0 or t >= self.l0_cycles[k][1]:
            return 4.0, False
        a, b, peak = self.l0_cycles[k]
        x = (t - a) / (b - a)
        return (4.0 + (peak - 4.0) * x / 0.8, False) if x < 0.8 else (peak, True)

    def _lock_wait(self, task: int, t: float) -> float:
        starts = self._flush_starts.get(task)
        if not starts:
            return t
        k = bisect.bisect_right(starts, t) - 1
        return self.flushes[task][k][1] if k >= 0 and t < self.flushes[task][k][1] else t

    def query(self, rng: random.Random, task: int, t: float) -> float:
        """When a windowed fetch of one card's aggregates from the three stores, begun at t, ends."""
        t = self.stalls.settle(t)
        t = self.stalls.settle(self._lock_wait(task, t))  # CachingWindowStore.fetch waits for the flush
        files, compacting = self.l0_files(t)
        cpu = 0.0
        io = 0.0
        for _ in range(self.blocks):
            cpu += 0.012 * NS_PER_MS * (1.0 + files / 8.0) * rng.lognormvariate(0.0, 0.25)
            if rng.random() < self.hit_p:
                continue
            if rng.random() < self.page_p:
                io += lognormal_ms(rng, 0.04, 0.3)
            else:
                io += disk_read(rng, compacting)
        extra = max(0.0, files - 8.0) / 4.0  # L0 files whose key range overlaps the scan: their blocks
        for _ in range(int(extra) + (rng.random() < extra % 1.0)):
            if rng.random() > self.hit_p:
                io += disk_read(rng, compacting)
        t = self.stalls.run(t, cpu + lognormal_ms(rng, 0.05, 0.3))  # serialising the result, the handler
        return self.stalls.settle(t + io)


def disk_read(rng: random.Random, compacting: bool) -> float:
    """One 16 KB read from the gp3 volume: ~0.5 ms, the odd one at 5-15 ms (the volume's own
    hiccups); a running compaction's reads and writes queue ahead of it."""
    base = lognormal_ms(rng, 8.0, 0.4) if rng.random() < 0.02 else lognormal_ms(rng, 0.5, 0.45)
    return base * (3.5 if compacting else 1.0)


def flush_intervals(rng: random.Random, horizon: float, commit_s: float, median_ms: float,
                    sigma: float) -> list[tuple[float, float]]:
    """A stream thread's commits every `commit_s` (commit.interval.ms), each flushing the caching
    layer for `median_ms` with the store's lock held."""
    out = []
    t = rng.uniform(0.0, commit_s) * NS_PER_S
    while t < horizon:
        length = lognormal_ms(rng, median_ms, sigma)
        out.append((t, t + length))
        t += length + commit_s * NS_PER_S * rng.uniform(0.97, 1.03)
    return out


def throttled_periods(rng: random.Random, horizon: float, every_s: float, burn_ms: float,
                      quota_ms: float = 200.0, period_ms: float = 100.0) -> list[tuple[float, float]]:
    """CFS throttling under a 2-CPU quota (200 ms of CPU per 100 ms period): a wall-clock punctuator
    every `every_s` per task scans a whole store (the stream threads and the RocksDB iterators burn
    `burn_ms` of CPU at up to 4 runnable threads); each period whose quota is spent before its end
    leaves the whole JVM throttled for the rest of it."""
    out = []
    t = rng.uniform(0.0, every_s) * NS_PER_S
    while t < horizon:
        left = burn_ms * rng.lognormvariate(0.0, 0.25)
        period = int(t // (period_ms * NS_PER_MS))
        while left > 0:
            p0 = period * period_ms * NS_PER_MS
            busy = min(left, quota_ms * rng.uniform(0.85, 1.0)) / 4.0  # 4 threads burn the quota
            if left >= quota_ms * 0.85:
                out.append((p0 + busy * NS_PER_MS, p0 + period_ms * NS_PER_MS))
            left -= quota_ms
            period += 1
        t += every_s * NS_PER_S * rng.uniform(0.9, 1.1)
    return out


def l0_cycles(rng: random.Random, horizon: float) -> list[tuple[float, float, float]]:
    """A store whose compaction cannot keep up (max_background_jobs 2 with 6 stores' compactions, the
    1-min store's segments rolling every minute): L0 builds towards the slowdown trigger (20) and
    past it, then a long L0->L1 compaction."""
    out = []
    t = rng.uniform(0.1, 0.6) * NS_PER_S
    while t < horizon:
        length = rng.uniform(1.6, 2.8) * NS_PER_S
        out.append((t, t + length, rng.uniform(28.0, 40.0)))
        t += length + rng.uniform(0.1, 0.4) * NS_PER_S
    return out


def instance_stalls(pauses: list[GcPause], throttled: list[tuple[float, float]]) -> Stalls:
    return Stalls(merge_intervals([(g.start, g.end) for g in pauses] + throttled))


# --- BentoML ------------------------------------------------------------------------------------------

@dataclass
class Scored:
    arrive: float
    start: float
    end: float
    batch: int


@dataclass
class Runner:
    """One BentoML runner process behind its adaptive batching dispatcher: requests join the open
    batch; the dispatcher sends it when it holds `max_batch` rows, or once its oldest request has
    waited `wait_ms` (the dispatcher's estimate of how long waiting for more is worth it, capped by
    max_latency_ms), and only when the runner is idle (one batch at a time in the runner's worker).
    A batch of n rows takes a + b*n of the GBM's CPU."""

    max_batch: int
    wait_ms: float
    a_ms: float
    b_ms: float
    free_at: float = 0.0
    open_at: float = -1.0
    members: list[tuple[int, float]] = field(default_factory=list)

    def _send(self, rng: random.Random, at: float, out: dict[int, Scored]) -> None:
        start = max(at, self.free_at)
        work = (self.a_ms + self.b_ms * len(self.members)) * NS_PER_MS * rng.lognormvariate(0.0, 0.12)
        if rng.random() < 0.004:  # healthy noise: the runner's worker descheduled, a Python collection
            work += lognormal_ms(rng, 6.0, 0.5)
        end = start + work
        self.free_at = end
        for task, arrive in self.members:
            out[task] = Scored(arrive, start, end, len(self.members))
        self.open_at, self.members = -1.0, []

    def submit(self, rng: random.Random, task: int, t: float, out: dict[int, Scored]) -> None:
        """Submissions in time order; a request's result lands in `out` when its batch ends."""
        deadline = self.open_at + self.wait_ms * NS_PER_MS
        if self.members and t >= max(deadline, self.free_at):
            self._send(rng, max(deadline, self.free_at), out)
        if not self.members:
            self.open_at = t
        self.members.append((task, t))
        if len(self.members) >= self.max_batch:
            self._send(rng, t, out)

    def flush(self, rng: random.Random, out: dict[int, Scored]) -> None:
        if self.members:
            self._send(rng, self.open_at + self.wait_ms * NS_PER_MS, out)


# --- R2DBC ---------------------------------------------------------------------------------------------

def pool_grants(requests: list[tuple[float, float, int]], size: int) -> dict[int, float]:
    """r2dbc-pool's FIFO acquisition: (wanted at, held for, id) in any order -> when each got a
    connection (held `held for` from then)."""
    free = [0.0] * size
    heapq.heapify(free)
    out: dict[int, float] = {}
    for t, hold, key in sorted(requests):
        got = max(t, heapq.heappop(free))
        heapq.heappush(free, got + hold)
        out[key] = got
    return out
