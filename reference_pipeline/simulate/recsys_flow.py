"""The mechanisms of the blind family `recsys-ranker` (recsys_ranker.py): the model server's dynamic
batcher, the two-level candidate cache, the feature call with its deadline and retries, and the way a
JVM reports its GC pauses. recsys_ranker.py runs the requests and writes the spans.
"""

from __future__ import annotations

import bisect
import heapq
import random
from dataclasses import dataclass, field
from typing import Any

from reference_pipeline.simulate.trace_table import NS_PER_MS, Stalls, lognormal_ms, merge_intervals

BATCH_WINDOW_MS = 0.5  # max_queue_delay: an idle executor waits this long for more requests
MAX_BATCH = 32


@dataclass
class Batch:
    start: float
    end: float
    attrs: dict[str, Any]  # shared by the execute spans of every traced member
    size: int = 1


@dataclass
class Batcher:
    """One model-server pod's dynamic batcher in front of one GPU execution instance. A request that
    finds the executor busy joins the next batch that has room (batches run back to back); one that
    finds it idle opens a batch that starts after the batching window (later arrivals within the window
    join it). A batch's execution time grows with its size; it is drawn when the batch opens, from the
    size of the batch before it (what the executor runs at that load), and every member's execute span
    carries the batch's final size. Requests reach the batcher nearly but not exactly in time order (a
    request delayed upstream arrives after later ones were placed), so batches are kept in time order
    and a request is placed by its own arrival time."""

    base_ms: float
    per_item_ms: float
    model_attrs: dict[str, Any]
    starts: list[float] = field(default_factory=list)
    batches: list[Batch] = field(default_factory=list)

    def join(self, t: float, rng: random.Random) -> Batch:
        window = BATCH_WINDOW_MS * NS_PER_MS
        i = bisect.bisect_left(self.starts, t)
        free = self.batches[i - 1].end if i > 0 else 0.0  # when the executor is free of earlier batches
        while i < len(self.batches):
            nxt = self.batches[i]
            waits_for_it = nxt.start <= max(free, t) + window  # busy until it starts, or within the window
            if not waits_for_it:
                break
            if nxt.size < MAX_BATCH:
                nxt.size += 1
                nxt.attrs["inference.batch.size"] = nxt.size
                return nxt
            free, i = nxt.end, i + 1
        start = t + window if free <= t else free
        expected = self.batches[i - 1].size if i > 0 else 1
        work = lognormal_ms(rng, self.base_ms + self.per_item_ms * expected, 0.08)
        batch = Batch(start, start + work, {**self.model_attrs, "inference.batch.size": 1})
        self.starts.insert(i, start)
        self.batches.insert(i, batch)
        return batch


@dataclass
class CandidateCache:
    """Caffeine (per pod) in front of Redis (shared), Postgres behind both. Keys are user segments with
    a skewed popularity. Before the run both levels hold every segment but the rarest 2 % (a healthy
    run misses rarely). A config refresh at `refresh_at` clears every pod's Caffeine cache and bumps
    the Redis key version, so both levels start empty: every pod's first lookup of a segment misses
    Caffeine, and the lookups of a segment that reach Redis before the first Postgres read of it has
    been written back all miss it too (no request coalescing: a stampede on Postgres)."""

    pods: int
    segments: int
    refresh_at: float = float("inf")
    local: list[dict[int, float]] = field(default_factory=list)  # pod -> segment -> cached since
    redis: dict[int, float] = field(default_factory=dict)  # segment -> in Redis since
    pg_busy: list[float] = field(default_factory=list)  # end times of the Postgres reads in flight

    def __post_init__(self) -> None:
        warm = {k: 0.0 for k in range(int(self.segments * 0.98))}
        self.local = [dict(warm) for _ in range(self.pods)]
        self.redis = dict(warm)

    def add_pod(self) -> None:
        self.local.append({})  # a new pod starts with an empty Caffeine cache

    def in_local(self, pod: int, segment: int, t: float) -> bool:
        since = self.local[pod].get(segment)
        return since is not None and since <= t and (since >= self.refresh_at or t < self.refresh_at)

    def in_redis(self, segment: int, t: float) -> bool:
        since = self.redis.get(segment)
        return since is not None and since <= t and (since >= self.refresh_at or t < self.refresh_at)

    def postgres_ms(self, t: float, rng: random.Random) -> float:
        """A candidate query's time: slower with the other candidate queries in flight (they share the
        database's CPU and the table's buffer pages)."""
        while self.pg_busy and self.pg_busy[0] <= t:
            heapq.heappop(self.pg_busy)
        return lognormal_ms(rng, 14.0, 0.35) * (1.0 + 0.08 * len(self.pg_busy))

    def query_done(self, end: float) -> None:
        heapq.heappush(self.pg_busy, end)


def segment_of(rng: random.Random, segments: int) -> int:
    return int(segments * rng.random() ** 3)  # a few segments take most of the traffic


def gc_reports(
    style: str, st: Stalls, a: float, b: float
) -> tuple[list[tuple[float, str, dict[str, Any]]], dict[str, Any]]:
    """The pauses during [a, b) as a JVM tracer reports them on the request's SERVER span: span events
    from a GarbageCollectionNotification listener (`events`), deltas of the GarbageCollectorMXBeans'
    count and time between the request's start and end (`jmx`), or nothing (`none`)."""
    pauses = [(p, q) for p, q in st.overlapping(a, b) if q > p]
    if style == "events":
        events = []
        for p, q in pauses:
            ms = (q - p) / NS_PER_MS
            full = ms > 250.0
            events.append(
                (
                    q,
                    "jvm.gc.pause",
                    {
                        "jvm.gc.name": "G1 Old Generation" if full else "G1 Young Generation",
                        "jvm.gc.action": "end of major GC" if full else "end of minor GC",
                        "jvm.gc.cause": "Allocation Failure" if full else "G1 Evacuation Pause",
                        "jvm.gc.duration_ms": round(ms, 3),
                    },
                )
            )
        return events, {}
    if style == "jmx":
        return [], {
            "jvm.gc.collections.delta": len(pauses),
            "jvm.gc.collection_time_ms.delta": int(sum(q - p for p, q in pauses) / NS_PER_MS),
        }
    return [], {}



def g1_pauses(rng: random.Random, horizon: float, old_gen_trouble: bool) -> list[tuple[float, float]]:
    """A ranker pod's stop-the-world pauses: young evacuations of a few ms every 1.5-4 s; with an old
    generation that fills (a leak of cached responses), mixed collections of 40-180 ms every 0.4-1.5 s,
    one in eight of them failing into a full GC of 300-600 ms."""
    from reference_pipeline.simulate.trace_table import random_pauses

    pauses = random_pauses(rng, horizon, (1.5, 4.0), (3.0, 12.0))
    if old_gen_trouble:
        for a, b in random_pauses(rng, horizon, (0.4, 1.5), (40.0, 180.0)):
            if rng.random() < 0.125:
                b = a + rng.uniform(300.0, 600.0) * NS_PER_MS
            pauses.append((a, b))
    return merge_intervals(pauses)


def open_loop(
    rng: random.Random, rps: float, until: float, bursts: tuple[tuple[float, float, float], ...] = ()
) -> list[float]:
    """Poisson send times (ns) up to `until` (ns) at `rps`, times `multiple` inside each burst (start s,
    length s, multiple): a caller whose traffic does not depend on the traced one (thinning)."""
    peak = rps * max([m for _, _, m in bursts] + [1.0])
    out, t = [], 0.0
    while True:
        t += rng.expovariate(peak) * 1e9
        if t >= until:
            return out
        rate = rps
        for start, length, multiple in bursts:
            if start * 1e9 <= t < (start + length) * 1e9:
                rate = rps * multiple
        if rng.random() * peak < rate:
            out.append(t)


def hop_ns(rng: random.Random, lossy: bool) -> float:
    """One pod-to-pod network crossing. From a node with a lossy overlay (a flapping NIC bond, conntrack
    drops), a share of crossings wait for a retransmission or a re-route: delays that do not depend on
    how busy anything is."""
    t = lognormal_ms(rng, 0.15, 0.3)
    if lossy:
        u = rng.random()
        if u < 0.04:
            t += lognormal_ms(rng, 30.0, 0.5)
        elif u < 0.3:
            t += lognormal_ms(rng, 1.5, 0.5)
    return t


def finish(
    table: Any, span: int, end: float, events: list | None = None, attrs: dict[str, Any] | None = None
) -> None:
    """Set a span's end (and events, extra attributes) once its children are known."""
    from reference_pipeline.simulate.config import DEFAULT_START_NS

    row = list(table.rows[span])
    row[7] = max(int(end), int(row[6] - DEFAULT_START_NS) + 1000) + DEFAULT_START_NS
    if events:
        row[11] = events
    if attrs:
        row[8].update(attrs)
    table.rows[span] = tuple(row)
