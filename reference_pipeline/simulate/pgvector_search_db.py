"""The Postgres side of the blind family `pgvector-search` (pgvector_search.py): what one read or write
costs on one server, and PgBouncer's transaction pool in front of it.

- `PageCache`: shared buffers + the OS page cache of one server over the HNSW index and the table's
  heap. A graph walk's page touches are log-uniform in page rank (the upper layers and the entry
  point's neighbourhood are reached by every walk, the far leaves rarely): a warm cache that holds the
  hottest `held` of `pages` ranks misses 1 - ln(held)/ln(pages) of touches (~2 %). A cache emptied by
  a restart holds only the pages walked since (a miss reads the page in), so the miss ratio decays
  slowly as the hot head fills.
- `Disk`: an EBS gp3 volume: a random read ~0.9 ms (the odd 8-30 ms hiccup). With the volume's I/O
  budget spent (burst credits exhausted: the volume capped at its baseline IOPS while replay and the
  other readers use most of it), a read first waits in the device's queue: a mean-field M/M/1 wait
  (with probability rho, exponential with mean S/(1-rho)). `slow` scales reads under competing writes.
- `Server`: CPU (`cores`, plus `busy_cores` of background work such as a bulk import) shared by the
  transactions that hold a server connection; a statement's CPU is stretched by the connections
  running beside it (processor sharing: each held connection counts by the share of recent statements'
  time on CPU, up to 0.8; one waiting on disk reads leaves its core to the others).
- `Bouncer`: one pool (database/user pair) of `size` server connections in transaction mode: a
  transaction takes a connection at its BEGIN (the client waits in PgBouncer's queue, cl_waiting,
  first come first served: no span for the wait, it shows inside the BEGIN statement's span) and
  gives it back at COMMIT.
- Query costs: an HNSW walk with `hnsw.ef_search` 40 and a tenant filter checked on the heap (pgvector
  0.8 iterative scan: the walk goes on until LIMIT rows pass the filter, so a tenant with a fraction s
  of the rows makes it visit ~max(40, 20/s) tuples, capped at hnsw.max_scan_tuples); or, after a plan
  flip, an exact scan: every row of the tenant read through the tenant index (bitmap heap scan with
  prefetch: effective_io_concurrency reads in flight) and its distance computed.
"""

from __future__ import annotations

import heapq
import math
import random
from dataclasses import dataclass, field

import numpy as np

from reference_pipeline.simulate.trace_table import NS_PER_MS

INDEX_PAGES = 1_500_000  # 12 GB of 8 KB pages
WARM_HELD = 1_100_000  # ranks a warm server holds: ~2 % of touches miss
EF_SEARCH, LIMIT, MAX_SCAN = 40, 20, 20_000


def visited(fraction: float) -> int:
    """Tuples an iterative HNSW scan visits to find LIMIT rows of a tenant holding `fraction`."""
    return int(min(MAX_SCAN, max(EF_SEARCH, LIMIT / fraction)))


def walk_touches(tuples: int) -> int:
    """Pages a walk touches: graph pages along the way plus one heap page per candidate (the filter
    is checked on the heap)."""
    return 60 + int(2.2 * tuples)


def walk_cpu_ms(tuples: int) -> float:
    return 2.5 + 0.035 * tuples


@dataclass
class PageCache:
    pages: int = INDEX_PAGES
    held: int = WARM_HELD
    cold_from: float | None = None  # the restart: empty from then on, filled by walks
    miss_scale: float = 1.0  # a bulk import churning the cache: more of the walk misses
    touched: set[int] = field(default_factory=set)

    def misses(self, rng: np.random.Generator, t: float, touches: int, far: bool = False) -> int:
        """How many of a walk's page touches read from disk. `far`: a walk pushed deep into the graph
        by a selective filter touches colder pages (twice the miss ratio)."""
        if self.cold_from is None or t < self.cold_from:
            p = (1.0 - math.log(self.held) / math.log(self.pages)) * self.miss_scale * (2.0 if far else 1.0)
            return int(rng.binomial(touches, min(p, 0.9)))
        ranks = (self.pages ** rng.random(touches)).astype(np.int64).tolist()
        miss = 0
        for r in ranks:
            if r > self.held:
                miss += 1
            elif r not in self.touched:
                self.touched.add(r)
                miss += 1
        return miss


@dataclass
class Disk:
    read_ms: float = 0.9
    rho: float = 0.0
    slow: float = 1.0

    def reads(self, rng: np.random.Generator, n: int, parallel: int = 1) -> float:
        """Wall ns for `n` random reads issued one at a time (a graph walk), or `parallel` at a time."""
        if n <= 0:
            return 0.0
        total = float(rng.lognormal(0.0, 0.35, n).sum()) * self.read_ms * self.slow
        hiccups = int(rng.binomial(n, 0.002))
        if hiccups:
            total += float(rng.uniform(8.0, 30.0, hiccups).sum())
        if self.rho > 0:
            waiting = int(rng.binomial(n, self.rho))
            if waiting:
                total += float(rng.gamma(waiting, self.read_ms * self.slow / (1.0 - self.rho)))
        return total / parallel * NS_PER_MS


@dataclass
class Server:
    """One Postgres server: its CPU, page cache and volume."""

    name: str
    cores: int
    cache: PageCache
    disk: Disk
    busy_cores: float = 0.0  # background CPU (a bulk import's index inserts)
    on_cpu: float = 0.8  # the share of a held connection's statement time on CPU (recent statements)

    def stretch(self, held: int) -> float:
        return max(1.0, (self.on_cpu * held + self.busy_cores) / self.cores)

    def _done(self, cpu: float, io: float) -> float:
        """A statement of `cpu` + `io` ns ran: the share of held connections on CPU follows it (a
        connection waiting on a disk read leaves its core to the others)."""
        self.on_cpu = 0.9 * self.on_cpu + 0.1 * min(0.8, cpu / (cpu + io))
        return cpu + io

    def walk(self, rng: np.random.Generator, t: float, fraction: float, held: int) -> tuple[float, int, int]:
        """(ns, pages read from disk, tuples visited) for the HNSW query of a tenant with `fraction`
        of the rows; 0.5 % of walks wander (a poorly connected region: 5x the tuples)."""
        tuples = visited(fraction) * (5 if rng.random() < 0.005 else 1)
        far = tuples > 400
        misses = self.cache.misses(rng, t, walk_touches(tuples), far)
        cpu = walk_cpu_ms(tuples) * float(rng.lognormal(0.0, 0.2)) * NS_PER_MS * self.stretch(held)
        return self._done(cpu, self.disk.reads(rng, misses)), misses, tuples

    def exact(self, rng: np.random.Generator, t: float, rows: int, held: int) -> tuple[float, int, int]:
        """(ns, pages read, rows) for an exact scan of `rows` rows: ~5 rows a heap page, distance
        computed for each, reads prefetched 16 at a time."""
        heap_pages = rows // 5
        misses = int(rng.binomial(heap_pages, 0.02 * self.cache.miss_scale))
        cpu = (1.0 + 0.0006 * rows) * float(rng.lognormal(0.0, 0.12)) * NS_PER_MS * self.stretch(held)
        return self._done(cpu, self.disk.reads(rng, misses, parallel=16)), misses, rows


class Bouncer:
    """A PgBouncer pool of `size` server connections (transaction mode), first come first served."""

    def __init__(self, size: int) -> None:
        self.free = [0.0] * size

    def take(self, t: float) -> tuple[float, int]:
        """(when the transaction got a connection, connections held then, its own included)."""
        got = max(t, heapq.heappop(self.free))
        return got, 1 + sum(1 for f in self.free if f > got)

    def give(self, t: float) -> None:
        heapq.heappush(self.free, t)


def checkpoints(rng: random.Random, horizon: float, every_s: float,
                sync_s: float) -> list[tuple[float, float]]:
    """The sync phases of checkpoints (the fsync of a checkpoint's dirty data files, when WAL flushes
    queue behind them), one every ~`every_s`, each ~`sync_s` long."""
    out = []
    t = rng.uniform(0.2, 1.0) * every_s * 1e9
    while t < horizon:
        length = sync_s * rng.lognormvariate(0.0, 0.25) * 1e9
        out.append((t, t + length))
        t += every_s * rng.lognormvariate(0.0, 0.15) * 1e9
    return out


def commit_ns(rng: random.Random, t: float, syncs: list[tuple[float, float]]) -> float:
    """A commit's WAL flush on the primary: ~0.8 ms; during a checkpoint's sync phase the flush waits
    behind the data-file writes on the same volume (tens to a hundred-odd ms)."""
    for a, b in syncs:
        if a <= t < b:
            return min(b - t + 2 * NS_PER_MS, 45.0 * NS_PER_MS * rng.lognormvariate(0.0, 0.6))
        if a > t:
            break
    return 0.8 * NS_PER_MS * rng.lognormvariate(0.0, 0.35)
