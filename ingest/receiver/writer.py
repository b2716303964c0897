"""A bounded queue of accepted requests and the one thread that writes them to the store.

Requests wait in the queue until the writer takes all of them into one flush to the store's SpanSink
(tailscope.store.interface; on DuckDB one short transaction that also refreshes the run's derived
data, the file released in between so the dashboard's readers get in). The writer waits
at least `flush_interval_ms` between transactions (with `--ack committed`, since the last one
began), and, while a reader is waiting for the file, at least as long as its last transaction took,
so with readers about it holds the file at most about half of the time however large the batches
grow; with none it writes at the flush interval.

Each request carries a Future that the writer resolves after the commit (or fails with the error);
with `--ack committed` the HTTP handler waits for it before answering 200. If the store stays locked
past the lock wait (a very long query), the requests go back to the head of the queue and are tried
again: nothing accepted is dropped for a busy store, and the full queue turns new requests away.
A full disk (StoreFullError: the transaction rolled back) keeps them queued the same way: `store_full`
says why until a later try (every FULL_RETRY_SECONDS) commits, the app answers new requests 503
with Retry-After meanwhile, and the log says when it stopped and when it stored again.
"""

from __future__ import annotations

import sys
import threading
import time
from collections import deque
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import TextIO

from ingest.columns import SpanColumns
from ingest.receiver.limits import Limits
from tailscope.store.errors import StoreBusyError, StoreFullError
from tailscope.store.interface import SpanSink

READER_POLL_SECONDS = 0.05  # how often a pacing writer looks for a reader waiting for the file
FULL_RETRY_SECONDS = 2.0  # how often a writer whose store's disk is full tries again


class QueueFull(RuntimeError):
    """No room for the request: the caller answers 429 with Retry-After."""


class ShuttingDown(RuntimeError):
    """The writer no longer takes requests: the caller answers 503."""


@dataclass
class Counters:
    """Totals since start; read by the status line and the tests (integers only, no lock needed)."""

    requests: int = 0
    spans_stored: int = 0
    transactions: int = 0
    failed_transactions: int = 0
    spans_lost: int = 0  # in requests whose transaction failed for another reason than a lock
    throttled: int = 0
    last_tx_seconds: float = 0.0
    max_tx_seconds: float = 0.0
    max_queued_requests: int = 0
    started: float = field(default_factory=time.monotonic)


@dataclass
class _Item:
    columns: SpanColumns
    future: Future[int]


class BatchWriter:
    """Owns the queue and the writer thread. `submit` from any thread; `close` flushes and joins."""

    def __init__(
        self,
        sink: SpanSink,
        limits: Limits,
        log: TextIO = sys.stderr,
        ack_waits: bool = False,
    ) -> None:
        self.sink = sink
        # With `--ack committed` every client waits for its commit, so each has one request in
        # flight: the writer takes the next batch as soon as every client that was waiting at the
        # last commit has sent again (then the flush interval counts from the last transaction's
        # start), and at the interval after its end otherwise. Counting from the end alone idled
        # the writer for the whole interval every cycle; starting at once split the clients into
        # alternating halves (one transaction per half).
        self.ack_waits = ack_waits
        self._clients = 0
        self.limits = limits
        self.log = log
        self.counters = Counters()
        self._items: deque[_Item] = deque()
        self._queued_spans = 0
        self._cond = threading.Condition()
        self._closing = False
        self.store_full: str | None = None  # why writes fail for a full disk, until one commits again
        self._last_end = self._last_start = time.monotonic()
        self._thread = threading.Thread(target=self._run, name="tailscope-writer", daemon=True)

    # -- producer side ---------------------------------------------------------------------------

    def start(self) -> None:
        self._thread.start()

    @property
    def queued_requests(self) -> int:
        return len(self._items)

    def is_full(self) -> bool:
        return len(self._items) >= self.limits.queue_requests or self._queued_spans >= self.limits.queue_spans

    def submit(self, columns: SpanColumns) -> Future[int]:
        """Queue one request's spans; the Future resolves to their count once committed."""
        future: Future[int] = Future()
        with self._cond:
            if self._closing:
                raise ShuttingDown("the receiver is shutting down")
            # A request larger than the whole span budget is still taken into an empty queue.
            if self._items and (
                len(self._items) >= self.limits.queue_requests
                or self._queued_spans + len(columns) > self.limits.queue_spans
            ):
                self.counters.throttled += 1
                raise QueueFull(f"{len(self._items)} requests ({self._queued_spans} spans) waiting")
            self._items.append(_Item(columns, future))
            self._queued_spans += len(columns)
            self.counters.requests += 1
            self.counters.max_queued_requests = max(self.counters.max_queued_requests, len(self._items))
            self._cond.notify()
        return future

    def close(self, timeout: float | None = None) -> bool:
        """Stop taking requests, write everything queued, stop the thread, then have the sink derive
        what is pending. True if it finished."""
        with self._cond:
            self._closing = True
            self._cond.notify()
        if self._thread.is_alive():
            self._thread.join(timeout)
        clean = not self._thread.is_alive()
        try:
            self.sink.close()
        except Exception as error:
            print(f"collect: could not derive the run's requests: {error}", file=self.log, flush=True)
            return False
        return clean

    # -- writer thread ---------------------------------------------------------------------------

    def _take(self) -> list[_Item]:
        """Wait for work and the pacing interval; return everything queued (empty when closing)."""
        interval = self.limits.flush_interval_ms / 1000.0
        with self._cond:
            while not self._items and not self._closing:
                self._cond.wait()
            # Pace transactions: at least the flush interval since the end of the last one, and
            # while a reader is waiting for the file, at least as long as the last transaction took
            # (the reader's turn). A full queue or shutdown flushes at once.
            while not self._closing and not self.is_full():
                remaining = self._not_before(interval) - time.monotonic()
                if remaining <= 0:
                    break
                self._cond.wait(min(remaining, READER_POLL_SECONDS))
            items = list(self._items)
            self._items.clear()
            self._queued_spans = 0
            return items

    def _not_before(self, interval: float) -> float:
        """The pacing decision (monotonic seconds; called with the lock held): the flush interval
        after the last transaction's end, or after its start once every client waiting at the last
        commit is back (`--ack committed`), and while a reader is waiting, no sooner than the last
        transaction's length after its end."""
        not_before = self._last_end + interval
        if self.ack_waits and len(self._items) >= self._clients:
            not_before = self._last_start + interval  # every waiting client is back
        if self._reader_waiting():
            not_before = max(not_before, self._last_end + self.counters.last_tx_seconds)
        return not_before

    def _reader_waiting(self) -> bool:
        return self.sink.reader_waiting()

    def _run(self) -> None:
        while True:
            items = self._take()
            if not items:
                return  # closing and drained
            self._last_start = time.monotonic()
            self._write(items, count_clients=True)
            self._last_end = time.monotonic()
            if self.store_full is not None:  # the disk is full: try again a while later
                with self._cond:
                    self._cond.wait(FULL_RETRY_SECONDS)

    def _write(self, items: list[_Item], count_clients: bool = False) -> None:
        started = time.monotonic()
        try:
            self.sink.write([item.columns for item in items])
        except Exception as error:
            self.counters.failed_transactions += 1
            full = _is_full(error)
            if _is_busy(error) or full:
                # The store stayed locked (a very long query) or its disk is full: keep the
                # requests, try again later.
                with self._cond:
                    self._items.extendleft(reversed(items))
                    self._queued_spans += sum(len(item.columns) for item in items)
                if full and self.store_full is None:
                    print(
                        f"collect: {error}; keeping {self._queued_spans:,} spans queued, answering 503 "
                        f"until a write commits (tried every {FULL_RETRY_SECONDS:g} s)",
                        file=self.log,
                        flush=True,
                    )
                elif not full:
                    print(f"collect: {error}; will retry", file=self.log, flush=True)
                self.store_full = str(error) if full else self.store_full
                return
            if len(items) > 1:
                # Isolate the request that breaks the transaction: retry each on its own.
                for item in items:
                    self._write([item])
                return
            self.counters.spans_lost += len(items[0].columns)
            print(
                f"collect: could not store a request of {len(items[0].columns)} spans: {error}",
                file=self.log,
                flush=True,
            )
            items[0].future.set_exception(error)
            return
        elapsed = time.monotonic() - started
        if self.store_full is not None:
            self.store_full = None
            spans = sum(len(item.columns) for item in items)
            print(
                f"collect: space again: stored the {spans:,} spans kept while the disk was full",
                file=self.log,
                flush=True,
            )
        if count_clients:
            # the clients waiting at the commit, one request each in flight: counted before any is
            # answered (one answered and back before the count was counted twice, and the writer then
            # waited for a client that was not there, the interval after the end)
            with self._cond:
                self._clients = len(items) + len(self._items)
        counters = self.counters
        counters.transactions += 1
        counters.last_tx_seconds = elapsed
        counters.max_tx_seconds = max(counters.max_tx_seconds, elapsed)
        for item in items:
            counters.spans_stored += len(item.columns)
            item.future.set_result(len(item.columns))

    def unstored_spans(self) -> int:
        """Spans accepted but not stored: still queued (after close: given up on) or lost."""
        return self._queued_spans + self.counters.spans_lost


def _is_full(error: BaseException) -> bool:
    return isinstance(error, StoreFullError)


def _is_busy(error: BaseException) -> bool:
    return isinstance(error, StoreBusyError)
