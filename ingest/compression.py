"""Whole-file gzip / zstd, sniffed by magic bytes, and bounded so a decompression bomb stops early.

A compressed file may expand to at most `MAX_RATIO` times its compressed size plus `ALLOWANCE`
bytes (real OTLP exports compress 5-30x; bombs 1000x and more). Past that the reader raises a
`DecodeError` naming the decompressed byte offset, before the bytes reach a decoder.
"""

from __future__ import annotations

import gzip
import io
import zlib
from typing import Any, BinaryIO

import zstandard

from ingest.errors import DecodeError

GZIP_MAGIC = b"\x1f\x8b"
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
MAX_RATIO = 250
ALLOWANCE = 64 << 20
READ_BUFFER = 1 << 20


def compression_of(head: bytes) -> str | None:
    """'gzip', 'zstd' or None from a file's first bytes."""
    if head.startswith(GZIP_MAGIC):
        return "gzip"
    if head.startswith(ZSTD_MAGIC):
        return "zstd"
    return None


def expansion_limit(compressed_size: int) -> int:
    return MAX_RATIO * compressed_size + ALLOWANCE


class _Bounded(io.RawIOBase):
    """Reads a decompressing stream, raising DecodeError once it yields more than `limit` bytes."""

    def __init__(self, inner: BinaryIO, source: str, kind: str, limit: int) -> None:
        self._inner = inner
        self._source = source
        self._kind = kind
        self._limit = limit
        self.produced = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        try:
            data = self._inner.read(len(buffer))
        except (OSError, EOFError, zlib.error, zstandard.ZstdError) as error:
            raise DecodeError(
                self._source, f"byte {self.produced}", f"corrupt {self._kind} data: {error}"
            ) from None
        count = len(data)
        self.produced += count
        if self.produced > self._limit:
            raise DecodeError(
                self._source,
                f"byte {self.produced}",
                f"{self._kind} data expands past {self._limit >> 20} MiB "
                f"({MAX_RATIO}x its compressed size): refusing a likely decompression bomb",
            )
        buffer[:count] = data
        return count


class _ZstdFrames:
    """Streaming zstd (one or more frames) that, unlike `stream_reader`, notices a truncated last
    frame. Input is fed in small chunks, and a read stops at the first frame end past the bytes it
    asked for (the rest of the chunk waits), so a read's output stays bounded and its cost linear
    even when one chunk holds many frames of 16 MiB of zeros each."""

    FEED = 16 << 10

    def __init__(self, raw: BinaryIO) -> None:
        self._raw = raw
        self._decompressor = zstandard.ZstdDecompressor()
        self._frame = self._decompressor.decompressobj()
        self._started = False
        self._pending = b""  # compressed bytes read but not yet fed
        self._out = bytearray()  # decompressed bytes not yet handed out

    def read(self, size: int) -> bytes:
        while len(self._out) < size:
            if not self._pending:
                self._pending = self._raw.read(self.FEED)
                if not self._pending:
                    if self._started and not self._frame.eof:
                        raise zstandard.ZstdError("truncated zstd frame (the file ends inside it)")
                    break
            if self._frame.eof:
                self._frame = self._decompressor.decompressobj()
            self._started = True
            self._out += self._frame.decompress(self._pending)
            self._pending = self._frame.unused_data if self._frame.eof else b""
        data = bytes(self._out[:size])
        del self._out[:size]  # a bytearray drops its front without copying the rest
        return data


def open_decompressed(raw: BinaryIO, source: str, compressed_size: int) -> tuple[BinaryIO, str | None]:
    """Wrap `raw` (a buffered binary file) in a bounded decompressor if its magic says so.

    Returns the stream to decode and the compression name (None when the file is not compressed).
    """
    head = raw.peek(4)[:4] if hasattr(raw, "peek") else b""
    kind = compression_of(head)
    if kind is None:
        return raw, None
    inner: Any = gzip.GzipFile(fileobj=raw, mode="rb") if kind == "gzip" else _ZstdFrames(raw)
    bounded = _Bounded(inner, source, kind, expansion_limit(compressed_size))
    return io.BufferedReader(bounded, buffer_size=READ_BUFFER), kind  # type: ignore[return-value]


def decompress_message(data: bytes, source: str, position: str, limit: int) -> bytes:
    """One zstd-compressed message (the Collector file exporter's per-message compression)."""
    try:
        reader = zstandard.ZstdDecompressor().stream_reader(io.BytesIO(data), read_across_frames=True)
        chunks, size = [], 0
        while size <= limit:
            chunk = reader.read(READ_BUFFER)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        out = b"".join(chunks)
    except zstandard.ZstdError as error:
        raise DecodeError(source, position, f"corrupt zstd message: {error}") from None
    if len(out) > limit:
        raise DecodeError(source, position, f"zstd message expands past {limit >> 20} MiB: refusing it")
    return out
