"""The Puma runtime of the `rails-recs` family (rails_recs.py): a discrete-event model of clustered
Puma pods, their worker processes, each process's Global VM Lock (GVL), its stop-the-world GC pauses and
its ActiveRecord connection pool.

A request is a Python generator (rails_recs_flow.py) that yields what its thread does next:

- `("cpu", ns)`: run Ruby code for ns of CPU. It needs the process's GVL: threads queue for it in
  order, a holder gives it up when it blocks, and Ruby's timer makes a holder that still has work
  yield after a 100 ms slice when others wait. GC pauses (`Stalls`) stop the holder; the send value is
  the time the work is done.
- `("io", ns)`: a blocking call (socket, C extension) that releases the GVL; the I/O ends ns later but
  the thread only runs again once it takes the GVL back: the send value is that later time, so a span
  that ends after I/O ends when its thread resumes.
- `("checkout", timeout_ns)`: take a pooled connection (FIFO waiters, ActiveRecord's
  checkout_timeout): sends (time, ok, fresh); fresh means the slot was never opened (a new worker).
- `("checkin",)`: give the connection back (a waiter gets it); sends the time.

A pod's Puma master shares one listening socket among its workers: a worker with a free thread accepts
the next connection (the least busy one first: busier workers wait before they accept), so a request
that arrives when every thread of the pod is busy waits in the socket backlog. A worker the worker
killer terminates stops accepting, finishes what it has, exits, and the master boots a replacement
(a new pid) that serves cold: its code runs slower at first (inline caches, YJIT not yet compiled) and
it opens its database connections as it first needs them.
"""

from __future__ import annotations

import heapq
import random
from collections import deque
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from typing import Any

from reference_pipeline.simulate.trace_table import NS_PER_MS, Stalls

GVL_SLICE_NS = 100 * NS_PER_MS  # Ruby's thread timeslice (TIME_QUANTUM)
RESUME_NS = 0.02 * NS_PER_MS  # Ruby code a thread runs when it wakes up (rb_thread resume, span end)
Flow = Generator[tuple, Any, None]


class Engine:
    """A heap of timed callbacks, run in time order."""

    def __init__(self) -> None:
        self.heap: list[tuple[float, int, Callable[..., None], tuple]] = []
        self.seq = 0

    def at(self, t: float, fn: Callable[..., None], *args: Any) -> None:
        heapq.heappush(self.heap, (t, self.seq, fn, args))
        self.seq += 1

    def run(self) -> None:
        while self.heap:
            t, _, fn, args = heapq.heappop(self.heap)
            fn(t, *args)


@dataclass
class Request:
    """One HTTP request: where it arrived, which worker ran it, and the spans its flow recorded
    (role, parent index or -1, start ns, end ns, attributes, status, message, resource key)."""

    index: int
    kind: str
    arrival: float
    pod: int
    params: dict[str, Any]
    worker: Worker | None = None
    accepted: float = 0.0
    done: float = 0.0
    spans: list[list[Any]] = field(default_factory=list)
    conn: bool = False

    def span(
        self,
        role: str,
        parent: int,
        start: float,
        end: float = 0.0,
        attrs: dict[str, Any] | None = None,
        status: str = "Unset",
        message: str = "",
        server: int = -1,
    ) -> int:
        self.spans.append([role, parent, start, end, attrs or {}, status, message, server, []])
        return len(self.spans) - 1


@dataclass
class Worker:
    """One Puma worker process (generation `gen` of slot `slot` on pod `pod`)."""

    pod: int
    slot: int
    gen: int
    threads: int
    pool_size: int
    stalls: Stalls
    pauses: list[tuple[float, float, bool]]  # (start, end, major) for GC reporting
    booted: float
    cold: bool
    served: int = 0
    busy: int = 0
    killing: bool = False
    holder: Any = None
    slice_used: float = 0.0  # CPU the holder has run since it took the GVL
    gvl_queue: deque = field(default_factory=deque)
    idle_conns: int = 0
    unopened: int = 0
    waiters: deque = field(default_factory=deque)
    compiled: set[str] = field(default_factory=set)  # templates ActionView has compiled in this process

    def __post_init__(self) -> None:
        if self.cold:
            self.unopened = self.pool_size
        else:
            self.idle_conns = self.pool_size

    def cpu_factor(self) -> float:
        """A fresh process runs its Ruby slower for its first requests (cold caches, YJIT warming)."""
        return 1.0 + 3.5 * 0.93**self.served if self.cold else 1.0


class Puma:
    """Pods of Puma workers driven by one engine; `spawn(pod, slot, gen, start)` builds a worker (the
    family decides its GC and coldness), `flow(req, worker)` the request's generator."""

    def __init__(
        self,
        engine: Engine,
        rng: random.Random,
        pods: int,
        workers: int,
        spawn: Callable[[int, int, int, float], Worker],
        flow: Callable[[Request, Worker], Flow],
        boot_ns: float,
    ) -> None:
        self.engine, self.rng, self.spawn, self.flow, self.boot_ns = engine, rng, spawn, flow, boot_ns
        self.workers: list[list[Worker]] = [
            [spawn(p, k, 0, 0.0) for k in range(workers)] for p in range(pods)
        ]
        self.backlog: list[deque] = [deque() for _ in range(pods)]

    # --- accepting --------------------------------------------------------------------------------

    def arrive(self, t: float, req: Request) -> None:
        free = [w for w in self.workers[req.pod] if not w.killing and w.booted <= t and w.busy < w.threads]
        if not free:
            self.backlog[req.pod].append(req)
            return
        least = min(w.busy for w in free)
        self._start(t, self.rng.choice([w for w in free if w.busy == least]), req)

    def _start(self, t: float, w: Worker, req: Request) -> None:
        w.busy += 1
        req.worker, req.accepted = w, t
        gen = self.flow(req, w)
        self._dispatch(t + self.rng.uniform(0.15, 0.4) * NS_PER_MS, gen, req, next(gen))

    def _finish(self, t: float, req: Request) -> None:
        w = req.worker
        assert w is not None
        req.done = t
        w.busy -= 1
        w.served += 1
        if w.killing:
            if w.busy == 0:
                self._exit(t, w)
            return
        if self.backlog[w.pod]:
            self._start(t, w, self.backlog[w.pod].popleft())

    # --- the worker killer ------------------------------------------------------------------------

    def kill(self, t: float, pod: int, slot: int) -> None:
        """SIGTERM to the worker in `slot`: it finishes its requests and the master boots another."""
        w = next(x for x in self.workers[pod] if x.slot == slot and not x.killing)
        w.killing = True
        if w.busy == 0:
            self._exit(t, w)

    def _exit(self, t: float, w: Worker) -> None:
        new = self.spawn(w.pod, w.slot, w.gen + 1, t + self.boot_ns)
        self.workers[w.pod] = [new if x is w else x for x in self.workers[w.pod]]
        self.engine.at(new.booted, self._booted, new)

    def _booted(self, t: float, w: Worker) -> None:
        while self.backlog[w.pod] and w.busy < w.threads:
            self._start(t, w, self.backlog[w.pod].popleft())

    # --- a thread's next step ---------------------------------------------------------------------

    def _step(self, t: float, gen: Flow, req: Request, value: Any) -> None:
        try:
            op = gen.send(value)
        except StopIteration:
            assert req.worker is not None
            self._release(t, req.worker, gen)
            self._finish(t, req)
            return
        self._dispatch(t, gen, req, op)

    def _dispatch(self, t: float, gen: Flow, req: Request, op: tuple) -> None:
        w = req.worker
        assert w is not None
        kind = op[0]
        if kind == "cpu":  # a thread that holds the GVL keeps running; another waits for it
            if w.holder is gen:
                self._run(t, w, gen, req, op[1] * w.cpu_factor(), None)
            else:
                self._want_gvl(t, w, gen, req, op[1] * w.cpu_factor(), None)
        elif kind == "io":
            self._release(t, w, gen)
            self.engine.at(t + op[1], self._want_gvl, w, gen, req, RESUME_NS, None)
        elif kind == "checkout":
            self._checkout(t, w, gen, req, op[1])
        elif kind == "checkin":
            self._checkin(t, w)
            self._step(t, gen, req, t)
        else:
            raise ValueError(f"unknown op {kind!r}")

    # --- the GVL ----------------------------------------------------------------------------------

    def _want_gvl(self, t: float, w: Worker, gen: Flow, req: Request, work: float, value: Any) -> None:
        if w.holder is None and not w.gvl_queue:
            self._grant(t, w, gen, req, work, value)
        else:
            w.gvl_queue.append((gen, req, work, value))

    def _release(self, t: float, w: Worker, gen: Flow) -> None:
        if w.holder is gen:
            w.holder = None
            if w.gvl_queue:
                self._grant(t, w, *w.gvl_queue.popleft())

    def _grant(self, t: float, w: Worker, gen: Flow, req: Request, work: float, value: Any) -> None:
        w.holder, w.slice_used = gen, 0.0
        self._run(w.stalls.settle(t), w, gen, req, work, value)

    def _run(self, t: float, w: Worker, gen: Flow, req: Request, work: float, value: Any) -> None:
        if w.slice_used >= GVL_SLICE_NS:
            if w.gvl_queue:  # the timer thread asks the holder to yield: it goes to the back
                w.gvl_queue.append((gen, req, work, value))
                w.holder = None
                self._grant(t, w, *w.gvl_queue.popleft())
                return
            w.slice_used = 0.0
        chunk = min(work, GVL_SLICE_NS - w.slice_used)
        end = w.stalls.run(t, chunk)
        self.engine.at(end, self._chunk_done, w, gen, req, work - chunk, chunk, value)

    def _chunk_done(
        self, t: float, w: Worker, gen: Flow, req: Request, left: float, chunk: float, value: Any
    ) -> None:
        w.slice_used += chunk
        if left > 0:
            self._run(t, w, gen, req, left, value)
            return
        self._step(t, gen, req, (t, *value) if value is not None else t)

    # --- the connection pool ----------------------------------------------------------------------

    def _checkout(self, t: float, w: Worker, gen: Flow, req: Request, timeout: float) -> None:
        if w.idle_conns or w.unopened:
            fresh = not w.idle_conns
            if fresh:
                w.unopened -= 1
            else:
                w.idle_conns -= 1
            self._step(t, gen, req, (t, True, fresh))
            return
        self._release(t, w, gen)  # waits on the pool's condition variable
        entry = [gen, req, True]  # alive while it waits
        w.waiters.append(entry)
        self.engine.at(t + timeout, self._checkout_timeout, w, entry)

    def _checkout_timeout(self, t: float, w: Worker, entry: list) -> None:
        if entry[2]:
            entry[2] = False
            w.waiters.remove(entry)
            self._want_gvl(t, w, entry[0], entry[1], RESUME_NS, (False, False))

    def _checkin(self, t: float, w: Worker) -> None:
        while w.waiters:
            entry = w.waiters.popleft()
            if entry[2]:
                entry[2] = False
                self._want_gvl(t, w, entry[0], entry[1], RESUME_NS, (True, False))
                return
        w.idle_conns += 1
