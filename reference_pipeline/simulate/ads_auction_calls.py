"""What `ad-auction` calls (blind family `ads-auction`, ads_auction.py): the candidate-index shards
(parallel gRPC calls with a per-attempt deadline and one retry on the shard's other replica), the
budget cache (Redis, with the primary store behind it), the network between zones, and the CTR model
server's batcher. Each is a small physical model; the family module draws the spans from them."""

from __future__ import annotations

import heapq
import itertools
import random
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from reference_pipeline.simulate.ads_auction_runtime import PodClock
from reference_pipeline.simulate.trace_table import NS_PER_MS, NS_PER_S, Stalls, lognormal_ms

ADVERTISERS = 20_000
_ZIPF = list(itertools.accumulate(1.0 / (i + 1) ** 0.75 for i in range(ADVERTISERS)))
PRIMARY_RECORDS_S = 20_000.0
RTO_MS = 200.0  # Linux's minimum TCP retransmission timeout: a lost segment costs at least this


def hop(rng: random.Random, cross_zone: bool, flaky: bool) -> float:
    """One-way network time (ns) of a request or a reply: ~0.08 ms in a zone, ~0.35 ms across zones;
    from a pod on a flaky node, cross-zone packets queue at its saturated uplink (jitter of ms) and
    ~1 % of the messages lose a segment and wait for a retransmission (>= 200 ms)."""
    t = lognormal_ms(rng, 0.35 if cross_zone else 0.08, 0.3)
    if flaky and cross_zone:
        t += lognormal_ms(rng, 1.2, 0.8)
        if rng.random() < 0.012:
            t += RTO_MS * NS_PER_MS * rng.uniform(1.0, 1.3)
    return t


@dataclass(frozen=True)
class ShardPod:
    """One candidate-index pod: shard, replica, zone, its median scan time (ms) and its index-swap
    stalls (the handler waits on the swap's write lock)."""

    shard: int
    replica: int
    zone: int
    median_ms: float
    sigma: float
    stalls: Stalls


@dataclass(frozen=True)
class Attempt:
    """One CLIENT call to a shard pod and the SERVER span it caused (which runs to its end even when
    the client gave up at its deadline)."""

    pod: ShardPod
    start: float
    end: float
    timed_out: bool
    attempt: int
    server_start: float
    scan_start: float
    scan_end: float
    server_end: float
    candidates: int


def fan_out(rng: random.Random, t: float, clock: PodClock, zone: int, flaky: bool,
            shards: list[list[ShardPod]], slots: int, deadline: float) -> tuple[list[Attempt], float]:
    """Every shard is called at once (one goroutine each); the request waits for the last answer.
    An attempt still running at the deadline ends there (DEADLINE_EXCEEDED) and, once, is retried
    after a short backoff on the shard's other replica; a second miss drops the shard's candidates."""
    attempts: list[Attempt] = []
    done = t
    for s, replicas in enumerate(shards):
        r = rng.randrange(len(replicas))
        start = t + (s + 1) * 0.012 * NS_PER_MS
        for attempt in (1, 2):
            pod = replicas[r]
            arrive = start + hop(rng, pod.zone != zone, flaky) + lognormal_ms(rng, 0.04, 0.3)
            scan_s = pod.stalls.settle(arrive + lognormal_ms(rng, 0.02, 0.4))
            scan = lognormal_ms(rng, pod.median_ms * (1.0 + 0.01 * slots), pod.sigma)
            if rng.random() < 0.003:  # a posting list not in the page cache
                scan += rng.uniform(5.0, 20.0) * NS_PER_MS
            candidates = rng.randint(40, 120)
            scan_e = scan_s + scan
            server_e = scan_e + lognormal_ms(rng, 0.02 + 0.0015 * candidates, 0.3)
            reply = server_e + hop(rng, pod.zone != zone, flaky)
            end = clock.run(clock.settle(reply), lognormal_ms(rng, 0.03 + 0.002 * candidates, 0.3))
            timed_out = end - start > deadline
            if timed_out:
                end = clock.settle(start + deadline + lognormal_ms(rng, 0.02, 0.5))
            attempts.append(Attempt(pod, start, end, timed_out, attempt, arrive, scan_s, scan_e, server_e,
                                    candidates))
            if not timed_out or attempt == 2:
                break
            start = clock.settle(end + rng.uniform(1.0, 3.0) * NS_PER_MS)
            r = (r + 1) % len(replicas)
        done = max(done, end)
    return attempts, done


class BudgetCache:
    """Which advertisers' budget state Redis holds. Budget updates from the pacing service delete
    keys (popular advertisers spend, so they are deleted more often); a flush empties it at
    `flush_at` (ns; None: never). A key read from the primary store is written back."""

    def __init__(self, rng: random.Random, horizon: float, flush_at: float | None) -> None:
        self.present = [rng.random() < 0.997 for _ in range(ADVERTISERS)]
        n = int(20.0 * horizon / NS_PER_S)
        times = sorted(rng.uniform(0.0, horizon) for _ in range(n))
        self.deletes = list(zip(times, rng.choices(range(ADVERTISERS), cum_weights=_ZIPF, k=n),
                                strict=True))
        if flush_at is not None:
            self.deletes.append((flush_at, -1))
            self.deletes.sort()
        self.applied = 0
        self.reads: deque[tuple[float, int]] = deque()

    def advertisers(self, rng: random.Random, k: int) -> list[int]:
        return sorted(set(rng.choices(range(ADVERTISERS), cum_weights=_ZIPF, k=k)))

    def missing(self, t: float, advertisers: list[int]) -> list[int]:
        """The keys an MGET at t does not find (deletes up to t applied first)."""
        while self.applied < len(self.deletes) and self.deletes[self.applied][0] <= t:
            key = self.deletes[self.applied][1]
            if key < 0:
                self.present = [False] * ADVERTISERS
            else:
                self.present[key] = False
            self.applied += 1
        return [a for a in advertisers if not self.present[a]]

    def write_back(self, keys: list[int]) -> None:
        for a in keys:
            self.present[a] = True

    def primary_load(self, t: float, records: int) -> float:
        """How much slower the primary store reads than when idle: records read in the last 250 ms
        (this batch included) against the ~20 k records/s its disks serve well, squared."""
        self.reads.append((t, records))
        while self.reads and self.reads[0][0] < t - 0.25 * NS_PER_S:
            self.reads.popleft()
        rate = sum(n for _, n in self.reads) / 0.25
        return 1.0 + (rate / PRIMARY_RECORDS_S) ** 2


def campaigns(advertiser: int) -> int:
    """Campaign records behind an advertiser's budget state (the primary store reads each)."""
    return 1 + advertiser % 7


@dataclass(frozen=True)
class ModelCall:
    arrive: float
    request: int
    pod: int
    rows: int


def run_batcher(calls: list[ModelCall], pods: int, workers: int, max_batch: int, delay_ms: float,
                exec_ns: Callable[[int], float]) -> dict[int, tuple[float, float, int]]:
    """The model server's dynamic batcher, per pod: a free worker takes the oldest waiting request,
    adds the ones already waiting and those arriving within the batch delay (up to `max_batch`),
    and runs the batch (`exec_ns(rows)`); a worker is busy while it collects and while it runs.
    Returns request -> (batch start, batch end, batch size)."""
    out: dict[int, tuple[float, float, int]] = {}
    delay = delay_ms * NS_PER_MS
    for p in range(pods):
        mine = sorted((c for c in calls if c.pod == p), key=lambda c: c.arrive)
        free = [0.0] * workers
        heapq.heapify(free)
        i = 0
        while i < len(mine):
            first = max(heapq.heappop(free), mine[i].arrive)
            j = i + 1
            while j < len(mine) and j - i < max_batch and mine[j].arrive <= first + delay:
                j += 1
            close = max(first, mine[j - 1].arrive) if j - i == max_batch else first + delay
            end = close + exec_ns(sum(c.rows for c in mine[i:j]))
            for c in mine[i:j]:
                out[c.request] = (close, end, j - i)
            heapq.heappush(free, end)
            i = j
    return out
