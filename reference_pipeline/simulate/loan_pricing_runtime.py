"""The runtime and client mechanics of the blind family `loan-pricing` (see loan_pricing.py): the .NET
ThreadPool with its slow thread injection, the GC's pauses per pod, StackExchange.Redis's one
multiplexed connection, ADO.NET's connection pool, a Polly pipeline (attempt timeout, retry with
backoff, circuit breaker) around HttpClient, Cosmos DB's request-unit budget with 429 + retry-after,
and tiered JIT on a new pod. Each is a small model with state per pod (or per account), fed in arrival
order; times are float ns from the start of the run.
"""

from __future__ import annotations

import bisect
import heapq
import math
import random
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from reference_pipeline.simulate.trace_table import NS_PER_MS, NS_PER_S, Stalls, merge_intervals


class ThreadPool:
    """The process's worker threads. A work item that finds every thread busy waits in the global
    queue; while work waits, the starvation logic injects one thread every `inject_s` (about 1-2 per
    second, hill climbing's pace past the minimum). A sync-over-async call holds its thread for the
    whole blocked wait (`hold`); a continuation that only needs a thread briefly waits `delay(t)`."""

    def __init__(self, threads: int, rng: random.Random, inject_s: tuple[float, float] = (0.25, 0.5)) -> None:
        self.free = [0.0] * threads
        self.rng = rng
        self.inject_s = inject_s
        self.next_inject: float | None = None
        self.threads = threads
        self.times: list[float] = []
        self.waits: list[float] = []

    def _inject(self, t: float) -> None:
        """Work queued at t with every thread busy: threads come at the injection pace, each free
        from the moment it is added."""
        if self.next_inject is None:
            self.next_inject = t + self.rng.uniform(*self.inject_s) * NS_PER_S
        while self.next_inject < self.free[0]:
            heapq.heappush(self.free, self.next_inject)
            self.threads += 1
            self.next_inject += self.rng.uniform(*self.inject_s) * NS_PER_S

    def arrive(self, t: float) -> float:
        """A request's first work item (Kestrel's) queued at t: how long it waits for a thread. The
        waits are recorded in arrival order: the global queue's wait over time."""
        if self.free[0] > t:
            self._inject(t)
        wait = max(0.0, self.free[0] - t)
        self.times.append(t)
        self.waits.append(wait)
        return wait

    def delay(self, t: float) -> float:
        """How long a continuation queued at t waits: the queue's wait as the latest request that
        arrived by t found it (every work item waits in the same FIFO queue)."""
        k = bisect.bisect_right(self.times, t) - 1
        return self.waits[k] if k >= 0 else 0.0

    def acquire(self, t: float) -> float:
        """A work item queued at t that keeps its thread until `release`: when it got the thread.
        (Items come here in arrival order: one that finds a free thread ends a starvation.)"""
        if self.free[0] > t:
            self._inject(t)
        else:
            self.next_inject = None
        return max(t, heapq.heappop(self.free))

    def release(self, t: float) -> None:
        heapq.heappush(self.free, t)


@dataclass
class Pause:
    start: float
    end: float
    generation: int
    kind: str  # the GC's type as EventPipe's GCStart names it
    reason: str


def gc_pauses(rng: random.Random, horizon: float, blocking_gen2: bool, loh_heavy: bool) -> list[Pause]:
    """Server GC on one pod: gen0 every 0.6-2.5 s (2-7 ms), gen1 every 6-14 s (8-18 ms), the short
    foreground pauses of a background gen2 every 15-40 s (more often when large objects are
    allocated fast). `blocking_gen2`: a fragmented heap whose gen2 GCs run blocking and compacting,
    every 0.8-2.4 s, 180-550 ms."""
    out: list[Pause] = []

    def series(every: tuple[float, float], length: tuple[float, float], gen: int, kind: str, reason: str):
        t = rng.uniform(0.0, every[1]) * NS_PER_S
        while t < horizon:
            d = rng.uniform(*length) * NS_PER_MS
            out.append(Pause(t, t + d, gen, kind, reason))
            t += d + rng.uniform(*every) * NS_PER_S

    series((0.6, 2.5), (2.0, 7.0), 0, "NonConcurrentGC", "AllocSmall")
    series((6.0, 14.0), (8.0, 18.0), 1, "NonConcurrentGC", "AllocSmall")
    if loh_heavy:
        series((0.8, 2.2), (6.0, 22.0), 2, "BackgroundGC", "AllocLarge")
    else:
        series((15.0, 40.0), (3.0, 9.0), 2, "BackgroundGC", "AllocSmall")
    if blocking_gen2:
        series((0.8, 2.4), (180.0, 550.0), 2, "NonConcurrentGC", "LowMemory")
    out.sort(key=lambda p: p.start)
    return out


def stalls_of(pauses: list[Pause]) -> Stalls:
    return Stalls(merge_intervals([(p.start, p.end) for p in pauses]))


class Multiplexer:
    """StackExchange.Redis's one connection per process: commands are written in order and their
    replies read in order, so a reply is complete only after every earlier reply on the connection
    (a multi-megabyte value delays every command queued behind it). Returns (sent, received)."""

    def __init__(self, rng: random.Random, mb_per_s: float = 45.0) -> None:
        self.rng = rng
        self.bytes_per_ns = mb_per_s * 1e6 / NS_PER_S
        self.sent: list[float] = []
        self.received: list[float] = []

    def command(self, t: float, value_bytes: float, server_ms: float = 0.08) -> tuple[float, float]:
        sent = t + self.rng.uniform(0.02, 0.08) * NS_PER_MS
        ready = sent + (0.35 + server_ms) * NS_PER_MS * self.rng.lognormvariate(0.0, 0.25)
        if self.rng.random() < 0.004:  # a slow node/replica moment (healthy noise)
            ready += self.rng.uniform(3.0, 15.0) * NS_PER_MS
        k = bisect.bisect_left(self.sent, sent)  # the replies of the commands written before it
        before = max(self.received[max(0, k - 64):k], default=0.0)
        received = max(ready, before) + value_bytes / self.bytes_per_ns
        self.sent.insert(k, sent)
        self.received.insert(k, received)
        return sent, received


class ConnectionPool:
    """ADO.NET's pool for one connection string in one process: `Max Pool Size` connections; Open()
    waits (up to the connect timeout) for one to come back. New physical connections open on demand
    (a TLS + login handshake) until the pool holds its maximum."""

    def __init__(self, size: int, opened: int) -> None:
        self.free = [0.0] * opened
        self.size, self.opened = size, opened

    def open(self, t: float, rng: random.Random) -> tuple[float, bool]:
        """(time the caller has a connection, whether it opened a new physical one)."""
        if self.free and self.free[0] <= t:
            heapq.heappop(self.free)
            return t, False
        if self.opened < self.size:
            self.opened += 1
            return t + rng.uniform(18.0, 45.0) * NS_PER_MS, True
        return max(t, heapq.heappop(self.free)), False

    def give_up(self, free_at: float) -> None:
        """An Open() that timed out had no connection: the one it waited for is still the pool's."""
        heapq.heappush(self.free, free_at)

    def close(self, t: float) -> None:
        heapq.heappush(self.free, t)


@dataclass
class Attempt:
    start: float
    end: float
    status: int  # HTTP status, 0 when cancelled by the attempt timeout
    timed_out: bool


@dataclass
class Breaker:
    """Polly's circuit breaker: opens for `break_s` when at least `minimum` calls of the last
    `window_s` ended and `ratio` of them failed."""

    window_s: float = 10.0
    minimum: int = 20
    ratio: float = 0.5
    break_s: float = 5.0
    outcomes: deque = field(default_factory=deque)
    open_until: float = -1.0

    def allows(self, t: float) -> bool:
        return t >= self.open_until

    def record(self, t: float, failed: bool) -> None:
        self.outcomes.append((t, failed))
        while self.outcomes and self.outcomes[0][0] < t - self.window_s * NS_PER_S:
            self.outcomes.popleft()
        fails = sum(f for _, f in self.outcomes)
        if len(self.outcomes) >= self.minimum and fails >= self.ratio * len(self.outcomes):
            self.open_until = t + self.break_s * NS_PER_S
            self.outcomes.clear()


def bureau_pipeline(rng: random.Random, t: float, slow: bool, breaker: Breaker, timeout_ms: float,
                    retries: int, connect_ms: float,
                    resume: Callable[[float], float]) -> tuple[list[Attempt], float, bool]:
    """One call through the resilience pipeline: each attempt cut at `timeout_ms` (cancelled, no
    response), retried after 2^n x 100 ms plus jitter; a broken circuit fails at once without a
    request. `resume(t)`: when the process observes a completion at t (a free pool thread, no GC).
    Returns (attempts, end, succeeded)."""
    attempts: list[Attempt] = []
    for n in range(retries + 1):
        if not breaker.allows(t):
            return attempts, t + 0.05 * NS_PER_MS, False
        own = (70.0 if slow else 34.0) * NS_PER_MS * rng.lognormvariate(0.0, 0.35) + connect_ms * NS_PER_MS
        connect_ms = 0.0
        if slow and rng.random() < 0.12:
            own += 300.0 * NS_PER_MS * rng.paretovariate(1.2)  # the bureau's overloaded backend
        elif rng.random() < 0.008:
            own += 70.0 * NS_PER_MS * rng.paretovariate(1.7)
        limit = timeout_ms * NS_PER_MS
        backoff = (100.0 * 2 ** n + rng.uniform(0.0, 50.0)) * NS_PER_MS
        if own > limit:  # the attempt timeout's timer cancels the request: no response
            end = resume(t + limit + rng.uniform(0.05, 0.4) * NS_PER_MS)
            attempts.append(Attempt(t, end, 0, True))
            breaker.record(end, True)
            t = end + backoff
            continue
        status = 503 if rng.random() < 0.002 else 200
        end = resume(t + own)
        attempts.append(Attempt(t, end, status, False))
        breaker.record(end, status != 200)
        if status == 200:
            return attempts, end, True
        t = end + backoff
    return attempts, attempts[-1].end if attempts else t, False


class RequestUnits:
    """A Cosmos container's provisioned RU/s, spent by every pod's writes (and, in the throttling
    scenario, by a backfill job during a window), accounted per second. A write the current second's
    budget cannot cover gets 429 with x-ms-retry-after-ms (until the budget renews, plus jitter); the
    SDK waits that long and retries (up to 9 times)."""

    def __init__(self, ru_per_s: float, backfill: tuple[float, float, float] | None) -> None:
        self.ru_per_s = ru_per_s
        self.backfill = backfill  # (start ns, end ns, share of the RU/s it takes)
        self.spent: dict[int, float] = {}

    def _budget(self, second: int) -> float:
        t = second * NS_PER_S
        if self.backfill and self.backfill[0] <= t < self.backfill[1]:
            return self.ru_per_s * (1.0 - self.backfill[2])
        return self.ru_per_s

    def write(self, rng: random.Random, t: float, charge: float) -> tuple[float, int]:
        """(time the write is accepted, 429s it got first)."""
        throttled = 0
        while throttled < 9:
            second = int(t // NS_PER_S)
            if self.spent.get(second, 0.0) + charge <= self._budget(second):
                self.spent[second] = self.spent.get(second, 0.0) + charge
                return t, throttled
            throttled += 1
            hint = math.ceil(((second + 1) * NS_PER_S - t) / NS_PER_MS) + rng.randint(0, 40)
            t += hint * NS_PER_MS + rng.uniform(0.8, 2.0) * NS_PER_MS  # the wait, then the request again
        return t, throttled


class Tiering:
    """Tiered JIT on one process: methods start as tier-0 code (or ReadyToRun code) and are rejitted
    at tier 1 after 30 calls plus a 100 ms delay; the first request pays the JIT compilation of the
    whole path (far less with ReadyToRun)."""

    def __init__(self, ready_to_run: bool, warm: bool, rng: random.Random) -> None:
        self.calls = 30 if warm else 0
        self.r2r = ready_to_run
        self.first_jit_ms = rng.uniform(40.0, 90.0) if ready_to_run else rng.uniform(260.0, 520.0)
        self.tier1_at: float | None = 0.0 if warm else None

    def enter(self, t: float) -> tuple[float, float]:
        """(how much slower managed work runs for this request, JIT ms its first call pays)."""
        self.calls += 1
        if self.calls == 30:
            self.tier1_at = t + 100.0 * NS_PER_MS  # the background compile of the hot methods
        jit = self.first_jit_ms if self.calls == 1 else 0.0
        if self.tier1_at is not None and t >= self.tier1_at:
            return 1.0, jit
        return (1.35 if self.r2r else 2.8), jit


def in_flight(ends: list[float], t: float) -> int:
    """How many of a pod's requests (their end times, sorted) are still running at t."""
    return len(ends) - bisect.bisect_right(ends, t)
