"""The physics of the blind family `llm-agent` (llm_agent.py): one asyncio event loop per worker
process, httpx's connection pool, the provider's token buckets and its streamed answers, the semantic
cache, the sandbox's warm pool of microVMs, the read replicas' lag, the sharded vector database and
CPython's collector. A request is a generator that yields the time it wants to run next; the
`Scheduler` resumes it in time order at the first instant its worker's loop is free, so every shared
resource (a pool, a bucket, a VM pool) sees its users in the order they really came.
"""

from __future__ import annotations

import bisect
import heapq
import math
import random
from collections import deque
from collections.abc import Generator
from dataclasses import dataclass, field

from reference_pipeline.simulate.trace_table import NS_PER_MS, NS_PER_S, lognormal_ms

Proc = Generator[float | None, float, None]


class Loop:
    """One worker process' event loop: the intervals during which it runs nothing else (a synchronous
    tokenizer call, a gen-2 collection). A coroutine due at t resumes when the loop is next free."""

    def __init__(self) -> None:
        self.starts: list[float] = []
        self.ends: list[float] = []
        self.gcs: list[tuple[float, float, int]] = []  # (start, end, objects) of the full collections

    def block(self, a: float, b: float) -> None:
        k = bisect.bisect_left(self.starts, a)
        self.starts.insert(k, a)
        self.ends.insert(k, b)

    def settle(self, t: float) -> float:
        while True:
            k = bisect.bisect_right(self.starts, t) - 1
            hold = max((self.ends[j] for j in range(max(k - 3, 0), k + 1) if self.ends[j] > t), default=t)
            if hold <= t:
                return t
            t = hold


class Scheduler:
    """Resumes parked requests in time order; `None` from a request parks it (a resource wakes it)."""

    def __init__(self) -> None:
        self.heap: list[tuple[float, int, Proc, Loop]] = []
        self.seq = 0

    def at(self, t: float, proc: Proc, loop: Loop) -> None:
        self.seq += 1
        heapq.heappush(self.heap, (t, self.seq, proc, loop))

    def start(self, proc: Proc, loop: Loop) -> None:
        first = next(proc)
        if first is not None:
            self.at(first, proc, loop)

    def run(self) -> None:
        while self.heap:
            t, _, proc, loop = heapq.heappop(self.heap)
            real = loop.settle(t)
            if real > t:
                self.at(real, proc, loop)
                continue
            try:
                nxt = proc.send(real)
            except StopIteration:
                continue
            if nxt is not None:
                self.at(nxt, proc, loop)


@dataclass
class Pool:
    """httpx's connection pool (max_connections): a call waits inside the client for a free one."""

    free: int
    waiters: deque = field(default_factory=deque)

    def acquire(self, proc: Proc) -> bool:
        if self.free > 0:
            self.free -= 1
            return True
        self.waiters.append(proc)
        return False

    def release(self, t: float, sched: Scheduler, loop: Loop) -> None:
        if self.waiters:
            sched.at(t, self.waiters.popleft(), loop)  # the connection goes straight to the next waiter
        else:
            self.free += 1


class RateLimit:
    """The provider's per-key limits, counted in fixed one-minute windows: tokens (prompt + max_tokens)
    and requests. A call that would pass either gets a 429 whose Retry-After is the time left in the
    window (whole seconds, 1-20); a client told 20 s while more remains is refused again."""

    def __init__(self, tpm: float, rpm: float, offset: float) -> None:
        self.cap = (tpm, rpm)
        self.used = [0.0, 0.0]
        self.window = -1
        self.offset = offset

    def admit(self, t: float, tokens: float) -> float:
        """0.0 when admitted (counted), else the Retry-After in seconds."""
        window = int((t + self.offset) // (60 * NS_PER_S))
        if window != self.window:
            self.window, self.used = window, [0.0, 0.0]
        if self.used[0] + tokens <= self.cap[0] and self.used[1] + 1 <= self.cap[1]:
            self.used[0] += tokens
            self.used[1] += 1
            return 0.0
        left = ((window + 1) * 60 * NS_PER_S - (t + self.offset)) / NS_PER_S
        return float(min(20, max(1, math.ceil(left))))


def ttft_ms(rng: random.Random, prompt_tokens: int, degraded: bool) -> float:
    """Time to first token: the provider's queue, then prefill, which grows with the prompt."""
    queue = lognormal_ms(rng, 280.0, 0.35)
    if rng.random() < 0.012:  # the odd provider hiccup
        queue *= 2.0 + 3.0 * rng.random()
    prefill = 0.1 * prompt_tokens * NS_PER_MS * rng.lognormvariate(0.0, 0.12)
    out = queue + prefill
    if degraded:  # the region serving the model is degraded: twice the time, a heavier tail
        out *= 2.0 * rng.lognormvariate(0.0, 0.4) * (1.0 + 3.0 * rng.random() if rng.random() < 0.2 else 1.0)
    return out


def decode_ns(rng: random.Random, tokens: int) -> float:
    """Streaming `tokens` output tokens (~65 tokens/s per stream)."""
    return tokens / (65.0 * rng.lognormvariate(0.0, 0.12)) * NS_PER_S


class Sandbox:
    """One node's Firecracker pool: `warm` snapshot-restored VMs, each used once; taking one starts a
    replacement boot; with none warm the request boots its own (300-900 ms) and, its rootfs' page
    cache cold, pays the imports. Boots (refills and in-line) share the node's 2 boot slots."""

    def __init__(self, warm: int = 8, slots: int = 2) -> None:
        self.warm = warm
        self.ready: list[float] = []
        self.slots = [0.0] * slots

    def _boot(self, rng: random.Random, t: float) -> tuple[float, float]:
        start = max(t, heapq.heappop(self.slots))
        end = start + (300.0 + 600.0 * rng.random()) * NS_PER_MS
        heapq.heappush(self.slots, end)
        return start, end

    def take(self, rng: random.Random, t: float) -> tuple[float, float] | None:
        """None: a warm VM; else the in-line boot (start, end)."""
        while self.ready and self.ready[0] <= t:
            heapq.heappop(self.ready)
            self.warm += 1
        if self.warm > 0:
            self.warm -= 1
            heapq.heappush(self.ready, self._boot(rng, t)[1])
            return None
        return self._boot(rng, t)


class Replica:
    """A Postgres read replica's replay lag over time: healthy (tens of ms, with the odd spike while
    it replays a long transaction), or lagging seconds behind from `lag_from`."""

    def __init__(self, rng: random.Random, horizon: float, lag_from: float | None) -> None:
        self.spikes: list[tuple[float, float]] = []
        t = rng.expovariate(1 / 120.0) * NS_PER_S
        while t < horizon:
            length = (1.5 + 3.0 * rng.random()) * NS_PER_S
            self.spikes.append((t, t + length))
            t += length + rng.expovariate(1 / 120.0) * NS_PER_S
        self.lag_from = lag_from

    def lag_s(self, rng: random.Random, t: float) -> float:
        if self.lag_from is not None and t >= self.lag_from:
            return 3.0 + 9.0 * rng.random()
        if any(a <= t < b for a, b in self.spikes):
            return 1.2 + 2.0 * rng.random()
        return 0.06 * rng.lognormvariate(0.0, 0.8)


def shard_ms(rng: random.Random, shard: int, slow: int | None) -> float:
    """One shard's top-k search; a slow shard (a compaction under way on a busy node) answers in ~1 s
    with a heavy tail. A query waits for its slowest shard."""
    base = lognormal_ms(rng, 14.0, 0.35)
    if shard == slow:
        base = lognormal_ms(rng, 1400.0, 0.6)
        if rng.random() < 0.25:
            base += min(10000.0, 1500.0 * rng.paretovariate(1.3)) * NS_PER_MS
    elif rng.random() < 0.004:
        base += lognormal_ms(rng, 120.0, 0.5)
    return base


def gc_pauses(rng: random.Random, horizon: float, objects0: float, growth: float
              ) -> list[tuple[float, float, int]]:
    """CPython's full (gen-2) collections of one worker: one whenever the survivors since the last
    reach 25 % of the long-lived objects; each walks every tracked object (~110 ns each on a small heap,
    more as a big one misses the caches and the TLB). `growth`:
    objects added per second (conversation states kept forever) on top of the churn."""
    out = []
    churn = 12_000.0  # survivors per second in a healthy worker (most are freed before gen 2)
    t = rng.uniform(0.0, 0.25 * objects0 / (churn + growth)) * NS_PER_S  # the process started earlier
    objects = objects0
    while t < horizon:
        pause = objects * 110.0 * (1.0 + objects / 2.0e7) * rng.lognormvariate(0.0, 0.1)
        out.append((t, t + pause, int(objects)))
        gap = 0.25 * objects / (churn + growth) * NS_PER_S
        t += pause + gap * rng.lognormvariate(0.0, 0.15)
        objects += growth * (gap + pause) / NS_PER_S
    return out
