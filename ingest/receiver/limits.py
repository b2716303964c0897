"""Size limits of the receiver and decompression that never inflates past them."""

from __future__ import annotations

import zlib
from dataclasses import dataclass

MiB = 1024 * 1024


@dataclass(frozen=True)
class Limits:
    """What one receiver accepts and holds.

    max_request_bytes: largest request body, compressed as sent and again after decompression.
    queue_requests / queue_spans: accepted requests waiting for the writer; beyond either, 429.
    flush_interval_ms: how long the writer gathers requests into one transaction (at least).
    """

    max_request_bytes: int = 16 * MiB
    queue_requests: int = 64
    queue_spans: int = 200_000
    flush_interval_ms: int = 200


class TooLarge(ValueError):
    """The body (or what it inflates to) is over the limit."""


class BadEncoding(ValueError):
    """The body is not valid for its Content-Encoding."""


def decompress(body: bytes, encoding: str, limit: int) -> bytes:
    """Undo `Content-Encoding` (identity, gzip, deflate), inflating at most `limit` bytes.

    A decompression bomb costs at most `limit` bytes of memory: inflation stops there and TooLarge
    is raised. Concatenated gzip members are read one after another, as gzip itself does.
    """
    encoding = encoding.strip().lower()
    if encoding in ("", "identity"):
        return body
    if encoding not in ("gzip", "deflate", "x-gzip"):
        raise ValueError(f"unsupported Content-Encoding {encoding!r}")
    # 16+MAX_WBITS: gzip header; 32+MAX_WBITS: zlib or gzip, detected (deflate senders vary).
    wbits = 16 + zlib.MAX_WBITS if encoding in ("gzip", "x-gzip") else 32 + zlib.MAX_WBITS
    out = bytearray()
    data = body
    try:
        while data:
            inflater = zlib.decompressobj(wbits)
            out += inflater.decompress(data, limit + 1 - len(out))
            if len(out) > limit or inflater.unconsumed_tail:
                raise TooLarge(f"body inflates to more than {limit} bytes")
            if not inflater.eof:
                raise BadEncoding(f"truncated {encoding} body")
            data = inflater.unused_data
            if encoding == "deflate":
                break
    except zlib.error as error:
        raise BadEncoding(f"invalid {encoding} body: {error}") from error
    return bytes(out)
