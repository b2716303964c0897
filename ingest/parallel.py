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
from collections import deque
from collections.abc import Callable, Iterator
from typing import Any, BinaryIO

from ingest import otlp_fast
from ingest.columns import SpanColumns
from ingest.errors import DecodeError

WORKERS = 2
IN_FLIGHT = 2 * WORKERS + 1
PARALLEL_MIN_BYTES = 16 << 20


def decode_block(
    first_line: int, block: bytes, source: str, skip_bad: bool
) -> tuple[list[Any], list[tuple[str, str, str]], tuple[str, str, str] | None]:
    """Worker side: (batches, rejected records' errors, the fatal error in strict mode)."""
    rejected: list[tuple[str, str, str]] = []

    def on_bad(error: DecodeError) -> None:
        rejected.append((error.source, error.position, error.message))

    enabled = gc.isenabled()
    gc.disable()
    try:
        batches = list(
            otlp_fast.decode_lines(
                otlp_fast.numbered_lines(first_line, block, source), source, on_bad if skip_bad else None
            )
        )
    except DecodeError as error:
        return [], rejected, (error.source, error.position, error.message)
    finally:
        if enabled:
            gc.enable()
    return batches, rejected, None


def _worker_init() -> None:
    gc.freeze()


class DecodePool:
    """Worker processes for the fast OTLP JSON lines decoder; use as a context manager."""

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
        self, stream: BinaryIO, source: str, on_bad: Callable[[DecodeError], None] | None
    ) -> Iterator[otlp_fast.ArrowSpans | SpanColumns]:
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
            for first_line, block in otlp_fast.read_blocks(stream, source):
                pending.append(
                    self._pool.apply_async(decode_block, (first_line, block, source, on_bad is not None))
                )
                if len(pending) >= IN_FLIGHT:
                    yield from collect(pending.popleft())
            while pending:
                yield from collect(pending.popleft())
        finally:
            pending.clear()
