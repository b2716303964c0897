"""bench/raw_load.py, the lean closed-loop client behind the front-end and saturation figures: it books
only complete responses inside its window, tells errors from successes, and reads responses that arrive
in pieces."""

from __future__ import annotations

import asyncio

import pytest

from bench.raw_load import drive, request_bytes

BODY = b'{"score": 0.5}'


async def _server(status: bytes, split: bool) -> tuple[asyncio.AbstractServer, list[bytes]]:
    seen: list[bytes] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:  # until the client closes (IncompleteReadError, caught below)
            head = await reader.readuntil(b"\r\n\r\n")
            length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
            seen.append(head + await reader.readexactly(length))
            response = b"HTTP/1.1 " + status + b"\r\ncontent-length: %d\r\n\r\n" % len(BODY) + BODY
            if split:  # headers and body in separate writes, the body itself in two
                for piece in (response[:20], response[20:-5], response[-5:]):
                    writer.write(piece)
                    await writer.drain()
                    await asyncio.sleep(0)
            else:
                writer.write(response)
            await writer.drain()

    async def guarded(reader, writer) -> None:
        try:
            await handle(reader, writer)
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    return await asyncio.start_server(guarded, "127.0.0.1", 0), seen


def _run(status: bytes, split: bool) -> tuple[dict, list[bytes]]:
    async def main() -> tuple[dict, list[bytes]]:
        server, seen = await _server(status, split)
        port = server.sockets[0].getsockname()[1]
        async with server:
            result = await drive(port, 4, 0.2, 0.5, [b'{"a": 1}', b'{"b": 22}'])
        return result, seen

    return asyncio.run(main())


def test_complete_responses_are_booked_in_the_window() -> None:
    result, seen = _run(b"200 OK", split=True)
    assert result["completed"] > 20 and result["errors"] == 0
    assert result["throughput_rps"] == pytest.approx(result["completed"] / result["wall_s"], rel=0.01)
    assert 0 < result["p50_ms"] <= result["p99_ms"]
    assert len(seen) > result["completed"]  # the warm-up's requests were sent but not booked
    assert seen[0].startswith(b"POST /v1/predict HTTP/1.1\r\n")
    assert seen[0].endswith((b'{"a": 1}', b'{"b": 22}'))


def test_error_statuses_are_not_completions() -> None:
    result, _ = _run(b"503 Service Unavailable", split=False)
    assert result["completed"] == 0 and result["errors"] > 20


def test_request_bytes_carry_the_body_length() -> None:
    data = request_bytes(b'{"x": "\xc3\xa9"}', 8080)
    head, _, body = data.partition(b"\r\n\r\n")
    assert b"content-length: %d" % len(body) in head and b"host: 127.0.0.1:8080" in head
