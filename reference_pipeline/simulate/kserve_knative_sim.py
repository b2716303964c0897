"""The physics of the blind family `kserve-knative` (kserve_knative.py): a small discrete-event engine
(processes are generators that yield a delay in ns, or a waitable), and the machinery of the
deployment: an asyncio event loop per Python process (one coroutine runs at a time; a runtime stall
holds it), a ProcessPool, the Knative activator's throttler (a request waits until a ready pod has a
free `containerConcurrency` slot), the KPA autoscaler (stable and panic windows, pods that pull, load
and warm up before they are ready), and a cgroup CFS quota spent by OpenMP threads.
Times are ns from the run's start.
"""

from __future__ import annotations

import heapq
import math
import random
from collections import deque
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from typing import Any

from reference_pipeline.simulate.trace_table import NS_PER_MS, NS_PER_S, Stalls, lognormal_ms

Proc = Generator[Any, Any, Any]


class Sim:
    """Events in time order; a process resumes with the time (or the value) it waited for."""

    def __init__(self) -> None:
        self.now = 0.0
        self._queue: list[tuple[float, int, Callable[..., None], tuple[Any, ...]]] = []
        self._seq = 0

    def at(self, t: float, fn: Callable[..., None], *args: Any) -> None:
        self._seq += 1
        heapq.heappush(self._queue, (max(t, self.now), self._seq, fn, args))

    def start(self, gen: Proc, t: float) -> None:
        self.at(t, self._step, gen, None)

    def _step(self, gen: Proc, value: Any) -> None:
        try:
            cmd = gen.send(value)
        except StopIteration:
            return
        if isinstance(cmd, (int, float)):
            self.at(self.now + max(float(cmd), 0.0), self._step, gen, self.now + max(float(cmd), 0.0))
        else:
            cmd.arm(self, lambda v: self._step(gen, v))

    def run(self) -> None:
        while self._queue:
            t, _, fn, args = heapq.heappop(self._queue)
            self.now = t
            fn(*args)


class Event:
    """Fires once with a value; `wait(timeout)` resumes with the value, or None at the timeout."""

    def __init__(self) -> None:
        self.fired = False
        self.value: Any = None
        self._waiters: list[Callable[[Any], None]] = []

    def fire(self, sim: Sim, value: Any) -> None:
        if self.fired:
            return
        self.fired, self.value = True, value
        for resume in self._waiters:
            sim.at(sim.now, resume, value)
        self._waiters = []

    def wait(self, timeout: float | None = None) -> _Wait:
        return _Wait(self, timeout)


@dataclass
class _Wait:
    event: Event
    timeout: float | None

    def arm(self, sim: Sim, resume: Callable[[Any], None]) -> None:
        if self.event.fired:
            sim.at(sim.now, resume, self.event.value)
            return
        done = [False]

        def once(value: Any) -> None:
            if not done[0]:
                done[0] = True
                resume(value)

        self.event._waiters.append(once)
        if self.timeout is not None:
            sim.at(sim.now + self.timeout, once, None)


class Slots:
    """A counting semaphore taken first come, first served: `yield slots.take()` resumes when held."""

    def __init__(self, n: int) -> None:
        self.n, self.busy = n, 0
        self.waiting: deque[Callable[[Any], None]] = deque()

    def take(self) -> _Take:
        return _Take(self)

    def give(self, sim: Sim) -> None:
        if self.waiting and self.busy <= self.n:
            sim.at(sim.now, self.waiting.popleft(), sim.now)
        else:
            self.busy -= 1


@dataclass
class _Take:
    slots: Slots

    def arm(self, sim: Sim, resume: Callable[[Any], None]) -> None:
        if self.slots.busy < self.slots.n:
            self.slots.busy += 1
            sim.at(sim.now, resume, sim.now)
        else:
            self.slots.waiting.append(resume)


class Loop:
    """One Python process' asyncio event loop: a coroutine's CPU segment runs alone, after the
    segments ready before it; `stalls` (full collections) stop the whole process."""

    def __init__(self, stalls: Stalls) -> None:
        self.slots, self.stalls = Slots(1), stalls

    def cpu(self, sim: Sim, work: float) -> Proc:
        """`yield from loop.cpu(sim, work)`: returns (start, end) of the segment."""
        yield self.slots.take()
        start = self.stalls.settle(sim.now)
        end = self.stalls.run(sim.now, work)
        yield end - sim.now
        self.slots.give(sim)
        return start, end


@dataclass
class Quota:
    """A pod's CFS quota: `quota_ms` of CPU per 100 ms period, spent at `threads` CPU-ms per ms by
    the OpenMP threads of a predict; when a period's quota is spent the cgroup runs nothing until
    the next period."""

    quota_ms: float
    threads: float
    used: dict[int, float] = field(default_factory=dict)

    def run(self, t: float, cpu_ns: float) -> float:
        period = 100.0 * NS_PER_MS
        while cpu_ns > 1.0:
            k = int(t // period)
            left = self.quota_ms * NS_PER_MS - self.used.get(k, 0.0)
            if left <= 1.0:
                t = (k + 1) * period
                continue
            burn = min(cpu_ns, left, (((k + 1) * period) - t) * self.threads)
            self.used[k] = self.used.get(k, 0.0) + burn
            cpu_ns -= burn
            t += burn / self.threads
        return t


@dataclass
class Pod:
    """One predictor pod of a revision: its worker processes, `cc` slots held by the activator, the
    time it became ready, how many requests it has served (the first are cold), a CFS quota or not."""

    name: str
    revision: str
    loops: list[Loop]
    cc: int
    ready: float
    quota: Quota | None = None
    inflight: int = 0
    served: int = 0


class Throttler:
    """The activator's throttler for one revision: a request waits (FIFO) until a ready pod has a free
    slot of its `containerConcurrency`; it goes to the least loaded such pod."""

    def __init__(self, rng: random.Random) -> None:
        self.pods: list[Pod] = []
        self.rng = rng
        self.waiting: deque[Callable[[Any], None]] = deque()

    def _free(self) -> Pod | None:
        free = [p for p in self.pods if p.inflight < p.cc]
        if not free:
            return None
        low = min(p.inflight for p in free)
        return self.rng.choice([p for p in free if p.inflight == low])

    def take(self) -> _Pick:
        return _Pick(self)

    def give(self, sim: Sim, pod: Pod) -> None:
        pod.inflight -= 1
        self._grant(sim)

    def add(self, sim: Sim, pod: Pod) -> None:
        self.pods.append(pod)
        self._grant(sim)

    def _grant(self, sim: Sim) -> None:
        while self.waiting:
            pod = self._free()
            if pod is None:
                return
            pod.inflight += 1
            sim.at(sim.now, self.waiting.popleft(), pod)

    def load(self) -> int:
        return sum(p.inflight for p in self.pods) + len(self.waiting)


@dataclass
class _Pick:
    th: Throttler

    def arm(self, sim: Sim, resume: Callable[[Any], None]) -> None:
        pod = self.th._free() if not self.th.waiting else None
        if pod is None:
            self.th.waiting.append(resume)
            return
        pod.inflight += 1
        sim.at(sim.now, resume, pod)


@dataclass
class Kpa:
    """Knative's pod autoscaler for the predictor revision: every 2 s it averages the revision's
    concurrency (in flight plus waiting in the activator) over the stable window (60 s) and the panic
    window (6 s); it panics when the panic window wants twice the ready pods or more, and then only
    scales up; a new pod is scheduled, pulls its image (cached on some nodes), downloads the model
    from object storage, loads it and passes its readiness probe before the activator sends to it."""

    target: float
    min_scale: int
    max_scale: int
    samples: list[tuple[float, float]] = field(default_factory=list)
    starting: int = 0
    panics: list[float] = field(default_factory=list)

    def desired(self, now: float, ready: int) -> int:
        def avg(window_s: float) -> float:
            xs = [c for t, c in self.samples if t > now - window_s * NS_PER_S]
            return sum(xs) / len(xs) if xs else 0.0

        stable = math.ceil(avg(60.0) / self.target)
        panic = math.ceil(avg(6.0) / self.target)
        if panic >= 2 * max(ready, 1) and not self.panics:
            self.panics.append(now)
        want = max(stable, panic) if self.panics else stable
        return min(self.max_scale, max(self.min_scale, want))


def pod_start_ns(rng: random.Random, cached_image: bool) -> float:
    """Schedule + image pull + storage-initializer download of the model + load + readiness."""
    pull = lognormal_ms(rng, 700.0, 0.3) if cached_image else lognormal_ms(rng, 7_500.0, 0.25)
    download = lognormal_ms(rng, 3_200.0, 0.2)  # ~380 MB from S3
    load = lognormal_ms(rng, 1_900.0, 0.2)
    return lognormal_ms(rng, 400.0, 0.3) + pull + download + load + lognormal_ms(rng, 300.0, 0.3)


def gen2_collections(rng: random.Random, horizon: float, every_s: float, median_ms: float,
                     sigma: float) -> list[tuple[float, float]]:
    """CPython full (generation 2) collections: at roughly regular allocation-driven gaps."""
    out = []
    t = rng.uniform(0.0, every_s) * NS_PER_S
    while t < horizon:
        length = lognormal_ms(rng, median_ms, sigma)
        out.append((t, t + length))
        t += length + every_s * NS_PER_S * rng.uniform(0.7, 1.3)
    return out
