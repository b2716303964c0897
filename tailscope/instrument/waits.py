"""Waits that timing alone hides: on a lock, and in a batcher's queue.

`traced_lock(lock, "name")` wraps a `threading` lock (Lock, RLock, Semaphore, Condition) or an
`asyncio` one and records how long each acquisition waited as a `lock.wait` span (attribute
`lock.name`), a child of the current span. The span is written once the lock is released, so tracing
never lengthens the time the lock is held. Every acquisition gets its span, waited or not: the
diagnosis finds contention from how the wait grows with the number of requests inside the same
section at once, which needs the uncontended waits too.

`record_queue_wait(enqueued_ns, started_ns, ...)` writes the time a request spent in a batcher's or a
worker pool's queue as a `queue` stage span, from timestamps the batcher already takes.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from opentelemetry import trace

from tailscope.instrument.stages import record_span

LOCK_WAIT = "lock.wait"
QUEUE_WAIT = "queue.wait"


class TracedLock:
    """A threading lock whose acquisitions are traced; use it as `with lock:` like the lock itself.
    `stage` labels the wait (default: none, so it takes its parent span's stage)."""

    def __init__(self, lock: Any, name: str, stage: str | None = None) -> None:
        self._lock, self.name, self._stage = lock, name, stage
        self._waits: list[tuple[int, int]] = []  # touched only by the holder (a stack for RLock)

    def __enter__(self) -> TracedLock:
        started = time.time_ns()
        self._lock.acquire()
        self._waits.append((started, time.time_ns()))
        return self

    def __exit__(self, *exc: Any) -> None:
        started, acquired = self._waits.pop()
        self._lock.release()
        record_span(self._stage, LOCK_WAIT, started, acquired, {"lock.name": self.name})

    def locked(self) -> bool:
        return self._lock.locked()


class AsyncTracedLock(TracedLock):
    """An asyncio lock (Lock, Semaphore, BoundedSemaphore) whose acquisitions are traced: `async with`."""

    async def __aenter__(self) -> AsyncTracedLock:
        started = time.time_ns()
        await self._lock.acquire()
        self._waits.append((started, time.time_ns()))
        return self

    async def __aexit__(self, *exc: Any) -> None:
        self.__exit__(*exc)


ASYNC_LOCKS = (asyncio.Lock, asyncio.Semaphore, asyncio.Condition)


def traced_lock(lock: Any, name: str, stage: str | None = None) -> TracedLock | AsyncTracedLock:
    """`lock` with its waits traced: an AsyncTracedLock for asyncio's, a TracedLock otherwise."""
    if isinstance(lock, ASYNC_LOCKS):
        return AsyncTracedLock(lock, name, stage)
    return TracedLock(lock, name, stage)


def record_queue_wait(
    enqueued_ns: int,
    started_ns: int,
    *,
    span_name: str = QUEUE_WAIT,
    batch_size: int | None = None,
    queue_depth: int | None = None,
    links: list[trace.Link] | None = None,
) -> None:
    """The time between entering a queue and leaving it (wall clock, `time.time_ns()`), as a `queue`
    stage span under the current span, with the batch's size and the depth the request found."""
    attrs: dict[str, Any] = {}
    if batch_size is not None:
        attrs["batch.size"] = batch_size
    if queue_depth is not None:
        attrs["batch.queue_depth"] = queue_depth
    record_span("queue", span_name, enqueued_ns, started_ns, attrs, links)
