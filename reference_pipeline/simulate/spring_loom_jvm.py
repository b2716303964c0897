"""The physics of the blind family `spring-loom` (spring_loom.py): carriers under virtual threads, a
monitor that pins them, a pod's CPU (CFS periods, ZGC's pauses and allocation stalls), and the
backends the search handler calls (Elasticsearch with adaptive replica selection, the feature service
behind a round-robin gRPC channel, Caffeine's expireAfterWrite, HikariCP, a Kafka producer's buffer).

Every shared resource is a set of `Slots`: servers (carriers, connections, workers, a monitor) each
holding the busy intervals booked on it. Requests are simulated one after another in arrival order,
but a step is booked into the earliest gap at or after the time it is ready, so a later request's
early step can run before an earlier request's late one: the schedule is work-conserving, as the
ForkJoinPool's carriers or a connection pool would make it.
"""

from __future__ import annotations

import bisect
import math
import random
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from reference_pipeline.simulate.trace_table import NS_PER_MS, NS_PER_S, Stalls, lognormal_ms, merge_intervals

PERIOD = 100 * NS_PER_MS  # the CFS period


class Slots:
    """`k` identical servers; each keeps its busy intervals (sorted, disjoint)."""

    def __init__(self, k: int) -> None:
        self.busy: list[list[tuple[float, float]]] = [[] for _ in range(k)]

    def prune(self, t: float) -> None:
        """Forget intervals over before t (no later step is ready before t)."""
        for lst in self.busy:
            k = 0
            while k < len(lst) and lst[k][1] < t:
                k += 1
            if k:
                del lst[:k]

    def earliest(self, t: float, length: float) -> tuple[float, int, float]:
        """(start, server, end of the gap there): the earliest start >= t of a gap of `length`."""
        best = (math.inf, 0, math.inf)
        for i, lst in enumerate(self.busy):
            cand, gap_end = t, math.inf
            for a, b in lst:
                if b <= cand:
                    continue
                if a >= cand + length:
                    gap_end = a
                    break
                cand = b
            if cand < best[0]:
                best = (cand, i, gap_end)
        return best

    def take(self, server: int, a: float, b: float) -> None:
        bisect.insort(self.busy[server], (a, b))

    def fit(self, t: float, finish: Callable[[float], float]) -> tuple[float, float, int, float]:
        """(start, finish(start), server, end of its gap) of the earliest start s >= t whose gap holds
        [s, finish(s)] (a stretch's length can depend on when it starts: stalls)."""
        length = finish(t) - t
        for attempt in range(8):
            s, server, gap_end = self.earliest(t, length)
            e = finish(s)
            if e <= gap_end or attempt == 7:
                return s, e, server, gap_end
            length = e - s
        raise AssertionError("unreachable")

    def book(self, t: float, finish: Callable[[float], float]) -> tuple[float, float]:
        """Hold a server from the earliest start s >= t until finish(s); returns (s, finish(s))."""
        s, e, server, _ = self.fit(t, finish)
        self.take(server, s, e)
        return s, e


# --- one search-api pod's CPU --------------------------------------------------------------------------

def zgc_pauses(rng: random.Random, horizon: float) -> list[tuple[float, float]]:
    """Generational ZGC's three short safepoints per cycle (mark start, mark end, relocate start):
    tens to a few hundred µs each, a cycle every 0.6-1.5 s: housekeeping, not a tail."""
    out, t = [], rng.uniform(0.2, 1.2) * NS_PER_S
    while t < horizon:
        for offset_ms in (0.0, rng.uniform(30, 80), rng.uniform(90, 140)):
            a = t + offset_ms * NS_PER_MS
            out.append((a, a + lognormal_ms(rng, 0.08, 0.5)))
        t += rng.uniform(0.6, 1.5) * NS_PER_S
    return out


def throttled_periods(rng: random.Random, horizon: float, phase: float,
                      busy: bool) -> list[tuple[float, float]]:
    """CFS throttling of one pod (quota 4 CPUs a 100 ms period): when the pod's threads have spent the
    quota, every thread waits for the next period. Healthy: a JIT compile or a GC cycle overlapping a
    busy moment empties the quota in ~1 % of periods by a few ms. `busy`: each ZGC cycle (every ~0.9 s)
    runs its worker threads (sized from the node's 64 CPUs, not the pod's 4) beside C2 compiler threads
    for 2-4 periods, which run out of quota after 30-70 ms."""
    out = []
    k = 0
    next_cycle = rng.uniform(0.1, 0.9) * NS_PER_S
    cycle_left = 0
    while k * PERIOD + phase < horizon:
        start = k * PERIOD + phase
        end = start + PERIOD
        if busy and cycle_left == 0 and start >= next_cycle:
            cycle_left = rng.randint(2, 4)
            next_cycle = start + rng.uniform(0.6, 1.2) * NS_PER_S
        if cycle_left:
            cycle_left -= 1
            out.append((start + rng.uniform(30, 70) * NS_PER_MS, end))
        elif rng.random() < 0.01:
            out.append((end - rng.uniform(1, 6) * NS_PER_MS, end))
        k += 1
    return out


def allocation_stalls(rng: random.Random, window: tuple[float, float]) -> list[tuple[float, float]]:
    """ZGC allocation stalls while a burst of large queries allocates faster than the collector frees:
    the heap runs out every ~100 ms and the threads that allocate wait 5-90 ms for a cycle to free
    pages (threads that do not allocate run on)."""
    out, t = [], window[0] + rng.expovariate(1 / 0.1) * NS_PER_S
    while t < window[1]:
        length = min(90 * NS_PER_MS, lognormal_ms(rng, 30.0, 0.6))
        out.append((t, t + length))
        t += length + rng.expovariate(1 / 0.1) * NS_PER_S
    return out


@dataclass
class Pod:
    """One search-api pod: its carriers, the monitor of the ONNX session wrapper, Hikari's pool, its
    CPU stalls (for every thread) and allocation stalls (for allocating threads only), its caches."""

    carriers: Slots
    monitor: Slots
    hikari: Slots
    cpu: Stalls
    alloc: Stalls  # cpu's stalls with the allocation stalls
    alloc_only: Stalls  # the allocation stalls alone (what a thread that sat in one reports)
    jit: Callable[[int], float]  # CPU time multiple for the n-th request the pod serves
    served: int = 0
    rr: int = 0  # the gRPC channel's round-robin position
    drain: Slots = field(default_factory=lambda: Slots(1))  # the producer's sender, a record at a time
    kafka: list[tuple[float, float]] = field(default_factory=list)  # (admitted, drained) per record
    model_factor: float = 1.0
    sessions: int = 0  # ONNX sessions run (the first few grow its arena)

    def cpu_step(self, t: float, work: float, allocates: bool) -> tuple[float, float]:
        """A stretch of Java code on a carrier: (mounted, done)."""
        stalls = self.alloc if allocates else self.cpu
        return self.carriers.book(t, lambda s: stalls.run(s, work))

    def prune(self, t: float) -> None:
        for slots in (self.carriers, self.monitor, self.hikari, self.drain):
            slots.prune(t)
        self.kafka = [x for x in self.kafka if x[1] >= t]

    def rerank(self, t: float, tokenize: float, onnx: float) -> tuple[float, float, float]:
        """Tokenize on a carrier, then enter the session wrapper's monitor and run the model: the
        virtual thread stays mounted (pinned) from the monitor's entry to its exit, waiting or not.
        Returns (mounted, monitor entered, monitor left)."""
        length = tokenize + onnx
        for attempt in range(10):
            c, server, gap_end = self.carriers.earliest(t, length)
            ready = self.alloc.run(c, tokenize)
            m, left, owner, _ = self.monitor.fit(ready, lambda s: self.cpu.run(s, onnx))
            if left <= gap_end or attempt == 9:
                self.carriers.take(server, c, left)
                self.monitor.take(owner, m, left)
                return c, m, left
            length = left - c
        raise AssertionError("unreachable")


def make_pod(rng: random.Random, horizon: float, carriers: int, busy_throttle: bool,
             alloc_window: tuple[float, float] | None, jit: Callable[[int], float]) -> Pod:
    cpu = merge_intervals(zgc_pauses(rng, horizon)
                          + throttled_periods(rng, horizon, rng.uniform(0, PERIOD), busy_throttle))
    windows = allocation_stalls(rng, alloc_window) if alloc_window else []
    return Pod(Slots(carriers), Slots(1), Slots(10), Stalls(cpu), Stalls(merge_intervals(cpu + windows)),
               Stalls(windows), jit)


# --- Elasticsearch: 3 data nodes, 3 shards of 2 copies, adaptive replica selection -----------------------

COPIES = ((0, 1), (1, 2), (2, 0))  # the data nodes holding each shard's copies


@dataclass
class Elastic:
    """A kNN query fans out to one copy of each shard; the coordinating node ranks copies by the
    response times it has seen (ARS), which it learns of as responses come in: a node that slows down
    keeps its share until its EWMA has risen."""

    merge: tuple[float, float] | None  # node 1 merges segments in this window
    ewma: list[float] = field(default_factory=lambda: [7.0, 7.0, 7.0])
    pending: deque = field(default_factory=deque)  # (time seen, node, ms)
    turn: int = 0

    def query(self, rng: random.Random, t: float, heavy: bool) -> tuple[float, int]:
        """(the query's duration in ns, the coordinating node): the client's node selector takes the
        nodes in turn; a merging node is also slow to coordinate (its search threads share the CPU
        and disk with the merge threads)."""
        self.turn += 1
        coordinator = self.turn % 3
        merging = self.merge is not None and self.merge[0] <= t < self.merge[1]
        while self.pending and self.pending[0][0] <= t:
            _, node, ms = self.pending.popleft()
            self.ewma[node] = 0.95 * self.ewma[node] + 0.05 * ms
        worst = 0.0
        for copies in COPIES:
            w = [self.ewma[n] ** -3 for n in copies]
            node = copies[0] if rng.random() * sum(w) < w[0] else copies[1]
            ms = 6.0 * rng.lognormvariate(0.0, 0.3) * (1.8 if heavy else 1.0)
            if merging and node == 1:
                ms *= 6.0 * rng.lognormvariate(0.0, 0.4)  # HNSW graph merge: CPU and I/O on node 1
            if rng.random() < 0.008:
                ms += min(400.0, 25.0 * rng.paretovariate(2.0))  # a refresh or a cold segment
            self.pending.append((t + ms * NS_PER_MS + 1.5 * NS_PER_S, node, ms))
            worst = max(worst, ms)
        coordinate = 1.2 * rng.lognormvariate(0.0, 0.3) + (3.0 if heavy else 0.0)
        if merging and coordinator == 1:
            coordinate *= 10.0 * rng.lognormvariate(0.0, 0.5)
        return (worst + coordinate) * NS_PER_MS, coordinator


# --- Caffeine (per pod) over the feature service ------------------------------------------------------------

ITEMS = 40_000
TTL = 60 * NS_PER_S


class Catalog:
    """Item popularity (Zipf-like) and the candidates a query retrieves."""

    def __init__(self, seed: int) -> None:
        weights = 1.0 / np.arange(1, ITEMS + 1) ** 1.05
        self.p = weights / weights.sum()
        self.cdf = np.cumsum(self.p)
        self.np = np.random.default_rng(seed * 31 + 7)

    def candidates(self, n: int) -> np.ndarray:
        return np.unique(np.minimum(np.searchsorted(self.cdf, self.np.random(n)), ITEMS - 1))


class Caffeine:
    """expireAfterWrite(60 s): an entry read 60 s after it was written is a miss, however often it was
    read since. Starts in its steady state: an item asked for at rate r is present with probability
    60r / (60r + 1), written uniformly in the last minute; or, with `wave_at`, the hot items that a
    bulk preload wrote at one moment all expire together at `wave_at`."""

    def __init__(self, catalog: Catalog, draws_per_s: float, wave_at: float | None) -> None:
        g = catalog.np
        rate = catalog.p * draws_per_s
        present = g.random(ITEMS) < 60 * rate / (60 * rate + 1)
        self.written = np.where(present, -g.random(ITEMS) * TTL, -np.inf)
        if wave_at is not None:
            preload = (rate * 60 > 1.0) & (g.random(ITEMS) < 0.95)
            self.written[preload] = wave_at - TTL

    def lookup(self, keys: np.ndarray, t: float) -> np.ndarray:
        """The keys that miss at t (expired, never written, or being loaded by another request)."""
        w = self.written[keys]
        return keys[(t - w >= TTL) | (w > t)]

    def put(self, keys: np.ndarray, t: float) -> None:
        self.written[keys] = t


@dataclass
class FeatureService:
    """Backends behind the pods' round-robin channels, each a few cores (a batch holds one); a batch
    costs per key (decoding and assembling rows from the service's own store).
    `bad`: one backend whose every call is slow."""

    backends: list[Slots]
    bad: int | None

    def serve(self, rng: random.Random, backend: int, t: float, keys: int) -> tuple[float, float]:
        """(start, end) of the server span: the batch's work holds a core; waiting on the backend's
        store (a swapping replica behind the bad backend, the odd slow read) holds none."""
        work = (1.2 + 0.6 * keys) * NS_PER_MS * rng.lognormvariate(0.0, 0.25)
        wait = 0.0
        if backend == self.bad:
            wait = lognormal_ms(rng, 36.0, 0.45)
        elif rng.random() < 0.005:
            wait = lognormal_ms(rng, 15.0, 0.5)
        start, done = self.backends[backend].book(t, lambda s: s + work)
        return start, done + wait


# --- PostgreSQL, Kafka -------------------------------------------------------------------------------------

def purchases_ms(rng: random.Random, slow_plan: bool) -> float:
    """The user's recent purchases: an index scan (~1 ms), or after the plan flipped a sequential scan
    of the user's order lines with a sort (~110 ms)."""
    if slow_plan:
        return lognormal_ms(rng, 110.0, 0.45)
    ms = lognormal_ms(rng, 1.1, 0.35)
    return ms + (lognormal_ms(rng, 25.0, 0.5) if rng.random() < 0.005 else 0.0)


RECORD = 100_000  # bytes of one impression record (200 candidates, scores, features)
BUFFER = 2_000_000  # buffer.memory (lowered to bound the heap)


def kafka_send(pod: Pod, t: float, slow: tuple[float, float] | None, fill_rate: float) -> float:
    """When `send()` returns for a record handed over at t. The sender drains the buffer a record at a
    time at the brokers' pace: ~10x the pod's fill rate, or, while a slow follower still in the ISR
    holds up every acks=all produce request, 0.85x. A record that does not fit in buffer.memory blocks
    the caller until enough records ahead of it are acknowledged."""
    rate = fill_rate * (0.85 if slow and slow[0] <= t < slow[1] else 10.0)  # bytes per ns
    held = sorted(e for a, e in pod.kafka if a <= t < e)  # the records in the buffer at t
    room = BUFFER // RECORD
    back = t if len(held) < room else held[len(held) - room]
    _, drained = pod.drain.book(back, lambda a: a + RECORD / rate)
    pod.kafka.append((back, drained))
    return back
