"""Helpers shared by the Jaeger and Zipkin JSON decoders: reading one JSON document with a size cap,
hex id normalisation, µs → ns, and rendering attribute values as the Collector's AsString does
(through ingest.anyvalue, so every format renders a double the same way).

Both formats are one JSON document (not JSON lines), so the decoders read the whole (already
decompressed) stream, parse it with orjson, and walk the result. orjson refuses NaN/Infinity, invalid
UTF-8, numbers that overflow a double and nesting deeper than 1024 levels, so hostile documents fail in
the parser with a line and column instead of exhausting the stack.
"""

from __future__ import annotations

import contextlib
import gc
import math
import re
from collections.abc import Iterator
from typing import Any, BinaryIO

import orjson

from ingest import anyvalue as av
from ingest.errors import DecodeError

BATCH_SPANS = 50_000
# The service name of spans whose export names none (as the OpenTelemetry SDKs and ingest.otlp_json do).
UNKNOWN_SERVICE = "unknown_service"

# A JSON document larger than this is refused rather than parsed into memory (its Python objects would
# take several times as much). Large exports should be OTLP JSON lines or protobuf, which stream.
MAX_DOCUMENT_BYTES = 512 * 1024**2
READ_CHUNK = 8 * 1024 * 1024
BOM = b"\xef\xbb\xbf"

# The largest µs value whose ns fits in a signed 64-bit int (DuckDB TIMESTAMP_NS / BIGINT); a span's
# end (start + duration) must fit too, since queries compute it.
INT64_MAX = 2**63 - 1
MAX_MICROS = INT64_MAX // 1000
HEX_DIGITS = frozenset("0123456789abcdefABCDEF")
_LOWER_HEX = re.compile(r"[0-9a-f]+")


def read_document(stream: BinaryIO, source: str, limit: int | None = None) -> Any:
    """Read and parse the whole stream as one JSON document; DecodeError on anything malformed.

    The bytes are gathered in one bytearray and parsed in place (orjson reads a memoryview), so a
    document costs its size once, not twice, before parsing."""
    cap = MAX_DOCUMENT_BYTES if limit is None else limit
    data = bytearray()
    while chunk := stream.read(READ_CHUNK):
        if len(data) + len(chunk) > cap:
            raise DecodeError(
                source,
                f"byte {cap}",
                f"JSON document larger than {cap >> 20} MiB; refusing to load it whole "
                "(export OTLP JSON lines or protobuf for files this big)",
            )
        data += chunk
    view = memoryview(data)
    if data.startswith(BOM):
        view = view[len(BOM) :]
    if not view or data.isspace():
        raise DecodeError(source, "byte 0", "empty file (no JSON document)")
    try:
        return orjson.loads(view)
    except orjson.JSONDecodeError as error:
        reason = str(error).split(": line ", 1)[0]
        if "empty" in reason:
            raise DecodeError(source, "byte 0", "empty file (no JSON document)") from None
        raise DecodeError(
            source, f"line {error.lineno} column {error.colno}", f"invalid JSON: {reason}"
        ) from None
    finally:
        view.release()


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """Python's cyclic garbage collector off for the block (as it was after). A parsed document is
    millions of containers, none in a cycle, and so are the records made from it: with the collector
    on, allocating them set off collections that scanned the whole document again and again (a
    25 MB Jaeger file: parse 0.47 -> 0.21 s of CPU, parse and walk 1.04-1.22 -> 0.52 s). The
    decoders pause it while they parse and walk, never across a `yield` (the caller's own work runs
    with it as it was)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def hex_id(value: Any, width: int, what: str) -> str:
    """A hex id left-padded with zeros to `width` chars, lowercase. ValueError says what is wrong.

    Jaeger and Zipkin write 64-bit trace ids as 16 hex chars (older Jaeger versions drop leading
    zeros); OTLP wants 32, so shorter ids are left-padded as Zipkin's and Jaeger's own readers do.
    """
    if value.__class__ is str and len(value) <= width and _LOWER_HEX.fullmatch(value):  # the usual case
        return value if len(value) == width else value.rjust(width, "0")
    if not isinstance(value, str):
        raise ValueError(f"{what} must be a hex string, not {type_name(value)}")
    if not value:
        raise ValueError(f"{what} is empty")
    if len(value) > width:
        raise ValueError(f"{what} {short(value)} is longer than {width} hex characters")
    if not HEX_DIGITS.issuperset(value):
        raise ValueError(f"{what} {short(value)} is not hexadecimal")
    return value.lower().rjust(width, "0")


SCOPE_TAGS = (("otel.scope.name", "otel.library.name"), ("otel.scope.version", "otel.library.version"))


def scope_of(attributes: dict[str, str]) -> tuple[str, str]:
    """(scope name, scope version) taken out of Jaeger/Zipkin tags, as the Collector's translators do
    (`otel.scope.*`, or the older `otel.library.*`); ('', '') when the tags carry none."""
    found = ["", ""]
    for slot, keys in enumerate(SCOPE_TAGS):
        for key in keys:
            if key in attributes:
                found[slot] = attributes.pop(key)
                break
    return found[0], found[1]


def micros(value: Any, what: str) -> int:
    """A non-negative integral count of microseconds, as nanoseconds. ValueError says what is wrong."""
    if value.__class__ is int and 0 <= value <= MAX_MICROS:  # the usual case
        return value * 1000
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{what} must be a number of microseconds, not {type_name(value)}")
    if isinstance(value, float):
        if not math.isfinite(value) or value != int(value):
            raise ValueError(f"{what} {value!r} is not a whole number of microseconds")
        value = int(value)
    if value < 0:
        raise ValueError(f"{what} {value} is negative")
    if value > MAX_MICROS:
        raise ValueError(f"{what} {value} µs is out of range (after year 2262)")
    return value * 1000


def render_value(value: Any) -> str:
    """Any JSON value as an attribute string: strings as-is, bools true/false, numbers as AsString."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return av.format_double(value)  # orjson never yields NaN or Infinity
    if value is None:
        return ""
    return av.raw_to_json(value)


def type_name(value: Any) -> str:
    if value is None:
        return "null"
    return {dict: "an object", list: "an array", str: "a string", bool: "a boolean"}.get(
        type(value), "a number" if isinstance(value, int | float) else type(value).__name__
    )


def short(value: str, limit: int = 40) -> str:
    """A value quoted for an error message, cut so that a megabyte id cannot flood the terminal."""
    text = value if len(value) <= limit else value[:limit] + "…"
    return repr(text)


# Errors from walking a hostile document that mean "this record is malformed", never a crash.
RECORD_ERRORS = (ValueError, TypeError, KeyError, AttributeError, OverflowError, RecursionError)


class BadRecord(ValueError):
    """One span or trace is malformed; the message says what, in plain words."""


def record_message(error: Exception) -> str:
    """The plain-words message for an error met while normalising one record."""
    if isinstance(error, BadRecord):
        return str(error)
    if isinstance(error, RecursionError):
        return "structure nested too deeply"
    return f"malformed record ({type(error).__name__}: {str(error)[:200]})"
