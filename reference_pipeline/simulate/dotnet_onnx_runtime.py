"""The .NET runtime of the blind family `dotnet-onnx` (dotnet_onnx.py): a discrete-event scheduler, the
managed ThreadPool (min threads = cores, hill-climbing injection while work items wait), each pod's
CPU (Server GC pauses that stop every managed thread, a CFS quota enforced per 100 ms period) and
SemaphoreSlim(1) (an async lock: a waiter holds no thread; the holder's Release hands the lock to the
first waiter, whose continuation then queues for a pool thread).

A request is a generator (dotnet_onnx.py) that yields what it wants from its pod and is sent the time
at which it gets it:
- ("cpu", ns): run that much CPU on the thread it holds (stretched by GC pauses and throttled periods);
- ("async", t): await an I/O that completes at t: the thread goes back to the pool; the continuation
  is a work item queued at t, resumed when a pool thread takes it;
- ("block", t): sync-over-async (`.Result`): the thread stays blocked; the awaited I/O's own
  completion at t needs another pool thread before the blocked one can go on;
- ("lock", sem) / ("unlock", sem): SemaphoreSlim.WaitAsync / Release.
"""

from __future__ import annotations

import bisect
import heapq
import random
from collections import deque
from collections.abc import Callable, Generator
from typing import Any

from reference_pipeline.simulate.trace_table import NS_PER_MS, NS_PER_S, Stalls

PERIOD = 100 * NS_PER_MS  # the CFS period
Action = tuple[Any, ...]
Request = Generator[Action, float, None]


class Sim:
    """Events in time order (ties in the order they were scheduled)."""

    def __init__(self) -> None:
        self.heap: list[tuple[float, int, Callable[[float], None]]] = []
        self.seq = 0

    def at(self, t: float, fn: Callable[[float], None]) -> None:
        self.seq += 1
        heapq.heappush(self.heap, (t, self.seq, fn))

    def run(self) -> None:
        while self.heap:
            t, _, fn = heapq.heappop(self.heap)
            fn(t)


class Cpu:
    """One pod's CPU as its threads see it: GC pauses (every managed thread stops) and, under a CFS
    quota, periods whose quota is spent: every thread waits for the next period's start. Threads that
    run at once spend the quota together."""

    def __init__(self, gc: Stalls, quota_cores: float | None) -> None:
        self.gc = gc
        self.quota = None if quota_cores is None else quota_cores * PERIOD
        self.used: dict[int, float] = {}
        self.throttled: list[tuple[float, float]] = []  # (quota spent at, period end)

    def settle(self, t: float) -> float:
        """When a thread that wants to run at t runs."""
        while True:
            t = self.gc.settle(t)
            if self.quota is None:
                return t
            p = int(t // PERIOD)
            if self.used.get(p, 0.0) < self.quota - 1.0:
                return t
            t = (p + 1) * PERIOD

    def run(self, t: float, work: float) -> float:
        if self.quota is None:
            return self.gc.run(t, work)
        while True:
            t = self.settle(t)
            p = int(t // PERIOD)
            boundary = (p + 1) * PERIOD
            k = bisect.bisect_right(self.gc.starts, t)
            pause = self.gc.starts[k] if k < len(self.gc.starts) else float("inf")
            left = self.quota - self.used.get(p, 0.0)
            chunk = min(work, left, boundary - t, pause - t)
            self.used[p] = self.used.get(p, 0.0) + chunk
            t += chunk
            work -= chunk
            if self.used[p] >= self.quota - 1.0 and t < boundary:
                self.throttled.append((t, boundary))
            if work <= 1.0:
                return t


class Semaphore:
    """SemaphoreSlim(1, 1)."""

    def __init__(self) -> None:
        self.holder: object | None = None
        self.waiters: deque[Any] = deque()


class ThreadPool:
    """The managed ThreadPool of one process: `threads` workers (min = cores) and waiting work items:
    continuations of requests in flight, which pool threads push on their local queues and pop first,
    newest first (a work-stealing deque's owner end), then new requests, which Kestrel queues on the
    global queue (FIFO). While items wait, the starvation gate adds one thread every 0.5-1 s (hill climbing's
    injection rate), and records each adjustment (time, new count)."""

    def __init__(self, sim: Sim, cpu: Cpu, threads: int, rng: random.Random) -> None:
        self.sim, self.cpu, self.threads, self.rng = sim, cpu, threads, rng
        self.busy = 0
        self.local: deque[Callable[[float], None]] = deque()
        self.queue: deque[Callable[[float], None]] = deque()
        self.gate_pending = False
        self.adjustments: list[tuple[float, int]] = []
        self.blocked = 0  # threads blocked in Task.Result

    def _delay(self) -> float:
        """The gate's next check: hill climbing's starvation injection (0.5-1 s), or .NET 8's
        blocking compensation while threads are blocked in Task.Wait / .Result (a delay that grows
        25 ms per step to its 250 ms cap: a thread every ~0.25 s)."""
        if self.blocked:
            return self.rng.uniform(0.2, 0.3) * NS_PER_S
        return self.rng.uniform(0.5, 1.0) * NS_PER_S

    def submit(self, t: float, work: Callable[[float], None], new: bool = False) -> None:
        if self.busy < self.threads:
            self.busy += 1
            self.sim.at(self.cpu.settle(t), work)
            return
        (self.queue if new else self.local).append(work)
        if not self.gate_pending:
            self.gate_pending = True
            self.sim.at(t + self._delay(), self._gate)

    def waiting(self) -> int:
        return len(self.local) + len(self.queue)

    def _next(self) -> Callable[[float], None]:
        return self.local.pop() if self.local else self.queue.popleft()

    def release(self, t: float) -> None:
        if self.waiting():
            self.sim.at(self.cpu.settle(t), self._next())
        else:
            self.busy -= 1

    def _gate(self, t: float) -> None:
        if not self.waiting():
            self.gate_pending = False
            return
        self.threads += 1
        self.busy += 1
        self.adjustments.append((t, self.threads))
        self.sim.at(self.cpu.settle(t), self._next())
        self.sim.at(t + self._delay(), self._gate)


class Driver:
    """Runs one request's generator on its pod's pool (see the module docstring for the actions)."""

    INNER_NS = 0.04 * NS_PER_MS  # the I/O completion's own continuation (sync-over-async)

    def __init__(self, sim: Sim, pool: ThreadPool, request: Request) -> None:
        self.sim, self.pool, self.request = sim, pool, request
        next(request)  # primed: it waits for its first thread

    def start(self, t: float) -> None:
        self.pool.submit(t, self.step, new=True)

    def step(self, t: float) -> None:
        try:
            action = self.request.send(t)
        except StopIteration:
            self.pool.release(t)
            return
        kind, arg = action
        if kind == "cpu":
            self.sim.at(self.pool.cpu.run(t, arg), self.step)
        elif kind == "async":
            self.pool.release(t)
            self.sim.at(max(arg, t), lambda at: self.pool.submit(at, self.step))
        elif kind == "block":
            self.pool.blocked += 1
            self.sim.at(max(arg, t), lambda at: self.pool.submit(at, self._inner))
        elif kind == "lock":
            if arg.holder is None:
                arg.holder = self
                self.sim.at(t, self.step)
            else:
                arg.waiters.append(self)
                self.pool.release(t)
        elif kind == "unlock":
            arg.holder = None
            if arg.waiters:
                waiter = arg.waiters.popleft()
                arg.holder = waiter
                self.pool.submit(t, waiter.step)
            self.sim.at(t, self.step)
        else:
            raise ValueError(f"unknown action {kind!r}")

    def _inner(self, t: float) -> None:
        end = self.pool.cpu.run(t, self.INNER_NS)
        self.pool.blocked -= 1
        self.sim.at(end, self.pool.release)
        self.sim.at(end, self.step)


def gc_pauses(rng: random.Random, horizon: float, gen2: bool) -> tuple[list[tuple[float, float]],
                                                                      list[tuple[float, int, float, bool]]]:
    """Server GC on one pod: gen0 every ~0.4-1.2 s (1-4 ms), gen1 every ~4-8 s (6-18 ms); with `gen2`
    (a heap squeezed by the memory limit, a fragmented LOH) a blocking gen2 with LOH compaction every
    ~1.5-3.5 s, 100-800 ms. Returns the pauses and (start, generation, ms, compacting) per GC."""
    info: list[tuple[float, int, float, bool]] = []
    for gen, every, median, sigma, lo, hi in ((0, (0.4, 1.2), 2.0, 0.4, 0.6, 6.0),
                                              (1, (4.0, 8.0), 10.0, 0.35, 5.0, 25.0)):
        t = rng.uniform(0.0, every[1]) * NS_PER_S
        while t < horizon:
            ms = min(hi, max(lo, median * rng.lognormvariate(0.0, sigma)))
            info.append((t, gen, ms, False))
            t += rng.uniform(*every) * NS_PER_S
    if gen2:
        t = rng.uniform(0.3, 1.2) * NS_PER_S
        while t < horizon:
            ms = min(800.0, max(100.0, 300.0 * rng.lognormvariate(0.0, 0.5)))
            info.append((t, 2, ms, True))
            t += ms * NS_PER_MS + rng.uniform(1.5, 3.5) * NS_PER_S
    info.sort()
    pauses: list[tuple[float, float]] = []
    for start, _gen, ms, _c in info:
        end = start + ms * NS_PER_MS
        if pauses and start <= pauses[-1][1]:
            pauses[-1] = (pauses[-1][0], max(pauses[-1][1], end))
        else:
            pauses.append((start, end))
    return pauses, info
