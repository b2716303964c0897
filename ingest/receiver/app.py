"""The Starlette app: POST /v1/traces, answered as the OTLP/HTTP specification prescribes.

200  ExportTraceServiceResponse, after the spans are committed; partial_success names the
     spans rejected (invalid ids) when some were
400  undecodable body (google.rpc.Status naming where and what)
405  another method (Starlette, with Allow: POST)
413  body, or what it inflates to, over --max-request-bytes
415  Content-Type other than application/x-protobuf or application/json, or unknown encoding
429  queue full: Retry-After says when to try again (the OTel exporters honour it)
503  shutting down, the store stayed locked, or its disk is full (Retry-After): retry later
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ingest.errors import DecodeError
from ingest.receiver import protocol
from ingest.receiver.limits import BadEncoding, TooLarge, decompress
from ingest.receiver.writer import BatchWriter, QueueFull, ShuttingDown

RETRY_AFTER_SECONDS = 1
# How long shutdown waits for the writer to store what is queued (the store may be locked by a reader).
SHUTDOWN_FLUSH_SECONDS = 120
ACK_QUEUED = "queued"  # 200 once the request is in the writer's queue (flushed on shutdown)
ACK_COMMITTED = "committed"  # 200 once its transaction has committed (survives kill -9)
# Requests being read or decoded at once; more wait for a slot (their bodies are not read yet).
DECODE_SLOTS = 4


class _BodyTooLarge(Exception):
    pass


async def _read_body(request: Request, limit: int) -> bytes:
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise _BodyTooLarge(f"request body of {declared} bytes is over the limit of {limit} bytes")
    chunks = bytearray()
    async for chunk in request.stream():
        chunks += chunk
        if len(chunks) > limit:
            raise _BodyTooLarge(f"request body is over the limit of {limit} bytes")
    return bytes(chunks)


def _status(media: str, http_status: int, code: int, message: str, retry: bool = False) -> Response:
    headers = {"Retry-After": str(RETRY_AFTER_SECONDS)} if retry else None
    return Response(protocol.status_body(media, code, message), http_status, headers, media_type=media)


def create_app(writer: BatchWriter, ack: str = ACK_QUEUED, manage_writer: bool = True) -> Starlette:
    """The receiver app around `writer`, answering 200 once a request is queued (ACK_QUEUED) or
    once it is committed (ACK_COMMITTED). With manage_writer, the app's lifespan starts the writer
    and, on shutdown (after uvicorn has let in-flight requests finish), flushes and stops it."""
    if ack not in (ACK_QUEUED, ACK_COMMITTED):
        raise ValueError(f"ack must be {ACK_QUEUED!r} or {ACK_COMMITTED!r}, not {ack!r}")
    limit = writer.limits.max_request_bytes
    slots = asyncio.Semaphore(DECODE_SLOTS)

    async def traces(request: Request) -> Response:
        media = protocol.media_type(request.headers.get("content-type"))
        if media is None:
            message = "Content-Type must be application/x-protobuf or application/json"
            return _status(protocol.JSON, 415, protocol.INVALID_ARGUMENT, message)
        encoding = request.headers.get("content-encoding", "identity").strip().lower()
        if encoding not in ("", "identity", "gzip", "x-gzip", "deflate"):
            message = f"unsupported Content-Encoding {encoding[:40]!r} (gzip, deflate or none)"
            return _status(media, 415, protocol.INVALID_ARGUMENT, message)
        async with slots:
            try:
                body = await _read_body(request, limit)
                body = decompress(body, encoding, limit)
            except (_BodyTooLarge, TooLarge) as error:
                return _status(media, 413, protocol.INVALID_ARGUMENT, str(error))
            except BadEncoding as error:
                return _status(media, 400, protocol.INVALID_ARGUMENT, str(error))
            if writer.store_full is not None:  # nothing commits now: keep the exporter's copy
                writer.counters.throttled += 1
                message = "the store's disk is full; retry later"
                return _status(media, 503, protocol.UNAVAILABLE, message, retry=True)
            if writer.is_full():
                writer.counters.throttled += 1
                return _status(media, 429, protocol.RESOURCE_EXHAUSTED, "receiver queue full", retry=True)
            # The request is named by a digest of its body: a retried request decodes to the same
            # synthetic ids (for spans sent without ids), so storing it twice changes nothing.
            source = f"otlp-http request {hashlib.blake2b(body, digest_size=6).hexdigest()}"
            try:
                columns, rejected = await run_in_threadpool(protocol.decode, body, media, source)
            except DecodeError as error:
                return _status(media, 400, protocol.INVALID_ARGUMENT, str(error))
            del body
        if len(columns):
            try:
                future = writer.submit(columns)
            except QueueFull:
                return _status(media, 429, protocol.RESOURCE_EXHAUSTED, "receiver queue full", retry=True)
            except ShuttingDown as error:
                return _status(media, 503, protocol.UNAVAILABLE, str(error), retry=True)
            if ack == ACK_COMMITTED:
                try:
                    await asyncio.wrap_future(future)
                except Exception as error:
                    return _status(media, 500, protocol.INTERNAL, f"could not store the spans: {error}")
        reason = ""
        if rejected:
            more = f" (and {len(rejected) - 1} more)" if len(rejected) > 1 else ""
            reason = f"{len(rejected)} span(s) rejected; first: {rejected[0]}{more}"
        body_out = protocol.export_response(media, len(rejected), reason)
        return Response(body_out, 200, media_type=media)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        if manage_writer:
            writer.start()
        try:
            yield
        finally:
            if manage_writer:
                await run_in_threadpool(writer.close, SHUTDOWN_FLUSH_SECONDS)

    return Starlette(routes=[Route("/v1/traces", traces, methods=["POST"])], lifespan=lifespan)
