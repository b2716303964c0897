"""The backends of the blind family `php-faiss` (php_faiss.py): the C++ `ann-retrieval` pods (a fixed
gRPC/HTTP worker pool, a memory-mapped Faiss IVF-PQ index whose inverted lists fault in from a
throughput-capped volume after a swap, a TensorRT encoder behind a dynamic batcher, process-wide
freezes), and the costs of the storefront's MySQL and Redis calls. Times are ns from the run's start.
"""

from __future__ import annotations

import bisect
import itertools
import random
from dataclasses import dataclass, field

from reference_pipeline.simulate.trace_table import NS_PER_MS, Stalls, WorkerPool, lognormal_ms

NLIST = 8192  # inverted lists of the IVF index
LIST_READ_MS = 2.6  # one cold list (~880 KB of PQ codes + ids) from the SSD volume at ~340 MB/s
PER_LIST_MS = 0.22  # ADC scan of one resident list (12 k PQ64 codes)
COARSE_MS = 0.25  # the coarse quantizer (8192 centroids)
PER_CANDIDATE_MS = 0.004  # heap + id mapping per returned candidate


def list_popularity(skew: float) -> list[float]:
    """Cumulative Zipf weights of the inverted lists: similar-products queries probe popular
    categories' lists far more often than the long tail."""
    return list(itertools.accumulate(1.0 / (rank + 1) ** skew for rank in range(NLIST)))


@dataclass
class Batcher:
    """A TensorRT engine behind a dynamic batcher on one GPU: a request joins the batch being
    collected (open for `delay` after its first member, or until the GPU frees), which runs in
    base + per_item x size. Requests reach the model in roughly, not exactly, time order (each
    request's model computes its own calls): one earlier than the open batch runs as if alone."""

    max_batch: int
    delay_ns: float
    base_ns: float
    per_item_ns: float
    gpu_free: float = 0.0
    opened: float = -1.0
    close: float = -1.0
    size: int = 0

    def submit(self, t: float) -> tuple[float, int]:
        """(when the batch holding a request submitted at t is done, that batch's size)."""
        if t < self.opened:
            return t + self.delay_ns + self.base_ns + self.per_item_ns, 1
        if t < self.close and self.size < self.max_batch:
            self.size += 1
        else:
            self.size, self.opened = 1, t
            self.close = max(t + self.delay_ns, self.gpu_free)
        end = self.close + self.base_ns + self.per_item_ns * self.size
        self.gpu_free = max(self.gpu_free, end)
        return end, self.size


class Volume:
    """The block device under the memory-mapped index: one read at a time, each placed in the first
    idle gap from when it is asked for (calls are modelled one request at a time, so reads are not
    asked for in time order)."""

    def __init__(self) -> None:
        self.starts: list[float] = []
        self.ends: list[float] = []

    def read(self, t: float, length: float) -> float:
        """When a read of `length` ns asked for at t is done."""
        k = bisect.bisect_right(self.ends, t)
        start = t
        while k < len(self.starts) and self.starts[k] < start + length:
            start = max(start, self.ends[k])
            k += 1
        self.starts.insert(k, start)
        self.ends.insert(k, start + length)
        return start + length


@dataclass
class Search:
    pickup: float  # a pool worker took the call
    start: float  # SERVER span start
    scan_start: float
    scan_end: float
    end: float  # SERVER span end (the reply is written)
    cold_lists: int
    probed: int


@dataclass
class Embed:
    pickup: float
    start: float
    tokenize_end: float  # encode_query's CPU part, then trt.enqueue
    trt_end: float
    end: float
    batch: int


@dataclass
class RetrievalPod:
    """One `ann-retrieval` process: `threads` workers behind the completion queue (a call waits for
    one), an index swapped at `swap_at` (after it, lists not yet in the page cache are read from
    the volume, one read at a time), and `stalls` that freeze the whole process."""

    threads: int
    numa: float  # > 1 where the index's memory sits on the remote NUMA node
    stalls: Stalls
    batcher: Batcher
    popularity: list[float]
    swap_at: float | None = None
    pool: WorkerPool = field(init=False)
    resident: set[int] = field(default_factory=set)
    volume: Volume = field(default_factory=Volume)

    def __post_init__(self) -> None:
        self.pool = WorkerPool(self.threads)

    def _take(self, arrive: float) -> float:
        return self.stalls.settle(self.pool.acquire(arrive))

    def search(self, rng: random.Random, arrive: float, nprobe: int, k: int) -> Search:
        pickup = self._take(arrive)
        start = pickup + lognormal_ms(rng, 0.02, 0.3)
        scan_start = self.stalls.run(start, lognormal_ms(rng, 0.04, 0.3))
        lists = set(rng.choices(range(NLIST), cum_weights=self.popularity, k=nprobe))
        t = scan_start
        cold = 0
        if self.swap_at is not None and scan_start >= self.swap_at:
            for lst in sorted(lists - self.resident):  # page faults: each list read from the volume
                t = self.volume.read(t, LIST_READ_MS * NS_PER_MS * rng.lognormvariate(0.0, 0.15))
                self.resident.add(lst)
                cold += 1
        work = (COARSE_MS + PER_LIST_MS * nprobe) * self.numa * rng.lognormvariate(0.0, 0.12)
        work += PER_CANDIDATE_MS * k
        scan_end = self.stalls.run(self.stalls.settle(t), work * NS_PER_MS)
        end = self.stalls.run(scan_end, (0.03 + 0.0015 * k) * NS_PER_MS)  # protobuf reply
        self.pool.release(end)
        return Search(pickup, start, scan_start, scan_end, end, cold, len(lists))

    def embed(self, rng: random.Random, arrive: float) -> Embed:
        """The product-embedding endpoint: tokenize (CPU), then a blocking TensorRT batch (the
        worker thread waits on the GPU stream)."""
        pickup = self._take(arrive)
        start = pickup + lognormal_ms(rng, 0.02, 0.3)
        tokenized = self.stalls.run(start, lognormal_ms(rng, 0.45, 0.25))
        done, size = self.batcher.submit(tokenized)
        trt_end = self.stalls.settle(done)
        end = self.stalls.run(trt_end, lognormal_ms(rng, 0.05, 0.3))
        self.pool.release(end)
        return Embed(pickup, start, tokenized, trt_end, end, size)


def freezes(rng: random.Random, horizon: float, every_s: float, median_ms: float, sigma: float
            ) -> list[tuple[float, float]]:
    """Freezes at exponential gaps (mean `every_s`) with log-normal lengths: khugepaged / direct
    compaction holding the process' mmap lock, or jemalloc's background purge."""
    out = []
    t = rng.expovariate(1.0 / every_s) * 1e9
    while t < horizon:
        length = lognormal_ms(rng, median_ms, sigma)
        out.append((t, t + length))
        t += length + rng.expovariate(1.0 / every_s) * 1e9
    return out


# --- MySQL and Redis, as the storefront's PHP workers see them ---------------------------------------

def connect_ms(rng: random.Random, rtt_ms: float) -> float:
    """A full PDO connect: resolver lookup (the pod's search list), TCP, the server greeting, TLS
    (SSL request + a full 1.2 handshake: 2 RTT + the server's RSA signature), caching_sha2 auth, and
    Laravel's `SET NAMES` / `sql_mode` statements: ~7 round trips and ~3 ms of CPU."""
    dns = lognormal_ms(rng, 1.2, 0.4)
    trips = sum(rtt_ms * rng.lognormvariate(0.0, 0.3) for _ in range(7))
    cpu = lognormal_ms(rng, 2.0, 0.6) + lognormal_ms(rng, 0.6, 0.3)  # the replica's, then PHP's
    return dns + trips * NS_PER_MS + cpu


def query_ms(rng: random.Random, rtt_ms: float, rows: int, slow: bool) -> float:
    """One statement on a read replica: a round trip plus execution; 1 % of healthy statements hit a
    cold page of the buffer pool. A slow replica (I/O-bound) is ~6x slower with a heavy tail."""
    exec_ms = 0.55 + 0.012 * rows
    if slow:
        exec_ms *= 6.0 * rng.lognormvariate(0.0, 0.45)
        if rng.random() < 0.12:
            exec_ms += min(600.0, 25.0 * rng.paretovariate(1.4))
    else:
        exec_ms *= rng.lognormvariate(0.0, 0.3)
        if rng.random() < 0.01:
            exec_ms += min(80.0, 4.0 * rng.paretovariate(1.6))
    return (rtt_ms * rng.lognormvariate(0.0, 0.2) + exec_ms) * NS_PER_MS


@dataclass
class Redis:
    """The embedding cache (one primary): each command is a round trip; a BGSAVE fork stalls the
    event loop, and a full instance evicting under maxmemory does the evictions inline."""

    stalls: Stalls
    rtt_ms: float

    def call(self, rng: random.Random, t: float, evicting: bool) -> float:
        served = self.stalls.settle(t + self.rtt_ms / 2 * NS_PER_MS)
        work = lognormal_ms(rng, 0.04, 0.4) + (lognormal_ms(rng, 0.35, 0.8) if evicting else 0.0)
        return served + work + self.rtt_ms / 2 * NS_PER_MS * rng.lognormvariate(0.0, 0.2)
