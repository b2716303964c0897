"""The physics of the blind family `python-istio` (python_istio.py): one uvicorn worker's event loop
(a single thread that runs one callback at a time, stopped whole by a collection or by a synchronous
call), its tokenizer threads under the GIL, the embedder's replicas (a batch queue in front of one
GPU each, cold replicas that warm up), Envoy's choice of replica (least request, per sidecar,
previous-hosts on a retry, consecutive-5xx ejection), the OpenSearch kNN fan-out over three shards and
the Redis result cache keyed by query hash."""

from __future__ import annotations

import bisect
import heapq
import math
import random
from dataclasses import dataclass, field

from reference_pipeline.simulate.trace_table import (
    NS_PER_MS,
    NS_PER_S,
    WorkerPool,
    lognormal_ms,
    merge_intervals,
)

SWITCH_INTERVAL_NS = 5 * NS_PER_MS  # sys.getswitchinterval()


class Busy:
    """One thread of execution (an asyncio loop, a GPU): work runs one piece at a time, each placed in
    the first free gap at or after the time it is ready (pieces are placed as the model meets them,
    which is nearly, not exactly, time order). Pre-placed pieces (a collection, another client's
    batches) are stretches nothing else runs in."""

    def __init__(self, intervals: list[tuple[float, float]] | None = None) -> None:
        merged = merge_intervals(list(intervals or []))
        self.starts = [a for a, _ in merged]
        self.ends = [b for _, b in merged]

    def place(self, t: float, work: float) -> float:
        """Run `work` ns ready at t; returns when it starts (it ends at start + work)."""
        s, e = self.starts, self.ends
        i = bisect.bisect_right(s, t)
        if i > 0:
            t = max(t, e[i - 1])
        while i < len(s) and s[i] < t + work:
            t = max(t, e[i])
            i += 1
        end = t + work
        if i > 0 and e[i - 1] >= t:
            e[i - 1] = end
            if i < len(s) and s[i] <= end:
                e[i - 1] = e[i]
                del s[i], e[i]
        elif i < len(s) and s[i] <= end:
            s[i] = t
        else:
            s.insert(i, t)
            e.insert(i, end)
        return t

    def run(self, t: float, work: float) -> float:
        """When `work` ns ready at t are done."""
        return self.place(t, work) + work

    def extend(self, start: float, end: float) -> None:
        """Lengthen the piece that began at `start` to `end` (a batch that grew after it was placed)."""
        i = bisect.bisect_right(self.starts, start) - 1
        if i >= 0 and self.ends[i] < end:
            self.ends[i] = end


@dataclass
class Worker:
    """One uvicorn worker process: its loop, CPython's collections (scheduled by allocation volume,
    they run inside whatever callback allocates next and stop every thread of the process), its
    tokenizer thread pool and when the pool's threads run Python (they hold the GIL)."""

    loop: Busy
    pending: list[tuple[float, float, int, int]]  # (due, pause, generation, objects collected)
    tokenizer: WorkerPool
    gc: list[tuple[float, float, int, int]] = field(default_factory=list)  # (start, end, gen, collected)
    gil_busy: list[tuple[float, float]] = field(default_factory=list)
    db: WorkerPool = field(default_factory=lambda: WorkerPool(10))  # asyncpg pool, max_size 10
    _next: int = 0

    def gil_held(self, t: float) -> int:
        """How many tokenizer threads run Python at t (they hand the GIL over every 5 ms)."""
        return sum(1 for a, b in self.gil_busy[-12:] if a <= t < b)

    def step(self, rng: random.Random, t: float, cpu_ms: float) -> float:
        """One callback on the loop, ready at t, of ~cpu_ms: when it is done."""
        return self.span_step(rng, t, cpu_ms)[1]

    def span_step(self, rng: random.Random, t: float, cpu_ms: float) -> tuple[float, float]:
        """(start, end) of one callback on the loop, ready at t. A collection that is due runs first,
        inside this callback; while tokenizer threads run Python the loop first waits for the GIL
        (they drop it at the end of a switch interval)."""
        work = cpu_ms * NS_PER_MS * rng.lognormvariate(0.0, 0.25)
        if self.gil_busy and self.gil_held(t):
            work += rng.uniform(0.3, 1.0) * SWITCH_INTERVAL_NS
        due = []
        while self._next < len(self.pending) and self.pending[self._next][0] <= t:
            due.append(self.pending[self._next][1:])
            self._next += 1
        pause = sum(d[0] for d in due)
        start = at = self.loop.place(t, work + pause)
        for length, gen, collected in due:  # the callback's first allocation sets them off
            self.gc.append((at, at + length, gen, collected))
            at += length
        return start, start + work + pause

    def threads_run(self, t: float, work: float) -> float:
        """When a thread's `work` ns started at t are done: collections stop it too."""
        end = t + work
        for a, b, _, _ in self.gc[-8:]:
            if b > t and a < end:
                end += b - max(a, t)
        return end


def gc_pauses(
    rng: random.Random, horizon: float, leak: tuple[float, float] | None
) -> list[tuple[float, float, int, int]]:
    """When CPython's collections of one worker fall due and how long they stop it: (due, pause,
    generation, objects collected). A full (gen2) collection costs ~85 ns a tracked object: a healthy
    worker holds ~0.35 M objects and runs one every 6-20 s; a worker whose object count grows (`leak`:
    millions at the start and at the horizon) runs one each time its long-lived objects grew by a
    quarter (the threshold rule), ever longer. Young collections (< 1 ms) every few hundred ms."""
    out: list[tuple[float, float, int, int]] = []
    t = rng.uniform(0.0, 8.0) * NS_PER_S
    while t < horizon:
        objects = 0.35e6 * rng.lognormvariate(0.0, 0.15)
        pause = objects * 85.0 * rng.lognormvariate(0.0, 0.1)
        out.append((t, pause, 2, int(objects * 0.02)))
        t += pause + rng.uniform(6.0, 20.0) * NS_PER_S
    if leak is not None:
        start, stop = leak
        objects = start * 1e6
        while True:
            objects *= 1.25
            at = horizon * math.log(objects / (start * 1e6)) / math.log(stop / start)
            if at >= horizon:
                break
            out.append((at, objects * 85.0 * rng.lognormvariate(0.0, 0.08), 2, int(objects * 0.004)))
    t = rng.uniform(0.0, 0.4) * NS_PER_S
    while t < horizon:
        pause = rng.uniform(0.15, 0.9) * NS_PER_MS
        out.append((t, pause, rng.choice((0, 0, 0, 1)), rng.randrange(200, 4000)))
        t += pause + rng.uniform(0.2, 0.6) * NS_PER_S
    return sorted(out)


@dataclass
class Served:
    """What one embedder replica did with one attempt."""

    start: float  # the app's SERVER span: the replica's handler took it
    batch_start: float  # its batch went to the GPU
    end: float
    batch: int
    rejected: bool = False  # max_ongoing_requests reached: 503 before the handler


@dataclass
class Replica:
    """One embedder replica: `@serve.batch(max_batch_size, batch_wait_timeout_s)` in front of the
    model on the replica's 4 vCPUs (`gpu`: the compute, one batch at a time; pre-placed stretches are
    another client's batches). A cold replica's first batches pay the warm-up (lazy initialisation,
    the allocator growing its arenas, oneDNN picking kernels per new shape)."""

    gpu: Busy
    ready_at: float
    max_batch: int
    wait_ns: float
    cold: bool = False
    max_ongoing: int = 64
    batches: int = 0
    open_start: float = -1.0  # the open batch: when it goes to the GPU, when it opened, its size
    open_at: float = -1.0
    open_end: float = -1.0
    size: int = 0
    ongoing: list[float] = field(default_factory=list)

    def item_ms(self, tokens: int) -> float:
        """One input's share of a batch on the replica's CPUs (padding to the batch's longest input
        aside): ~16 ms of fixed cost plus 0.13 ms a token; batching saves ~15 %."""
        return 0.85 * (16.0 + 0.13 * tokens)

    def warmup_ms(self) -> float:
        """A cold replica's extra time for a batch: the first calls initialise lazily and pick
        kernels for each new input shape, less and less as shapes repeat."""
        return 350.0 * math.exp(-self.batches / 4.0) if self.cold else 0.0

    def serve(self, rng: random.Random, arrive: float, tokens: int) -> Served:
        while self.ongoing and self.ongoing[0] <= arrive:
            heapq.heappop(self.ongoing)
        if len(self.ongoing) >= self.max_ongoing:
            return Served(arrive, arrive, arrive + 0.3 * NS_PER_MS, 0, rejected=True)
        start = arrive + 0.15 * NS_PER_MS * rng.lognormvariate(0.0, 0.3)  # handler, await the batch
        if (
            self.size
            and self.open_at - 1 * NS_PER_MS <= start <= self.open_start
            and self.size < self.max_batch
        ):
            self.size += 1
            batch_start = self.open_start
            self.open_end += self.item_ms(tokens) * NS_PER_MS * rng.lognormvariate(0.0, 0.1)
            end = self.open_end
            self.gpu.extend(batch_start, end)
        else:
            self.size, self.open_at = 1, start
            fwd = (2.0 + self.item_ms(tokens) + self.warmup_ms()) * NS_PER_MS * rng.lognormvariate(0.0, 0.1)
            self.open_start = batch_start = self.gpu.place(start + self.wait_ns, fwd)
            self.batches += 1
            end = self.open_end = batch_start + fwd
        end += 0.2 * NS_PER_MS * rng.lognormvariate(0.0, 0.3)  # pooling, normalise, JSON
        heapq.heappush(self.ongoing, end)
        return Served(start, batch_start, end, self.size)


def external_batches(rng: random.Random, start: float, stop: float, load: float) -> list[tuple[float, float]]:
    """An untraced bulk client's batches on one replica (long documents, a few a batch: ~90 ms each),
    arriving at random at a rate that keeps the GPU `load` busy."""
    out = []
    t = start
    mean = 90.0 * NS_PER_MS
    while t < stop:
        length = mean * rng.lognormvariate(0.0, 0.25)
        out.append((t, t + length))
        t += length + rng.expovariate(1.0) * mean * (1.0 - load) / load
    return out


class Sidecar:
    """One search-api pod's Envoy: its own view of each replica (requests in flight from here),
    least-request with two random choices, previous-hosts on a retry, and outlier detection
    (`eject_after` consecutive gateway errors eject a host for 30 s x times ejected)."""

    def __init__(self, replicas: int, eject_after: int) -> None:
        self.inflight: list[list[float]] = [[] for _ in range(replicas)]
        self.fails = [0] * replicas
        self.ejected_until = [0.0] * replicas
        self.ejections = [0] * replicas
        self.eject_after = eject_after

    def pick(self, rng: random.Random, t: float, ready: list[int], avoid: set[int]) -> int:
        hosts = (
            [r for r in ready if self.ejected_until[r] <= t and r not in avoid]
            or [r for r in ready if r not in avoid]
            or ready
        )
        if len(hosts) == 1:
            return hosts[0]
        a, b = rng.sample(hosts, 2)
        na, nb = (sum(1 for e in self.inflight[h] if e > t) for h in (a, b))
        return a if na < nb or (na == nb and rng.random() < 0.5) else b

    def sent(self, host: int, end: float) -> None:
        lst = self.inflight[host]
        if len(lst) > 40:
            del lst[:20]
        lst.append(end)

    def outcome(self, host: int, t: float, failed: bool) -> None:
        self.fails[host] = self.fails[host] + 1 if failed else 0
        if self.fails[host] >= self.eject_after:
            self.ejections[host] += 1
            self.ejected_until[host] = t + 30 * NS_PER_S * self.ejections[host]
            self.fails[host] = 0


def merges(
    rng: random.Random, horizon: float, start: float, busy: float, factor: float
) -> list[tuple[float, float, float]]:
    """Segment merges on one OpenSearch node: (start, end, slowdown of its shard's searches): merge
    threads compete with search threads for CPU and the page cache. `busy`: share of time merging."""
    out = []
    t = start
    while t < horizon:
        length = rng.uniform(2.0, 6.0) * NS_PER_S
        out.append((t, t + length, factor * rng.lognormvariate(0.0, 0.2)))
        t += length + length * (1.0 - busy) / busy * rng.uniform(0.5, 1.5)
    return out


class OpenSearch:
    """Three data nodes, one shard each (no replicas): a kNN query fans out to every shard and the
    coordinating node answers when the slowest is back. Each node refreshes every second (a short
    slowdown) and merges small segments now and then."""

    def __init__(
        self, rng: random.Random, horizon: float, slow: list[tuple[float, float, float]], slow_node: int
    ) -> None:
        self.merging: list[list[tuple[float, float, float]]] = []
        for node in range(3):
            small = merges(rng, horizon, rng.uniform(0, 20) * NS_PER_S, 0.08, 1.6)
            self.merging.append(sorted(small + (slow if node == slow_node else [])))
        self.phase = [rng.uniform(0, NS_PER_S) for _ in range(3)]

    def shard_ns(self, rng: random.Random, node: int, t: float) -> float:
        ms = 4.5 * rng.lognormvariate(0.0, 0.3)
        if (t - self.phase[node]) % NS_PER_S < 60 * NS_PER_MS:  # refresh: new segment, cold caches
            ms *= 1.5
        for a, b, f in self.merging[node]:
            if a <= t < b:
                ms *= f * rng.lognormvariate(0.0, 0.45)
                break
        return ms * NS_PER_MS

    def query(self, rng: random.Random, t: float) -> tuple[float, float]:
        """(took: the server's own time, the slowest shard's node)."""
        shards = [self.shard_ns(rng, node, t) for node in range(3)]
        return 0.7 * NS_PER_MS + max(shards), float(shards.index(max(shards)))


class ResultCache:
    """Redis keys by query hash: (written at, expires at). Queries follow a Zipf law over 30,000
    distinct texts; a miss recomputes and writes the key back when done (no single-flight: concurrent
    misses of one key all recompute). The `warm` most popular keys are there at the start, expiring
    at random within a TTL, or, for the `wave` most popular (written in one go by a warm-up job), all
    at `wave_at`."""

    def __init__(
        self, rng: random.Random, ttl_s: float, warm: int, wave_at: float | None, wave: int = 2500
    ) -> None:
        self.ttl = ttl_s * NS_PER_S
        self.keys: dict[int, tuple[float, float]] = {}
        for k in range(warm):
            expires = (
                wave_at + rng.uniform(0.0, 0.8) * NS_PER_S
                if wave_at is not None and k < wave
                else rng.uniform(0.0, self.ttl)
            )
            self.keys[k] = (-1.0, expires)
        weights = [1.0 / (k + 1) ** 1.05 for k in range(30_000)]
        total = sum(weights)
        acc = 0.0
        self.cdf = []
        for w in weights:
            acc += w / total
            self.cdf.append(acc)

    def query(self, rng: random.Random) -> int:
        return min(bisect.bisect_left(self.cdf, rng.random()), len(self.cdf) - 1)

    def hit(self, key: int, t: float) -> bool:
        got = self.keys.get(key)
        return got is not None and got[0] <= t < got[1]

    def write(self, key: int, t: float, rng: random.Random) -> None:
        self.keys[key] = (t, t + self.ttl * rng.uniform(0.9, 1.1))


@dataclass
class Attempt:
    """One try of the embedder call through Envoy: the replica, the inbound sidecar's span, Envoy's
    response flags (UT: per-try timeout; DR at the replica: the caller reset the stream), the status
    Envoy saw, and what the replica did (its handler keeps going after a reset)."""

    replica: int
    start: float
    end: float
    status: int
    flags: str
    served: Served


PER_TRY_NS = 200 * NS_PER_MS  # the VirtualService's perTryTimeout


def call_embedder(
    rng: random.Random, t: float, side: Sidecar, replicas: list[Replica], tokens: int
) -> tuple[float, int, list[Attempt]]:
    """One embedder call through Envoy: (when the answer is back at the caller's sidecar, the status,
    the attempts). A try that outlives the per-try timeout is reset (UT) and retried on another host
    after Envoy's jittered back-off; a 503 (max_ongoing_requests) is retried the same way."""
    attempts: list[Attempt] = []
    avoid: set[int] = set()
    t_try = t + lognormal_ms(rng, 0.25, 0.3)
    for n in range(3):
        ready = [r for r, rep in enumerate(replicas) if rep.ready_at <= t_try]
        r = side.pick(rng, t_try, ready, avoid)
        arrive = t_try + lognormal_ms(rng, 0.3, 0.3)
        served = replicas[r].serve(rng, arrive + 0.1 * NS_PER_MS, tokens)
        back = served.end + lognormal_ms(rng, 0.3, 0.3)
        deadline = t_try + PER_TRY_NS
        if served.rejected:
            status, flags, in_end, at = 503, "-", served.end + 0.05 * NS_PER_MS, back
        elif back > deadline:
            status, flags, in_end, at = 504, "UT", deadline + 0.2 * NS_PER_MS, deadline
        else:
            status, flags, in_end, at = 200, "-", served.end + 0.05 * NS_PER_MS, back
        side.sent(r, at)
        side.outcome(r, at, status != 200)
        attempts.append(Attempt(r, arrive, in_end, status, flags, served))
        if status == 200:
            return at, 200, attempts
        avoid.add(r)
        t_try = at + rng.uniform(0.0, (2 ** (n + 1) - 1) * 25.0) * NS_PER_MS
    return at, attempts[-1].status, attempts
