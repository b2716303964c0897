"""The hand-off between a front-end process and the model process: token ids and features in, the
model's output and the batch's timings out, with the request's trace context along.

One Unix stream socket per front end (a socketpair made by the model process), frames of a 4-byte
length and an orjson array. bench/bench_pipeline.py `handoff` measured the options on the 2-core VM
(RESULTS.md): a socketpair through asyncio streams and a pipe pair cost about the same CPU per round
trip, well under the request path's; the socket is one bidirectional fd per front end that asyncio
reads without a thread, so it is what runs here (vLLM's API server and engine talk over ZeroMQ IPC
sockets for the same reason).

    front end -> model   [REQUEST, rid, trace_hi, trace_lo, span_id, flags, enqueued_ns, ids, features]
                         [KEEP, trace_hi, trace_lo]   (the front end kept a request by its slow/failed
                                                       rule: the model process keeps its spans too)
    model -> front end   [rid, output, enqueued_ns, started_ns, ended_ns, batch_size, queue_depth,
                          lead_hi, lead_lo, lead_span]  or  [rid, None, error text]

In "spans" tracing mode the model process writes each request's `batch.queue_wait` and
`model.forward` spans, children of the front end's request span (one trace across the processes),
each forward span linked to the batch's first request; the queue wait starts when the front end
handed the request over, so the hand-off's own time is queue time, as it is for the request.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import struct
import time
from functools import partial
from typing import Any

import orjson
from opentelemetry import trace
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

from reference_pipeline.batcher import BatchResult
from reference_pipeline.model_spans import record_model_spans

REQUEST, KEEP = 0, 1
_LEN = struct.Struct("<I")
_LOW = (1 << 64) - 1


class ModelGone(RuntimeError):
    """The model process closed the hand-off (it stopped or died)."""


def frame(message: list) -> bytes:
    body = orjson.dumps(message)
    return _LEN.pack(len(body)) + body


async def read_frames(reader: asyncio.StreamReader, chunk: int = 1 << 16):
    """Every message in the stream, in order, read in chunks of whatever has arrived (one await per
    chunk rather than two per message: the model process reads every front end's requests)."""
    buffer = bytearray()
    while data := await reader.read(chunk):
        buffer += data
        start, end = 0, len(buffer)
        while end - start >= 4:
            size = _LEN.unpack_from(buffer, start)[0]
            if end - start - 4 < size:
                break
            yield orjson.loads(memoryview(buffer)[start + 4 : start + 4 + size])
            start += 4 + size
        del buffer[:start]


class _Answers:
    """A front end's answers, written together once the event loop has settled a batch: one write
    (one send) per batch and front end instead of one per request."""

    def __init__(self, writer: asyncio.StreamWriter) -> None:
        self.writer, self.frames = writer, []

    def add(self, message: list) -> None:
        if not self.frames:
            asyncio.get_running_loop().call_soon(self.flush)
        self.frames.append(frame(message))

    def flush(self) -> None:
        frames, self.frames = self.frames, []
        if frames and not self.writer.is_closing():
            self.writer.write(b"".join(frames))


async def read_frame(reader: asyncio.StreamReader) -> list | None:
    """The next message, or None at the end of the stream."""
    try:
        size = _LEN.unpack(await reader.readexactly(4))[0]
        return orjson.loads(await reader.readexactly(size))
    except (asyncio.IncompleteReadError, ConnectionError):
        return None


class RemoteModel:
    """A front end's way to the model process. `records_model_spans`: the model process writes the
    queue and forward spans (in "spans" mode; in light mode the front end tallies them)."""

    records_model_spans = True

    def __init__(self, sock, on_gone=None) -> None:
        self._sock, self._on_gone = sock, on_gone
        self._pending: dict[int, asyncio.Future] = {}
        self._ids = itertools.count()
        self._writer: asyncio.StreamWriter | None = None
        self._task: asyncio.Task | None = None
        self.gone = False

    async def start(self) -> None:
        reader, self._writer = await asyncio.open_unix_connection(sock=self._sock)
        self._task = asyncio.create_task(self._read(reader))

    async def _read(self, reader: asyncio.StreamReader) -> None:
        while (message := await read_frame(reader)) is not None:
            future = self._pending.pop(message[0], None)
            if future is None or future.done():
                continue
            if message[1] is None:
                future.set_exception(RuntimeError(f"model process: {message[2]}"))
                continue
            _, output, enq, started, ended, size, depth, hi, lo, span_id = message
            lead = SpanContext((hi << 64) | lo, span_id, is_remote=True, trace_flags=TraceFlags(1))
            future.set_result(BatchResult(output, enq, started, ended, size, depth, lead))
        self.gone = True
        for future in self._pending.values():
            if not future.done():
                future.set_exception(ModelGone("the model process closed the hand-off"))
        self._pending.clear()
        if self._on_gone is not None:
            self._on_gone()

    async def infer(self, ids: list[int], features: list[float], root: SpanContext) -> BatchResult:
        if self.gone or self._writer is None:
            raise ModelGone("the model process is gone")
        rid = next(self._ids)
        future = asyncio.get_running_loop().create_future()
        self._pending[rid] = future
        tid = root.trace_id
        message = [REQUEST, rid, tid >> 64, tid & _LOW, root.span_id, int(root.trace_flags)]
        self._writer.write(frame([*message, time.time_ns(), ids, features]))
        return await future

    def kept_late(self, trace_id: int) -> None:
        if self._writer is not None and not self.gone:
            self._writer.write(frame([KEEP, trace_id >> 64, trace_id & _LOW]))

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
        if self._task is not None:
            self._task.cancel()


class FrontendConnection:
    """The model process's end of one front end's hand-off: each request goes to the shared batcher;
    its answer (and, in "spans" mode, its queue and forward spans) come back."""

    def __init__(self, index: int, batcher: Any, cfg: Any, sampler: Any = None) -> None:
        self.index, self.batcher, self.cfg, self.sampler = index, batcher, cfg, sampler
        self.spans = cfg.tracing_mode == "spans" and cfg.model_telemetry == "spans" and cfg.tracing
        self._pending: set[asyncio.Future] = set()

    async def serve(self, sock) -> None:
        """Until the front end closes its end (it stopped or died). Each request's answer is written
        from its batch future's done-callback: no asyncio task per request in the model process,
        whose Python per request bounds the whole service once the forward is fast."""
        reader, writer = await asyncio.open_unix_connection(sock=sock)
        answers = _Answers(writer)
        try:
            async for message in read_frames(reader):
                if message[0] == KEEP:
                    if self.sampler is not None:
                        self.sampler.keep((message[1] << 64) | message[2])
                    continue
                _, rid, hi, lo, span_id, flags, enqueued, ids, features = message
                parent = (hi, lo, span_id, flags)  # a SpanContext only where spans are written
                try:
                    future = self.batcher.submit((ids, features), tag=parent, enqueued_ns=enqueued)
                except RuntimeError as exc:  # the batcher is closed
                    answers.add([rid, None, str(exc)])
                    continue
                self._pending.add(future)
                future.add_done_callback(partial(self._answer, rid, parent, answers))
            if self._pending:  # answers still on their way to a front end that is draining
                await asyncio.wait(list(self._pending), timeout=30)
        finally:
            answers.flush()
            writer.close()

    def _answer(self, rid: int, parent: tuple, answers: _Answers, done: asyncio.Future) -> None:
        self._pending.discard(done)
        if answers.writer.is_closing():
            return
        if done.exception() is not None:
            error = done.exception()
            answers.add([rid, None, f"{type(error).__name__}: {error}"])
            return
        result: BatchResult = done.result()
        if self.spans:
            self._record_spans(parent, result)
        lead_hi, lead_lo, lead_span, _ = result.first_tag
        answers.add(
            [
                rid,
                result.output,
                result.enqueued_ns,
                result.started_ns,
                result.ended_ns,
                result.batch_size,
                result.queue_depth,
                lead_hi,
                lead_lo,
                lead_span,
            ]
        )

    def _record_spans(self, parent: tuple, result: BatchResult) -> None:
        context = _context(parent)
        lead = context if result.first_tag == parent else _context(result.first_tag)
        with trace.use_span(NonRecordingSpan(context), end_on_exit=False):
            record_model_spans(self.cfg, context, dataclasses.replace(result, first_tag=lead))


def _context(tag: tuple) -> SpanContext:
    hi, lo, span_id, flags = tag
    return SpanContext((hi << 64) | lo, span_id, is_remote=True, trace_flags=TraceFlags(flags))
