"""Dynamic batching: requests wait in one queue until a batch is full or its oldest member has waited
`max_wait_ms`; `workers` threads each take a batch and run the model on it.

The event loop submits (`submit` → asyncio.Future) and never blocks; the worker threads run the
forward pass (PyTorch releases the GIL inside its kernels) and hand results back with
`loop.call_soon_threadsafe`. Each result carries the timings the request's spans need: when it was
queued, when its batch left the queue (= forward start), when the forward ended, the batch size and
the queue depth it found, and the first request of its batch (for the span link).
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass
class BatchResult:
    output: Any
    enqueued_ns: int
    started_ns: int
    ended_ns: int
    batch_size: int
    queue_depth: int
    first_tag: Any
    marks: dict[str, int] = field(default_factory=dict)  # phase times the model reported (ns)


@dataclass
class _Item:
    payload: Any
    tag: Any
    future: asyncio.Future
    loop: asyncio.AbstractEventLoop
    enqueued_ns: int
    queue_depth: int
    deadline: float = field(default=0.0)


class DynamicBatcher:
    """`run_batch(payloads, marks) -> outputs` (same length) is called on a worker thread; it may put
    phase times (ns) into `marks`, which every result of the batch carries."""

    def __init__(
        self,
        run_batch: Callable[[list, dict[str, int]], list],
        max_batch: int = 8,
        max_wait_ms: float = 5.0,
        workers: int = 1,
    ) -> None:
        if max_batch < 1 or max_wait_ms < 0 or workers < 1:
            raise ValueError("max_batch and workers must be >= 1 and max_wait_ms >= 0")
        self.run_batch, self.max_batch, self.max_wait_s = run_batch, max_batch, max_wait_ms / 1000
        self._queue: deque[_Item] = deque()
        self._cond = threading.Condition()
        self._closed = False
        self._threads = [
            threading.Thread(target=self._work, name=f"batcher-{i}", daemon=True) for i in range(workers)
        ]
        for thread in self._threads:
            thread.start()

    def depth(self) -> int:
        return len(self._queue)

    def submit(self, payload: Any, tag: Any = None, enqueued_ns: int | None = None) -> asyncio.Future:
        """`enqueued_ns`: when the request entered the queue, if before now (handed over by another
        process: its queue time starts there)."""
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        with self._cond:
            if self._closed:
                raise RuntimeError("batcher is closed")
            item = _Item(payload, tag, future, loop, enqueued_ns or time.time_ns(), len(self._queue))
            item.deadline = time.monotonic() + self.max_wait_s
            self._queue.append(item)
            # wake a worker only when one has something to do: the first request (a worker starts
            # its wait for the batch's deadline) or a full batch. A notify per request woke the
            # waiting worker for nothing, and each wake-up made the event loop's thread and the
            # worker's trade the GIL
            if len(self._queue) == 1 or len(self._queue) % self.max_batch == 0:
                self._cond.notify()
        return future

    def _take(self) -> list[_Item] | None:
        with self._cond:
            while True:
                if self._closed and not self._queue:
                    return None
                if self._queue:
                    remaining = self._queue[0].deadline - time.monotonic()
                    if len(self._queue) >= self.max_batch or remaining <= 0 or self._closed:
                        batch = [self._queue.popleft() for _ in range(min(self.max_batch, len(self._queue)))]
                        if self._queue:  # another worker may start on what is left
                            self._cond.notify()
                        return batch
                    self._cond.wait(remaining)
                else:
                    self._cond.wait()

    def _work(self) -> None:
        while (batch := self._take()) is not None:
            started = time.time_ns()
            marks: dict[str, int] = {}
            try:
                outputs = self.run_batch([item.payload for item in batch], marks)
                error = None
            except Exception as exc:  # the requests fail, the worker lives on
                outputs, error = [None] * len(batch), exc
            ended = time.time_ns()
            settled: dict[asyncio.AbstractEventLoop, list] = {}
            for item, output in zip(batch, outputs, strict=True):
                result = BatchResult(
                    output,
                    item.enqueued_ns,
                    started,
                    ended,
                    len(batch),
                    item.queue_depth,
                    batch[0].tag,
                    marks,
                )
                settled.setdefault(item.loop, []).append((item.future, result))
            # one hand-back per event loop and batch, not per request: each call_soon_threadsafe
            # wakes the loop through its self-pipe and makes this thread and the loop's trade the GIL
            for loop, results in settled.items():
                loop.call_soon_threadsafe(_settle_all, results, error)

    def close(self, timeout: float = 5.0) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        for thread in self._threads:
            thread.join(timeout)


def _settle_all(results: list[tuple[asyncio.Future, BatchResult]], error: Exception | None) -> None:
    for future, result in results:
        if future.done():
            continue
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(result)
