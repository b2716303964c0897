"""Single-threaded event-loop workers built from their mechanism (one asyncio loop per process), for the
burst tests of tests/test_diagnosis_bursts.py.

A caller (a SERVER root and its CLIENT call) sends each request to one of the service's processes.
A process runs one callback at a time, first come first served: reading a request and creating its
task, the task's first step, each CPU step of the handler and the step after each awaited I/O all wait
their turn in the ready queue. So when arrivals outrun the loop, the SERVER span opens late (the
caller's CLIENT span started long before it) and every await inside the handler resumes late.

The handler: parse (CPU), `load_features` (a Redis GET, then the first SQL statement checks a
connection out of the process's pool, `pool` connections, waiting in FIFO order without a span when
none is free; the SELECT), predict (CPU), the INSERT, the response; the request-scoped session gives
the connection back after the response.
"""

from __future__ import annotations

import heapq
from collections import deque

import numpy as np

from tailscope.analysis.diagnosis.frame import TraceFrame
from tests.mechanism_frames import Pauses, TraceBuilder, lognormal

CPU_MS = {"read": 0.1, "parse": 0.3, "predict": 3.0, "reply": 0.15}


def _arrivals(b: TraceBuilder, n: int, rps: float, bursts: float) -> np.ndarray:
    """Poisson arrivals in ms; with `bursts` > 0, two stretches of 7 % of the run at that many times
    the rate."""
    seconds = n / rps
    rate = np.full(int(seconds * 20) + 1, rps)
    if bursts > 0:
        for at in (0.3, 0.68):
            a = int(at * len(rate))
            rate[a : a + int(0.07 * len(rate))] = bursts * rps
    out, t = [], 0.0
    while len(out) < n:
        t += b.rng.exponential(1000.0 / rate[min(int(t / 50.0), len(rate) - 1)])
        out.append(t)
    return np.array(out)


class Loop:
    """One process: its clock, ready queue, timers and connection pool; `stops`: (start, end) ms in
    which the process runs nothing (a stop-the-world pause)."""

    def __init__(self, pool: int, stops: list[tuple[float, float]] | None = None) -> None:
        self.stops = Pauses({"p": stops or []})
        self.t = 0.0
        self.ready: deque = deque()
        self.timers: list = []
        self.seq = 0
        self.idle = pool
        self.waiters: deque = deque()
        self.cold_from: float | None = None  # a restarted process: its first predictions are slow
        self.cold_served = 0

    def at(self, when: float, coro) -> None:
        self.seq += 1
        heapq.heappush(self.timers, (when, self.seq, coro))

    def run(self) -> None:
        while self.timers or self.ready:
            if not self.ready:
                self.t = max(self.t, self.timers[0][0])
            self.t = self.stops.run("p", self.t, 0.0)  # nothing runs until a stop is over
            while self.timers and self.timers[0][0] <= self.t:
                self.ready.append(heapq.heappop(self.timers)[2])
            self._step(self.ready.popleft())

    def _step(self, coro) -> None:
        for kind, value in coro:
            if kind == "cpu":
                self.t = self.stops.run("p", self.t, value)
            elif kind == "io":
                self.at(self.t + value, coro)
                return
            elif kind == "acquire":
                if self.idle:
                    self.idle -= 1
                else:
                    self.waiters.append(coro)
                    return
            elif kind == "release":
                if self.waiters:
                    self.at(self.t, self.waiters.popleft())
                else:
                    self.idle += 1


def _handle(b: TraceBuilder, loop: Loop, spans: dict, rng: np.random.Generator, items: int):
    """The request's coroutine; records (start, end) of its spans in `spans` (ms). Parsing takes
    0.02 ms per item of the request's body."""
    def cpu(name: str) -> tuple[str, float]:
        return "cpu", lognormal(rng, CPU_MS[name], 0.25)

    yield cpu("read")
    yield "io", 0.0  # the new task's first step waits its turn
    spans["server"] = [loop.t, 0.0]
    spans["parse"] = [loop.t, 0.0]
    yield "cpu", lognormal(rng, CPU_MS["parse"], 0.25) + (0.02 * items * float(np.exp(rng.normal(0.0, 0.08)))
                                                         if items else 0.0)
    cold = 0.0
    if loop.cold_from is not None and loop.t >= loop.cold_from:
        cold = 150.0 * 0.5 ** loop.cold_served  # lazy initialisation: 150 ms, halving
        loop.cold_served += 1
    spans["parse"][1] = loop.t
    spans["load_features"] = [loop.t, 0.0]
    spans["GET"] = [loop.t, 0.0]
    yield "io", lognormal(rng, 0.5, 0.3)
    spans["GET"][1] = loop.t
    yield "acquire", 0.0
    spans["SELECT"] = [loop.t, 0.0]
    yield "io", lognormal(rng, 2.0, 0.3)
    spans["SELECT"][1] = spans["load_features"][1] = loop.t
    spans["predict"] = [loop.t, 0.0]
    yield "cpu", lognormal(rng, CPU_MS["predict"], 0.25) + cold
    spans["predict"][1] = loop.t
    spans["INSERT"] = [loop.t, 0.0]
    yield "io", lognormal(rng, 2.0, 0.3)
    spans["INSERT"][1] = loop.t
    yield cpu("reply")
    spans["server"][1] = loop.t
    yield "cpu", 0.1  # the session closes after the response
    yield "release", 0.0


def _stops(rng: np.random.Generator, until: float) -> list[tuple[float, float]]:
    """A leaking process's long collections: 180-350 ms every 0.3-0.8 s."""
    out, t = [], float(rng.uniform(100.0, 500.0))
    while t < until:
        length = float(rng.uniform(180.0, 350.0))
        out.append((t, t + length))
        t += length + float(rng.uniform(300.0, 800.0))
    return out


def event_loop_service(seed: int, bursts: float = 0.0, pool: int = 5, rps: float = 400.0,
                       n: int = 4000, processes: int = 3, per_instance: int = 1,
                       paused: bool = False, restarted: bool = False,
                       large_inputs: bool = False) -> TraceFrame:
    """A caller in front of `processes` event-loop processes at `rps`; `bursts`: see _arrivals;
    `per_instance` processes share one instance id (a pod's workers); `paused`: the first process
    stops now and then for a few hundred ms (no GC events reported); `restarted`: every process is
    replaced once, at a time of its own in the middle of the run, by one whose first predictions are
    slow (150 ms, halving: lazy initialisation); `large_inputs`: a quarter of the requests carry
    hundreds to thousands of items (`app.items` on the parse span), the rest a few dozen."""
    b = TraceBuilder(seed)
    until = 1.2 * n / rps * 1000.0
    loops = [Loop(pool, _stops(b.rng, until) if paused and p == 0 else None) for p in range(processes)]
    if restarted:
        for loop in loops:
            loop.cold_from = float(b.rng.uniform(0.4, 0.6)) * until / 1.2
    requests = []
    sizes = np.random.default_rng(seed + 7919)  # inputs and callers
    for t in _arrivals(b, n, rps, bursts):
        p = int(b.rng.integers(processes))
        spans: dict = {}
        items = 0  # drawn from a stream of their own: the other draws stay as they are without them
        if large_inputs:
            big = sizes.random() < 0.25
            items = int(min(15_000, (900 if big else 14) * np.exp(sizes.normal(0.0, 1.0 if big else 0.7))))
        loops[p].at(t + 0.3, _handle(b, loops[p], spans, b.rng, items))
        requests.append((t, p, spans, items))
    for loop in loops:
        loop.run()
    for t, p, spans, items in requests:
        b.new_trace()
        end = spans["server"][1] + lognormal(b.rng, 0.2, 0.3)
        caller = f"checkout/{int(sizes.integers(3))}"
        root = b.span(None, "POST /checkout", "Server", caller, t - 0.2, end - t + 0.4)
        call = b.span(root, "POST /score", "Client", caller, t, end - t)
        inst = f"scorer/{p // per_instance}"
        server = b.span(call, "POST /score", "Server", inst, spans["server"][0],
                        spans["server"][1] - spans["server"][0])
        for name, kind in (("parse", "Internal"), ("load_features", "Internal"), ("predict", "Internal"),
                           ("INSERT", "Client")):
            a, z = spans[name]
            extra = {"app__items": items} if name == "parse" else {}
            parent = b.span(server, name, kind, inst, a, z - a, **extra)
            if name == "load_features":
                for inner in ("GET", "SELECT"):
                    a, z = spans[inner]
                    b.span(parent, inner, "Client", inst, a, z - a)
    return b.frame()
