"""The event loop of one `fraud-scorer` worker process (blind family fraud-check, fraud_check.py).

A gunicorn-managed uvicorn worker is one CPython process running one asyncio event loop. Every
request is a coroutine (`handle`, a generator here) that alternates CPU work on the loop with waits
for I/O (Redis, Postgres, the risk vendor, Kafka) and for a pooled Postgres connection. The loop
runs one ready callback at a time, first come first served: a coroutine whose I/O completed while
the loop was busy (another request's model, a GC collection, a throttled cgroup) resumes only when
the loop gets to it, and the span it ends records that later time. So a stall stretches every span in
flight on the process, and a request that arrived during one starts its SERVER span after it.

Garbage collection follows allocation: each CPU slice allocates in proportion to its work, and when
the generation thresholds are crossed the collector runs then and there, inside the running
coroutine (its current span is the one a `gc.callbacks` hook would annotate). Generation-1
collections are short; generation-2 collections take time in proportion to the long-lived heap.

The Postgres pool is SQLAlchemy's QueuePool (asyncpg driver) behind a request-scoped session: a
connection is checked out at the request's first statement and returned when the session closes,
after the response is sent. A checkout that finds no idle connection opens a new one while the pool
is below its size plus overflow (a `connect` span: TCP, TLS and SCRAM authentication; overflow
connections are closed on check-in), and otherwise waits in the pool's FIFO queue (no span).
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Generator
from dataclasses import dataclass, field
from typing import Any

from reference_pipeline.simulate.trace_table import NS_PER_MS, Stalls

Action = tuple[Any, ...]
Coroutine = Generator[Action, None, None]
US = 1_000.0  # ns per µs


@dataclass
class Request:
    """One scoring request as the worker sees it: what was drawn for it up front (sizes, cache misses,
    vendor latencies, service times) and, after the loop ran it, the times of its spans."""

    index: int
    arrive: float  # ns: the request's bytes are at the worker's socket
    items: int  # transactions in the request's history
    body_bytes: int
    misses: tuple[str, ...]  # profile keys Redis did not have: card, merchant, device
    grey: bool  # the model's score falls in the band that asks the risk vendor
    vendor_ms: tuple[float, float]  # the vendor's answer time for each attempt, ms
    draws: dict[str, float]  # service times (ns) of the I/O and CPU steps
    spans: dict[str, list[float]] = field(default_factory=dict)  # name -> [start, end]
    repeated: dict[str, list[list[float]]] = field(default_factory=dict)  # fallbacks, attempts, ...
    events: dict[str, list[tuple[float, str, dict[str, Any]]]] = field(default_factory=dict)
    served_index: int = 0  # how many requests the worker process had handled before this one
    cold_connect: bool = False
    timed_out: list[bool] = field(default_factory=list)


@dataclass
class GcModel:
    """Allocation-driven collections: CPU ns between generation-1 and generation-2 collections, and
    their pause lengths (ns) as (low, high) ranges; `growth` lengthens generation-2 pauses over the
    process's life (a heap that keeps growing)."""

    gen1_every: float
    gen1_pause: tuple[float, float]
    gen2_every: tuple[float, float]
    gen2_pause: tuple[float, float]
    growth: float = 0.0


class Worker:
    """One worker process's loop: its clock, ready queue, timers, pool and collector."""

    def __init__(
        self, stalls: Stalls, gc: GcModel, pool: tuple[int, int], pool_warm: bool, rng: Any, horizon: float
    ) -> None:
        self.t = 0.0
        self.stalls = stalls
        self.gc = gc
        self.rng = rng
        self.horizon = horizon
        self.ready: deque[tuple[Coroutine, Request]] = deque()
        self.timers: list[tuple[float, int, Coroutine, Request]] = []
        self.seq = 0
        self.pool_size, self.pool_overflow = pool
        self.pool_open = self.pool_size if pool_warm else 0
        self.pool_idle = self.pool_open
        self.pool_waiters: deque[tuple[Coroutine, Request]] = deque()
        self.allocated = 0.0
        self.next_gen1 = gc.gen1_every * rng.random()
        self.next_gen2 = rng.uniform(*gc.gen2_every) * rng.random()
        self.started = 0.0
        self.redis_warm = pool_warm  # a booted process opens its Redis and vendor connections on first use
        self.vendor_warm = pool_warm
        self.collections: list[tuple[float, float, int]] = []  # (start, end, generation)

    # --- the loop ---------------------------------------------------------------------------------

    def schedule(self, when: float, coro: Coroutine, req: Request) -> None:
        self.seq += 1
        heapq.heappush(self.timers, (when, self.seq, coro, req))

    def run(self, requests: list[Request], handler: Any) -> None:
        """Run the loop until every request (and every task they spawned) is done."""
        for req in requests:
            self.schedule(req.arrive, handler(req, self), req)
        while self.timers or self.ready:
            if not self.ready:
                self.t = max(self.t, self.timers[0][0])
            while self.timers and self.timers[0][0] <= self.t:
                _, _, coro, req = heapq.heappop(self.timers)
                self.ready.append((coro, req))
            coro, req = self.ready.popleft()
            self.t = self.stalls.settle(self.t)
            self._step(coro, req)

    def _step(self, coro: Coroutine, req: Request) -> None:
        """Resume one coroutine and run it until it waits for something."""
        while True:
            try:
                action = next(coro)
            except StopIteration:
                return
            kind = action[0]
            if kind == "cpu":
                self._cpu(action[1], req, action[2])
            elif kind == "io":
                self.schedule(self.t + action[1], coro, req)
                return
            elif kind == "spawn":
                self.schedule(self.t, action[1], req)
            elif kind == "acquire":
                if self.pool_idle:
                    self.pool_idle -= 1
                elif self.pool_open < self.pool_size + self.pool_overflow:
                    self.pool_open += 1
                    req.cold_connect = True
                else:
                    self.pool_waiters.append((coro, req))
                    return
            elif kind == "release":
                if self.pool_waiters:
                    waiter = self.pool_waiters.popleft()
                    self.schedule(self.t, *waiter)  # the waiter's future resolves; it runs next turn
                elif self.pool_open > self.pool_size:
                    self.pool_open -= 1  # an overflow connection is closed on check-in
                else:
                    self.pool_idle += 1

    def _cpu(self, work: float, req: Request, span: str) -> None:
        """`work` ns of CPU on the loop; the collector runs when the slice's allocations cross a
        threshold, inside this coroutine and its current span."""
        self.t = self.stalls.run(self.t, work)
        self.allocated += work
        while self.allocated >= self.next_gen1:
            self.next_gen1 += self.gc.gen1_every
            self._collect(req, span, 1, self.rng.uniform(*self.gc.gen1_pause))
        if self.allocated >= self.next_gen2:
            self.next_gen2 = self.allocated + self.rng.uniform(*self.gc.gen2_every)
            life = min(1.0, (self.t - self.started) / max(self.horizon, 1.0))
            pause = self.rng.uniform(*self.gc.gen2_pause) * (1.0 + self.gc.growth * life)
            self._collect(req, span, 2, pause)

    def _collect(self, req: Request, span: str, generation: int, pause: float) -> None:
        start = self.t
        self.t = self.stalls.run(self.t, pause)  # the collector's work is CPU like any other
        self.collections.append((start, self.t, generation))
        if generation == 2 and span:
            req.events.setdefault(span, []).append(
                (
                    self.t,
                    "gc",
                    {
                        "gc.generation": 2,
                        "gc.duration_ms": round(pause / NS_PER_MS, 3),
                        "gc.collected": int(pause / NS_PER_MS * self.rng.uniform(900, 1400)),
                    },
                )
            )


def mark(req: Request, name: str, worker: Worker) -> None:
    """Open span `name` at the loop's current time."""
    req.spans[name] = [worker.t, worker.t]


def close(req: Request, name: str, worker: Worker) -> None:
    req.spans[name][1] = worker.t


def repeat(req: Request, name: str, start: float, end: float) -> None:
    req.repeated.setdefault(name, []).append([start, end])


VENDOR_TIMEOUT = 300 * NS_PER_MS  # httpx.Timeout(0.3) on the risk vendor's client
VENDOR_BACKOFF = 50 * NS_PER_MS  # tenacity: stop_after_attempt(2), wait_fixed(0.05)
BODY_BYTES_PER_NS = 0.4  # ~400 MB/s of request body through the pod's network and uvicorn's reader


def handle(req: Request, w: Worker) -> Coroutine:
    """`POST /v1/score` as the worker's coroutine: validate, features (Redis, the session's Postgres
    statements), history aggregates, the model, the risk vendor for grey-zone scores, the decision
    row, the audit event (a task of its own), the response, then the session's teardown."""
    d = req.draws
    yield ("cpu", d["read"], "")  # data_received: h11 parses the head, create_task(run_asgi)
    yield ("io", 0.0)  # the new task's first step waits its turn in the ready queue
    yield ("cpu", d["middleware"], "")  # the middleware stack down to the OpenTelemetry middleware
    mark(req, "server", w)
    mark(req, "receive", w)
    if req.body_bytes > 65_536:  # the rest of a large body streams in while the handler awaits it
        yield ("io", req.body_bytes / BODY_BYTES_PER_NS)
    yield ("cpu", d["receive"], "receive")
    close(req, "receive", w)
    yield ("cpu", d["routing"], "server")  # routing, dependencies, the session
    mark(req, "validate", w)
    yield ("cpu", d["validate"], "validate")
    close(req, "validate", w)
    mark(req, "fetch", w)
    yield ("cpu", d["command"], "fetch")
    mark(req, "mget", w)
    yield ("io", d["redis"] + (0.0 if w.redis_warm else d["redis_connect"]))
    w.redis_warm = True
    close(req, "mget", w)
    yield ("cpu", d["decode"], "fetch")
    yield ("acquire",)  # the session's first statement checks a connection out of the pool
    if req.cold_connect:
        mark(req, "connect", w)
        yield ("io", d["connect"])
        close(req, "connect", w)
    yield ("cpu", d["compile"], "fetch")
    mark(req, "select", w)
    yield ("io", d["velocity"])
    close(req, "select", w)
    for i, _key in enumerate(req.misses):  # one aggregate query per missing profile, then write back
        yield ("cpu", d["compile"], "fetch")
        start = w.t
        yield ("io", d[f"fallback{i}"])
        repeat(req, "fallback", start, w.t)
        yield ("cpu", d["command"], "fetch")
        start = w.t
        yield ("io", d["set"])
        repeat(req, "set", start, w.t)
    yield ("cpu", d["assemble"], "fetch")
    close(req, "fetch", w)
    mark(req, "preprocess", w)
    yield ("cpu", d["preprocess"], "preprocess")
    close(req, "preprocess", w)
    mark(req, "predict", w)
    yield ("cpu", d["predict"], "predict")
    close(req, "predict", w)
    if req.grey:
        yield from _ask_vendor(req, w)
    yield ("cpu", d["compile"], "server")
    mark(req, "insert", w)
    yield ("io", d["insert"])
    close(req, "insert", w)
    yield ("spawn", _publish(req, w))  # asyncio.create_task: the audit event is not awaited
    yield ("cpu", d["serialize"], "server")
    mark(req, "send", w)
    yield ("cpu", d["send"], "send")
    close(req, "send", w)
    close(req, "server", w)
    yield ("cpu", d["teardown"], "")  # the yield-dependency closes the session after the response
    yield ("release",)


def _ask_vendor(req: Request, w: Worker) -> Coroutine:
    d = req.draws
    mark(req, "risk", w)
    for attempt in range(2):
        yield ("cpu", d["vendor_cpu"], "risk")
        start = w.t
        answer = req.vendor_ms[attempt] * NS_PER_MS + (0.0 if w.vendor_warm else d["tls"])
        w.vendor_warm = True
        if answer > VENDOR_TIMEOUT:  # the client's timer fires; httpx raises ReadTimeout
            yield ("io", VENDOR_TIMEOUT)
            repeat(req, "attempt", start, w.t)
            req.timed_out.append(True)
            yield ("cpu", d["vendor_cpu"], "risk")
            if attempt == 0:
                yield ("io", VENDOR_BACKOFF)
            continue
        yield ("io", answer)
        repeat(req, "attempt", start, w.t)
        req.timed_out.append(False)
        yield ("cpu", d["vendor_cpu"], "risk")
        break
    close(req, "risk", w)


def _publish(req: Request, w: Worker) -> Coroutine:
    """The audit task: send_and_wait on the Kafka producer (linger, then the leader's ack)."""
    mark(req, "publish", w)
    yield ("io", req.draws["kafka"])
    yield ("cpu", req.draws["ack"], "")
    close(req, "publish", w)
