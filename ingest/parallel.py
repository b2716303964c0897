"""Decode large OTLP JSON lines files on worker processes while the writer stores batches.

The reader (the loader's process) cuts the decompressed stream into blocks of whole lines and
counts their newlines; workers run the fast decoder (`otlp_fast`) on a block each and send back
Arrow batches; the reader stores them in file order. At most `IN_FLIGHT` blocks are out at once,
so memory stays bounded whatever the file's size. Workers never touch the store: one file is still
one transaction in the reader's process.

Strict mode: a worker that meets a bad record sends back its (source, position, message) and the
reader raises that DecodeError (the transaction rolls back). --skip-bad: workers send the rejected
records' errors back for the reader's `on_bad` to count.
"""

from __future__ import annotations

import gc
import multiprocessing
import os
import threading
from collections import deque
from collections.abc import Callable, Iterator
from typing import Any, BinaryIO

from ingest import otlp_fast, otlp_proto_fast
from ingest.arrow_batch import ArrowSpans
from ingest.columns import SpanColumns
from ingest.errors import DecodeError

WORKERS = 2
IN_FLIGHT = 2 * WORKERS + 1
PARALLEL_MIN_BYTES = 16 << 20


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


_DECODERS = {"otlp_json": _decode_json, "otlp_proto": _decode_proto}
_READERS: dict[str, Callable[[BinaryIO, str], Iterator[Any]]] = {
    "otlp_json": otlp_fast.read_blocks,
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


def _worker_init() -> None:
    gc.freeze()


class DecodePool:
    """Worker processes for the fast decoders (OTLP JSON lines, length-prefixed protobuf); use as a
    context manager."""

    def __init__(self, workers: int = WORKERS) -> None:
        self.workers = workers
        self._pool: Any = None

    def __enter__(self) -> DecodePool:
        context = multiprocessing.get_context("fork" if os.name == "posix" else "spawn")
        self._pool = context.Pool(self.workers, initializer=_worker_init)
        return self

    def __exit__(self, *exc: object) -> None:
        self._pool.terminate()
        self._pool.join()

    def decode(
        self, fmt: str, stream: BinaryIO, source: str, on_bad: Callable[[DecodeError], None] | None
    ) -> Iterator[ArrowSpans | SpanColumns]:
        """Decode `stream` (format 'otlp_json' lines or 'otlp_proto' length-prefixed) on the workers,
        yielding batches in file order."""
        pending: deque[Any] = deque()

        def collect(result: Any) -> list[Any]:
            batches, rejected, fatal = result.get()
            if fatal is not None:
                raise DecodeError(*fatal)
            for error in rejected:
                if on_bad is not None:
                    on_bad(DecodeError(*error))
            return batches

        try:
            for block in _READERS[fmt](stream, source):
                pending.append(self._pool.apply_async(decode_block, (fmt, block, source, on_bad is not None)))
                if len(pending) >= IN_FLIGHT:
                    yield from collect(pending.popleft())
            while pending:
                yield from collect(pending.popleft())
        finally:
            pending.clear()
