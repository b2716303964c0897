"""The physics of one `ranker` host of the blind family `cpp-thrift` (cpp_thrift.py), and of the
backends it calls: a fixed CPU worker pool behind a bounded queue (fbthrift's ThreadManager), the
cores the workers share (libtorch's 4 intra-op threads per inference, 16 cores, CPU steal), NUMA
placement, THP direct compaction (the thread that faults stalls, and so do others faulting meanwhile,
not every thread), the process-wide metrics mutex that an exporter scrape holds, the in-process
embedding LRU (empty after a restart) and TorchScript's first runs per thread; memcached through
mcrouter, the Java feature service and the ads-blending service. Times are ns from the run's start.
"""

from __future__ import annotations

import bisect
import heapq
import math
import random
from dataclasses import dataclass, field

from reference_pipeline.simulate.trace_table import NS_PER_MS, NS_PER_S, lognormal_ms

CORES = 16
INTRA_OP = 4  # libtorch intra-op threads per inference
SHARDS = 16  # memcached boxes behind mcrouter's consistent hash
LRU_WARM_HIT = 0.92  # the embedding LRU's hit ratio once warm
LRU_FILL = 2500.0  # requests a host serves for its emptied LRU to be ~63 % refilled
WARMUP_RUNS = 2  # TorchScript's profiling executor: the first runs of a graph per thread are slow
STALL_EVENT_MS = 20.0  # a fault stall at least this long is reported (on the seeds that report it)


def stall_windows(rng: random.Random, horizon: float, every_s: float, median_ms: float, sigma: float,
                  lo_ms: float, hi_ms: float) -> list[tuple[float, float]]:
    """Windows at exponential gaps (mean `every_s`) with clipped log-normal lengths."""
    out = []
    t = rng.expovariate(1.0 / every_s) * NS_PER_S
    while t < horizon:
        length = min(hi_ms, max(lo_ms, median_ms * rng.lognormvariate(0.0, sigma))) * NS_PER_MS
        out.append((t, t + length))
        t += length + rng.expovariate(1.0 / every_s) * NS_PER_S
    return out


class Windows:
    """Sorted, disjoint windows [start, end) and the questions a thread asks of them."""

    def __init__(self, windows: list[tuple[float, float]]) -> None:
        windows = sorted(windows)
        self.starts = [a for a, _ in windows]
        self.ends = [b for _, b in windows]

    def holding(self, t: float) -> float | None:
        """The end of the window holding t, or None."""
        k = bisect.bisect_right(self.starts, t) - 1
        return self.ends[k] if k >= 0 and t < self.ends[k] else None

    def beginning(self, a: float, b: float) -> list[tuple[float, float]]:
        """The windows that begin inside (a, b)."""
        k = bisect.bisect_right(self.starts, a)
        out = []
        while k < len(self.starts) and self.starts[k] < b:
            out.append((self.starts[k], self.ends[k]))
            k += 1
        return out


@dataclass
class Host:
    """One ranker process: `workers` threads taking requests from a queue bounded at `queue_cap`;
    compute slowed by `numa` (remote memory) and `steal` (the share of CPU a neighbour takes);
    `compaction`: THP direct-compaction windows; `scrapes`: when an exporter scrape holds the metrics
    mutex; `down`: when the process is stopped (a rolling restart), after which it comes back with
    an empty LRU (`restarted_at`) and cold TorchScript graphs."""

    index: int
    workers: int
    queue_cap: int
    numa: float
    steal: float
    compaction: Windows
    scrapes: Windows
    down: tuple[float, float] | None = None
    free: list[tuple[float, int]] = field(default_factory=list)
    waiting: list[float] = field(default_factory=list)  # worker-start times of queued requests
    cores: int = CORES
    inflight: dict[int, list[float]] = field(default_factory=dict)  # per feed-api process: end times
    forwards: list[float] = field(default_factory=list)  # end times of inferences running
    runs: list[int] = field(default_factory=list)  # inferences per worker thread since (re)start
    served_since_start: int = 0
    restarted: bool = False

    def __post_init__(self) -> None:
        self.free = [(0.0, w) for w in range(self.workers)]
        self.runs = [WARMUP_RUNS] * self.workers  # warm at the run's start

    def up(self, t: float) -> bool:
        return self.down is None or not (self.down[0] <= t < self.down[1])

    def outstanding(self, t: float, client: int) -> int:
        """Calls to this host outstanding at t as one feed-api process counts them (a client-side
        balancer knows only its own calls)."""
        mine = self.inflight.setdefault(client, [])
        while mine and mine[0] <= t:
            heapq.heappop(mine)
        return len(mine)

    def queued(self, t: float) -> int:
        while self.waiting and self.waiting[0] <= t:
            heapq.heappop(self.waiting)
        return len(self.waiting)

    def restart_check(self, t: float) -> None:
        """Back from a restart: a new process, its LRU empty and its graphs cold."""
        if self.down is not None and t >= self.down[1] and not self.restarted:
            self.restarted, self.served_since_start = True, 0
            self.runs = [0] * self.workers
            self.free = [(max(f, self.down[1]), w) for f, w in self.free]
            heapq.heapify(self.free)

    def take(self, t: float) -> tuple[float, int]:
        """(when a worker takes a request that reached the queue at t, which worker)."""
        free_at, slot = heapq.heappop(self.free)
        start = max(t, free_at)
        if start > t:
            heapq.heappush(self.waiting, start)
        return start, slot

    def release(self, slot: int, end: float, client: int) -> None:
        heapq.heappush(self.free, (end, slot))
        heapq.heappush(self.inflight.setdefault(client, []), end)
        self.served_since_start += 1

    def cpu(self, rng: random.Random, t: float, work: float, fault_p: float,
            stalls: list[tuple[float, float]] | None = None) -> float:
        """When `work` ns of one thread's CPU time started at t is done: slower where the memory is
        remote or a neighbour steals CPU; a compaction window the thread runs into stalls it to the
        window's end if the thread faults meanwhile (`fault_p`); stalls are appended to `stalls`."""
        held = self.compaction.holding(t)
        if held is not None and rng.random() < fault_p:
            if stalls is not None:
                stalls.append((t, held))
            t = held
        end = t + work * self.numa / (1.0 - self.steal)
        for a, b in self.compaction.beginning(t, end):
            if rng.random() < fault_p:
                if stalls is not None:
                    stalls.append((a, b))
                end += b - a
        return end

    def forward(self, rng: random.Random, t: float, slot: int, work: float, fault_p: float,
                stalls: list[tuple[float, float]]) -> float:
        """One inference of `work` ns (at 4 intra-op threads on idle cores): the cores are shared
        with the other inferences running (more intra-op threads than cores: each gets a share), and
        a thread's first runs of the graph after a (re)start profile and optimize it."""
        while self.forwards and self.forwards[0] <= t:
            heapq.heappop(self.forwards)
        share = max(1.0, INTRA_OP * (len(self.forwards) + 1) / (self.cores * (1.0 - self.steal) * 1.15))
        if self.runs[slot] < WARMUP_RUNS:
            work += lognormal_ms(rng, 140.0, 0.3)
            self.runs[slot] += 1
        end = self.cpu(rng, t, work * share, fault_p, stalls)
        heapq.heappush(self.forwards, end)
        return end

    def metrics(self, t: float) -> float:
        """The counter bumps at the end of a request: the mutex, unless a scrape holds it."""
        held = self.scrapes.holding(t)
        return (held if held is not None else t) + 0.004 * NS_PER_MS

    def lru_hit(self, rng: random.Random) -> bool:
        fill = 1.0 - math.exp(-self.served_since_start / LRU_FILL) if self.restarted else 1.0
        return rng.random() < LRU_WARM_HIT * fill


# --- what the ranker calls --------------------------------------------------------------------------

def multiget_ns(rng: random.Random, keys: list[int], failed_shard: int | None) -> tuple[float, bool]:
    """A multiget through mcrouter on the host: split per shard, in parallel; the slowest shard's
    reply ends it. A shard whose local box is marked down is served from the other region."""
    worst, remote = 0.0, False
    for shard in set(keys):
        rtt = lognormal_ms(rng, 0.35, 0.35)
        if rng.random() < 0.002:  # a retransmit or a busy box
            rtt += lognormal_ms(rng, 6.0, 0.5)
        if shard == failed_shard:
            rtt += lognormal_ms(rng, 44.0, 0.15)
            remote = True
        worst = max(worst, rtt)
    return worst + lognormal_ms(rng, 0.12, 0.3) * (1 + 0.05 * len(keys)), remote


@dataclass
class JavaService:
    """The feature service (Java): handlers on a thread pool, latency growing with its load, and
    young-generation pauses that stop every request in flight."""

    pauses: Windows
    load: float = 1.0

    def serve(self, rng: random.Random, t: float, median_ms: float, per_key_ms: float, keys: int
              ) -> tuple[float, float]:
        start = t + lognormal_ms(rng, 0.05, 0.3)
        sigma = 0.35 + 0.2 * (self.load - 1.0)  # a busier service queues: a longer tail
        work = (median_ms * rng.lognormvariate(0.0, sigma) + per_key_ms * keys) * self.load * NS_PER_MS
        end = start + work
        for a, b in self.pauses.beginning(start - 1.0, end):
            end += b - a
        return start, end


@dataclass
class AdsHost:
    """One ads-blending server; its latency is `slow` x the healthy one once `slow_from` is reached."""

    slow_from: float | None

    def serve(self, rng: random.Random, t: float) -> tuple[float, float]:
        start = t + lognormal_ms(rng, 0.06, 0.3)
        if self.slow_from is not None and t >= self.slow_from:
            work = lognormal_ms(rng, 58.0, 0.55)
        else:
            work = lognormal_ms(rng, 16.0, 0.3)
            if rng.random() < 0.006:
                work += lognormal_ms(rng, 45.0, 0.4)  # the odd slow auction
        return start, start + work
