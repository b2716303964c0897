"""The physics of the blind family `node-triton` (node_triton.py): a Node.js process' one JavaScript
thread and its libuv threadpool (both as `Lanes`: work placed in the first idle gap from when it is
asked for), V8's garbage-collection pauses, the HTTPS agent's sockets to the reputation API, and the
Triton pods (CPU models on instance lanes, GPU models behind a dynamic batcher, one instance per
GPU; two models placed on one GPU time-slice it, which the caller gives as a factor on each run).
Times are ns from the run's start.
"""

from __future__ import annotations

import bisect
import math
import random
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from reference_pipeline.simulate.trace_table import NS_PER_MS, NS_PER_S, lognormal_ms


class Lanes:
    """`n` lanes (the event loop: 1; libuv's threadpool: 4; a pool's connections: 10) that each run
    one job at a time without preemption: a job asked for at t starts in the first idle gap of any
    lane long enough for it. Jobs are asked for roughly, not exactly, in time order (each request's
    model runs its steps), so a gap is the fair place for one: a job never moves one already placed.
    `busy`: intervals every lane holds from the start (a stop-the-world pause of a 1-lane loop)."""

    def __init__(self, n: int, busy: list[tuple[float, float]] | None = None, squeeze: bool = False) -> None:
        self.squeeze = squeeze
        self.starts: list[list[float]] = [[a for a, _ in busy or ()] for _ in range(n)]
        self.ends: list[list[float]] = [[b for _, b in busy or ()] for _ in range(n)]

    def _gap(self, lane: int, t: float, dur: float) -> tuple[float, int]:
        starts, ends = self.starts[lane], self.ends[lane]
        k = bisect.bisect_right(ends, t)
        s = t
        while k < len(starts) and starts[k] < s + dur:
            s = max(s, ends[k])
            k += 1
        return s, k

    def run(self, t: float, dur: float) -> tuple[float, float]:
        """(start, end) of a job of `dur` ns asked for at t. With `squeeze` (the one JavaScript thread),
        a long job (over 2 ms: a big JSON.parse) starts at the first idle instant instead of waiting
        for a gap that fits it: once it runs, nothing else does, and the few short jobs already placed
        inside its span are merged into it (asked for later in this model's order, they ran earlier)."""
        if self.squeeze and dur > 2.0 * NS_PER_MS:
            return self._squeeze(t, dur)
        best = None
        for lane in range(len(self.starts)):
            s, k = self._gap(lane, t, dur)
            if best is None or s < best[0]:
                best = (s, k, lane)
            if s == t:
                break
        assert best is not None
        s, k, lane = best
        self.starts[lane].insert(k, s)
        self.ends[lane].insert(k, s + dur)
        return s, s + dur

    def _squeeze(self, t: float, dur: float) -> tuple[float, float]:
        best = None
        for lane in range(len(self.starts)):
            ends = self.ends[lane]
            k = bisect.bisect_right(ends, t)
            s = ends[k] if k < len(ends) and self.starts[lane][k] <= t else t  # after the job running at t
            if best is None or s < best[0]:
                best = (s, lane)
        assert best is not None
        s, lane = best
        starts, ends = self.starts[lane], self.ends[lane]
        a = bisect.bisect_left(ends, s)
        b = bisect.bisect_left(starts, s + dur)
        end = max([s + dur, *ends[a:b]])
        starts[a:b], ends[a:b] = [s], [end]
        return s, s + dur


def gc_pauses(rng: random.Random, horizon: float, heap_limit_from: float | None
              ) -> list[tuple[float, float, str]]:
    """V8's pauses on one process: scavenges of the young generation (1-5 ms, every ~0.6 s at this
    allocation rate), the finalising pause of an incremental mark-compact (every ~25 s, 10-40 ms),
    and, near --max-old-space-size from `heap_limit_from`, full mark-compacts back to back
    (120-380 ms, ~0.3-0.7 s apart: each frees little, the live set fills the old space again)."""
    out = []
    t = rng.uniform(0.0, 0.6) * NS_PER_S
    while t < horizon:
        length = lognormal_ms(rng, 2.2, 0.4)
        out.append((t, t + length, "minor"))
        t += length + rng.expovariate(1.0 / 0.6) * NS_PER_S
    t = rng.uniform(2.0, 25.0) * NS_PER_S
    while t < horizon:
        length = lognormal_ms(rng, 18.0, 0.4)
        out.append((t, t + length, "major"))
        t += length + rng.uniform(18.0, 32.0) * NS_PER_S
    if heap_limit_from is not None:
        t = heap_limit_from
        while t < horizon:
            length = min(420.0, 210.0 * rng.lognormvariate(0.0, 0.3)) * NS_PER_MS
            out.append((t, t + length, "major"))
            t += length + rng.uniform(0.3, 0.7) * NS_PER_S
    out.sort()
    merged: list[tuple[float, float, str]] = []
    for a, b, kind in out:  # a scavenge due inside a mark-compact runs right after it
        if merged and a < merged[-1][1]:
            a, b = merged[-1][1], merged[-1][1] + (b - a)
        merged.append((a, b, kind))
    return merged


@dataclass
class Socket:
    free_at: float
    uses: int
    last: float


@dataclass
class Agent:
    """Node's https.Agent (keepAlive, maxSockets, scheduling 'lifo') to the reputation API: a call
    takes the most recently freed idle socket; the API's load balancer closes a socket idle for 4 s or
    after 100 requests (nginx keepalive_requests), and a timed-out request destroys its socket; with
    none idle and fewer than maxSockets open a new one is connected (dns.lookup, TCP, TLS), else the
    call waits in the agent's queue for the first to free."""

    max_sockets: int
    sockets: list[Socket] = field(default_factory=list)

    def take(self, t: float) -> tuple[float, Socket | None]:
        """(when the call has a socket, the reused socket or None for a new connection)."""
        alive = [s for s in self.sockets if s.uses < 100 and (s.free_at > t or t - s.last < 4 * NS_PER_S)]
        self.sockets = alive
        idle = [s for s in alive if s.free_at <= t]
        if idle:
            return t, max(idle, key=lambda s: s.free_at)
        if len(alive) < self.max_sockets:
            return t, None
        first = min(alive, key=lambda s: s.free_at)
        return first.free_at, first

    def give(self, sock: Socket | None, start: float, end: float, keep: bool) -> None:
        if sock is None:
            sock = Socket(end, 0, end)
            self.sockets.append(sock)
        sock.free_at, sock.last, sock.uses = end, end, sock.uses + 1
        if not keep:
            self.sockets.remove(sock)


# --- Triton ------------------------------------------------------------------------------------------

@dataclass
class Exec:
    """One request's pass through one composing model: queued at `queued`, its batch (or CPU
    instance) started at `start` and ended at `end`; `size`: that batch's size."""

    queued: float
    start: float
    end: float
    size: int
    version: int


@dataclass
class BatchConfig:
    max_batch: int
    preferred: int
    delay_ns: float
    base_ms: float  # a batch of one on an idle GPU
    per_item_ms: float


def batch_model(arrivals: list[tuple[float, int]], cfg: BatchConfig, gpu: Callable[[float], Lanes],
                slow: Callable[[float, int], tuple[float, float]], rng: random.Random) -> dict[int, Exec]:
    """Triton's dynamic batcher in front of one GPU instance, for arrivals (time, key) in time order:
    a batch is dispatched when the instance is free and the queue holds the preferred size or its
    oldest request has waited max_queue_delay; it takes up to max_batch. Its kernels run on `gpu`
    (shared with any other model placed there: they serialize). `slow(t, size)`: (a factor on the
    execution, ns added to it): a cold engine's first runs, contention; `gpu(t)`: the GPU at t."""
    arrivals = sorted(arrivals)
    n = len(arrivals)
    out: dict[int, Exec] = {}
    queue: deque[tuple[float, int]] = deque()
    free = 0.0
    i = 0
    while i < n or queue:
        if not queue:
            queue.append(arrivals[i])
            i += 1
        need = cfg.preferred - len(queue)
        full_at = queue[0][0] if need <= 0 else (arrivals[i + need - 1][0] if i + need - 1 < n else math.inf)
        dispatch = max(free, queue[0][0], min(queue[0][0] + cfg.delay_ns, full_at))
        while i < n and arrivals[i][0] <= dispatch:
            queue.append(arrivals[i])
            i += 1
        batch = [queue.popleft() for _ in range(min(len(queue), cfg.max_batch))]
        size = len(batch)
        work = (cfg.base_ms + cfg.per_item_ms * size) * NS_PER_MS * rng.lognormvariate(0.0, 0.08)
        factor, added = slow(dispatch, size)
        work = work * factor + added
        _, end = gpu(dispatch).run(dispatch, work)
        free = end
        for t, key in batch:
            out[key] = Exec(t, dispatch, end, size, 0)
    return out


def cpu_model(arrivals: list[tuple[float, int, float]], instances: int, rng: random.Random
              ) -> dict[int, Exec]:
    """A CPU model (Python backend) with `instances` instances and no batcher: (time, key, work ns)."""
    lanes = Lanes(instances)
    out = {}
    for t, key, work in sorted(arrivals):
        start, end = lanes.run(t, work * rng.lognormvariate(0.0, 0.1))
        out[key] = Exec(t, start, end, 1, 0)
    return out


def cold_factor(switch: float | None, t: float, seen: set[int], size: int, rng: random.Random
                ) -> tuple[float, float]:
    """A model version loaded from the repository at `switch` without model_warmup: its first run creates
    the execution context and loads its kernels (CUDA lazy module loading, cuBLAS workspaces: +250-450
    ms), the first run of each further shape range loads that profile's kernels (+25-70 ms), and the
    first seconds run up to 1.5x slower while the caching allocator grows."""
    if switch is None or t < switch:
        return 1.0, 0.0
    age = (t - switch) / NS_PER_S
    extra = 1.0 + 0.5 * math.exp(-age / 3.0)
    if size.bit_length() not in seen:  # TensorRT's optimization profiles: one per power-of-two range
        first = not seen
        seen.add(size.bit_length())
        return extra, rng.uniform(250.0, 450.0) * NS_PER_MS if first else rng.uniform(25.0, 70.0) * NS_PER_MS
    return extra, 0.0
