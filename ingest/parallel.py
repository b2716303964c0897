"""Decode large OTLP JSON lines files on worker processes while the writer stores batches.

The reader (the loader's process) cuts the decompressed stream into blocks of whole lines and
counts their newlines; workers run the fast decoder (`otlp_fast`) on a block each and send back
Arrow batches; the reader stores them in file order. At most `IN_FLIGHT` blocks are out at once,
so memory stays bounded whatever the file's size. Workers never touch the store: one file is still
one transaction in the reader's process.

Strict mode: a worker that meets a bad record sends back its (source, position, message) and the
reader raises that DecodeError (the transaction rolls back). --skip-bad: workers send the rejected
records' errors back for the reader's `on_bad` to count.

Nothing can hang the command on a worker. Each worker has its own task queue and its own result
pipe, so no lock is shared between workers (a worker that dies holding a shared queue's lock was
how `multiprocessing.Pool` hung: issue 30). The reader waits on the result pipe and on every
worker's process sentinel at once, so a worker that dies (the OOM killer, kill -9) is seen at once:
the file is rejected with `WorkerLostError` (nothing of it written) and the rest of the load decodes
in this process. Workers put SIGTERM and SIGHUP back to their default action (the CLI's handlers
raise in the main thread) and ignore SIGINT (Ctrl-C reaches the whole group; the reader stops them),
and the kernel kills them if the reader dies (PR_SET_PDEATHSIG), so kill -9 of the command leaves
none behind. Leaving the pool stops the workers with SIGTERM, then SIGKILL after `STOP_SECONDS`.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import multiprocessing
import os
import signal
import sys
import threading
from collections import deque
from collections.abc import Callable, Iterator
from multiprocessing.connection import Connection, wait
from typing import Any, BinaryIO

from ingest import otlp_fast, otlp_proto_fast
from ingest.arrow_batch import ArrowSpans
from ingest.columns import SpanColumns
from ingest.errors import DecodeError
from tailscope.stop_signals import STOP_SIGNALS, signals_held

WORKERS = 2
IN_FLIGHT = 2 * WORKERS + 1
PARALLEL_MIN_BYTES = 16 << 20
STOP_SECONDS = 5.0  # a worker still alive this long after SIGTERM is killed
_PR_SET_PDEATHSIG = 1


class WorkerLostError(DecodeError):
    """A decode worker died while a file's blocks were out (killed, out of memory): the file is
    rejected whole, as a bad record would reject it."""


def decode_on_workers(sizes: list[int]) -> bool:
    """Whether a load of files of these sizes decodes on worker processes: on more than one core,
    when one file is big enough, and only from a single-threaded process (the CLI): the workers are
    forked, and a lock held by another thread would be inherited; a server decodes in its own thread."""
    return (
        (os.cpu_count() or 1) > 1
        and threading.active_count() == 1
        and any(size >= PARALLEL_MIN_BYTES for size in sizes)
    )


def _decode_json(block: tuple[int, bytes], source: str, on_bad: Any) -> list[Any]:
    first_line, data = block
    return list(otlp_fast.decode_lines(otlp_fast.numbered_lines(first_line, data, source), source, on_bad))


def _decode_proto(block: list[tuple[int, int, bytes]], source: str, on_bad: Any) -> list[Any]:
    return list(otlp_proto_fast.decode_messages(block, source, on_bad))


def _json_blocks(stream: BinaryIO, source: str) -> Iterator[tuple[int, bytes]]:
    return otlp_fast.read_blocks(stream, source, otlp_fast.BLOCK_BYTES)  # the size as it is now


_DECODERS = {"otlp_json": _decode_json, "otlp_proto": _decode_proto}
_READERS: dict[str, Callable[[BinaryIO, str], Iterator[Any]]] = {
    "otlp_json": _json_blocks,
    "otlp_proto": otlp_proto_fast.read_message_blocks,
}


def decode_block(
    fmt: str, block: Any, source: str, skip_bad: bool
) -> tuple[list[Any], list[tuple[str, str, str]], tuple[str, str, str] | None]:
    """Worker side: (batches, rejected records' errors, the fatal error in strict mode)."""
    rejected: list[tuple[str, str, str]] = []

    def on_bad(error: DecodeError) -> None:
        rejected.append((error.source, error.position, error.message))

    enabled = gc.isenabled()
    gc.disable()
    try:
        batches = _DECODERS[fmt](block, source, on_bad if skip_bad else None)
    except DecodeError as error:
        return [], rejected, (error.source, error.position, error.message)
    finally:
        if enabled:
            gc.enable()
    return batches, rejected, None


def _detach_from_parent(parent: int) -> None:
    """In a new worker (forked with the stop signals blocked): default SIGTERM/SIGHUP, SIGINT
    ignored, then the signals let through; killed by the kernel when its parent dies."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGHUP, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_UNBLOCK, set(STOP_SIGNALS))
    if sys.platform == "linux":
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:  # the parent died before the kernel could be told
        os._exit(1)


def _worker_main(tasks: Any, results: Connection, parent: int) -> None:
    """A worker's whole life: (task id, fmt, block, source, skip_bad) in, (task id, outcome) out,
    until None or the end of its queue. An unexpected exception goes back to be raised there."""
    _detach_from_parent(parent)
    gc.freeze()
    while True:
        task = tasks.get()
        if task is None:
            return
        task_id, *arguments = task
        try:
            outcome: Any = decode_block(*arguments)
        except Exception as error:  # sent back, and raised in the reader
            outcome = error
        results.send((task_id, outcome))


class _Worker:
    """One worker process with its own task queue and result pipe (nothing shared with the others)."""

    def __init__(self, context: Any) -> None:
        self.tasks = context.Queue()
        reader, writer = context.Pipe(duplex=False)
        self.results: Connection = reader
        self.process = context.Process(
            target=_worker_main, args=(self.tasks, writer, os.getpid()), daemon=True, name="tailscope-decode"
        )
        self.process.start()
        writer.close()  # only the worker writes: its death ends the pipe (EOF) for the reader
        self.outstanding: deque[int] = deque()  # task ids sent and not yet answered, in order

    def stop(self) -> None:
        self.tasks.cancel_join_thread()  # never wait on a queue feeder whose reader is gone
        if self.process.is_alive():
            with contextlib.suppress(OSError):
                self.process.terminate()

    def reap(self, deadline_seconds: float) -> None:
        self.process.join(deadline_seconds)
        if self.process.is_alive():
            self.process.kill()
            self.process.join(STOP_SECONDS)
        self.results.close()
        self.tasks.close()


def _death_of(process: Any) -> str:
    code = process.exitcode
    if code is not None and code < 0:
        return f"killed by {signal.Signals(-code).name}"
    return f"ended with status {code}"


class DecodePool:
    """Worker processes for the fast decoders (OTLP JSON lines, length-prefixed protobuf); use as a
    context manager."""

    def __init__(self, workers: int = WORKERS) -> None:
        self.workers = workers
        self._workers: list[_Worker] = []
        self._next_id = 0
        self.broken: str | None = None  # why the workers are no longer used (one died)

    def __enter__(self) -> DecodePool:
        context = multiprocessing.get_context("fork" if os.name == "posix" else "spawn")
        try:
            with signals_held():  # a worker must not run the CLI's handlers before it resets them
                for _ in range(self.workers):
                    self._workers.append(_Worker(context))
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        """Stop every worker (SIGTERM, SIGKILL after STOP_SECONDS); a stop signal that comes
        meanwhile is held until they are gone, then acts as usual."""
        with signals_held():
            workers, self._workers = self._workers, []
            for worker in workers:
                worker.stop()
            for worker in workers:
                worker.reap(STOP_SECONDS)

    def pids(self) -> list[int]:
        """The workers' process ids (for tests and diagnostics)."""
        return [w.process.pid for w in self._workers if w.process.pid is not None]

    def decode(
        self, fmt: str, stream: BinaryIO, source: str, on_bad: Callable[[DecodeError], None] | None
    ) -> Iterator[ArrowSpans | SpanColumns]:
        """Decode `stream` (format 'otlp_json' lines or 'otlp_proto' length-prefixed) on the workers,
        yielding batches in file order; in this process once a worker has died."""
        if self.broken is not None or not self._workers:
            for block in _READERS[fmt](stream, source):
                yield from self._collected(decode_block(fmt, block, source, on_bad is not None), on_bad)
            return
        pending: deque[tuple[_Worker, int, int]] = deque()  # (worker, task id, block number)
        for number, block in enumerate(_READERS[fmt](stream, source), 1):
            worker = min(self._workers, key=lambda w: len(w.outstanding))
            task_id = self._next_id
            self._next_id += 1
            worker.tasks.put((task_id, fmt, block, source, on_bad is not None))
            worker.outstanding.append(task_id)
            pending.append((worker, task_id, number))
            if len(pending) >= IN_FLIGHT:
                yield from self._collected(self._result(*pending.popleft(), source), on_bad)
        while pending:
            yield from self._collected(self._result(*pending.popleft(), source), on_bad)

    def _result(self, worker: _Worker, task_id: int, number: int, source: str) -> Any:
        """Wait for task `task_id`'s outcome from `worker`, or for any worker to die. Answers to
        tasks of an abandoned earlier file (a strict-mode error stopped it) are dropped on the way."""
        sentinels = {w.process.sentinel: w for w in self._workers}
        position = f"decode block {number}"
        while True:
            ready = wait([worker.results, *sentinels])
            dead = [sentinels[s] for s in ready if s in sentinels and not sentinels[s].process.is_alive()]
            if dead:
                self.broken = f"a decode worker died ({_death_of(dead[0].process)})"
                raise WorkerLostError(source, position, self.broken + "; the file was not loaded")
            if worker.results not in ready:
                continue
            try:
                answered, outcome = worker.results.recv()
            except (EOFError, OSError) as error:
                # the pipe closes as its worker dies, often before the exit shows: name the death
                worker.process.join(1.0)
                if worker.process.exitcode is not None:
                    self.broken = f"a decode worker died ({_death_of(worker.process)})"
                else:
                    self.broken = f"a decode worker's pipe closed ({error or 'end of file'})"
                raise WorkerLostError(source, position, self.broken + "; the file was not loaded") from error
            if worker.outstanding and worker.outstanding[0] == answered:
                worker.outstanding.popleft()
            if answered == task_id:
                if isinstance(outcome, BaseException):
                    raise outcome
                return outcome
            # an answer to a task given up on (an earlier file that stopped part way): drop it

    @staticmethod
    def _collected(outcome: Any, on_bad: Callable[[DecodeError], None] | None) -> list[Any]:
        batches, rejected, fatal = outcome
        if fatal is not None:
            raise DecodeError(*fatal)
        if on_bad is not None:
            for error in rejected:
                on_bad(DecodeError(*error))
        return batches
