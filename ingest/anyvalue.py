"""Value normalisation shared by the OTLP decoders: AnyValue → string, ids → lowercase hex, enums.

Attribute values are stored as strings rendered the way the OpenTelemetry Collector's
`pcommon.Value.AsString` renders them, so a query written against the ClickHouse exporter's table
sees the same text here:

- string → itself; bool → 'true' / 'false'; int → decimal; empty → ''
- double → ES6-style shortest form ('1', '0.5', '1e+21', '1e-7'); NaN and ±Infinity are rejected
- bytes → standard base64
- array / kvlist → compact JSON of the raw values (kvlist keys sorted, `<>&` escaped as Go does)

Functions raise `ValueError` with a plain-words message; decoders wrap it in a `DecodeError` that
names the file and position.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import math
from decimal import Decimal
from typing import Any

MAX_VALUE_DEPTH = 64

SPAN_KIND_NAMES = ("Unspecified", "Internal", "Server", "Client", "Producer", "Consumer")
STATUS_CODE_NAMES = ("Unset", "Ok", "Error")

# Every spelling an enum may take in OTLP/JSON or protobuf: int, decimal string, proto name.
SPAN_KINDS: dict[Any, str] = {}
for _number, _name in enumerate(SPAN_KIND_NAMES):
    SPAN_KINDS[_number] = _name
    SPAN_KINDS[str(_number)] = _name
    SPAN_KINDS[f"SPAN_KIND_{_name.upper()}"] = _name
SPAN_KINDS[None] = "Unspecified"
STATUS_CODES: dict[Any, str] = {}
for _number, _name in enumerate(STATUS_CODE_NAMES):
    STATUS_CODES[_number] = _name
    STATUS_CODES[str(_number)] = _name
    STATUS_CODES[f"STATUS_CODE_{_name.upper()}"] = _name
STATUS_CODES[None] = "Unset"

_HEX = frozenset("0123456789abcdefABCDEF")
INT64_MAX = (1 << 63) - 1


def json_string(value: Any, what: str) -> str:
    """An optional OTLP/JSON string field: None → '', a string as is, anything else an error."""
    if value is None:
        return ""
    if not isinstance(value, str):
        raise ValueError(f"{what} must be a string, got {type(value).__name__}")
    return value


def span_kind(value: Any) -> str:
    try:
        return SPAN_KINDS[value]
    except (KeyError, TypeError):
        raise ValueError(f"unknown span kind {value!r}") from None


def status_code(value: Any) -> str:
    try:
        return STATUS_CODES[value]
    except (KeyError, TypeError):
        raise ValueError(f"unknown status code {value!r}") from None


def normalize_id(value: Any, size: int, what: str) -> str:
    """An OTLP/JSON id as lowercase hex of `size` bytes; '' stays ''.

    Hex (any case) is 2*size characters; protojson's base64 is 4*ceil(size/3) characters (24 for a
    16-byte trace id, 12 for an 8-byte span id), so the two spellings never have the same length.
    """
    if value is None or value == "":
        return ""
    if not isinstance(value, str):
        raise ValueError(f"{what} must be a string, got {type(value).__name__}")
    if len(value) == 2 * size:
        if _HEX.issuperset(value):
            return value.lower()
    elif len(value) == 4 * ((size + 2) // 3):
        try:
            raw = base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError):
            raw = b""
        if len(raw) == size:
            return raw.hex()
    raise ValueError(f"{what} {value[:48]!r} is neither {2 * size}-char hex nor base64 of {size} bytes")


def id_from_bytes(raw: bytes, size: int, what: str) -> str:
    """A protobuf id (raw bytes) as lowercase hex; b'' → ''."""
    if len(raw) == size:
        return raw.hex()
    if not raw:
        return ""
    raise ValueError(f"{what} has {len(raw)} bytes, expected {size}")


def synthetic_id(seed: str, size: int, *parts: object) -> str:
    """A deterministic id for a span exported with an empty id (see ARCHITECTURE.md, Ingest)."""
    text = "\x1f".join([seed, *map(str, parts)])
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=size).hexdigest()


def unix_nano(value: Any, what: str) -> int:
    """A fixed64 nanosecond timestamp written as a JSON number or decimal string."""
    if value is None or value == "":
        return 0
    if isinstance(value, bool):
        raise ValueError(f"{what} must be an integer, got {value!r}")
    if isinstance(value, int):
        number = value
    elif (isinstance(value, str) and value.isascii() and value.isdigit() and len(value) <= 20) or (
        isinstance(value, float) and value.is_integer()
    ):
        number = int(value)
    else:
        raise ValueError(f"{what} must be a non-negative integer, got {str(value)[:48]!r}")
    if not 0 <= number <= INT64_MAX:
        raise ValueError(f"{what} {number} is out of range")
    return number


def format_double(value: float) -> str:
    """Go's float64AsString (pcommon): ES6 number formatting."""
    if math.isnan(value) or math.isinf(value):
        raise ValueError(f"double value {value!r} is not a finite number")
    magnitude = abs(value)
    text = repr(value)
    if magnitude != 0 and (magnitude < 1e-6 or magnitude >= 1e21):
        mantissa, _, exponent = text.partition("e")
        sign = exponent[0]
        digits = exponent[1:].lstrip("0") or "0"
        return f"{mantissa}e{sign}{digits}"
    if "e" in text:
        text = format(Decimal(text), "f")
    if text.endswith(".0"):
        text = text[:-2]
    return text


def _json_string(text: str) -> str:
    return (
        json.dumps(text, ensure_ascii=False)
        .replace("<", "\\u003c")
        .replace(">", "\\u003e")
        .replace("&", "\\u0026")
        .replace("\u2028", "\\u2028")
        .replace("\u2029", "\\u2029")
    )


def raw_to_json(raw: Any) -> str:
    """Go encoding/json of a pcommon AsRaw() value: compact, map keys sorted."""
    if raw is None:
        return "null"
    if raw is True:
        return "true"
    if raw is False:
        return "false"
    if isinstance(raw, int):
        return str(raw)
    if isinstance(raw, float):
        return format_double(raw)
    if isinstance(raw, str):
        return _json_string(raw)
    if isinstance(raw, bytes):
        return '"' + base64.b64encode(raw).decode("ascii") + '"'
    if isinstance(raw, list):
        return "[" + ",".join(raw_to_json(item) for item in raw) + "]"
    items = sorted(raw.items())
    return "{" + ",".join(_json_string(k) + ":" + raw_to_json(v) for k, v in items) + "}"


# ----------------------------------------------------------------------------- OTLP/JSON AnyValue


def _json_int(value: Any) -> int:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str):
        try:
            return int(value)
        except ValueError:
            pass
    raise ValueError(f"intValue {str(value)[:48]!r} is not an integer")


def _json_double(value: Any) -> float:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, str):  # protojson writes "NaN", "Infinity"; we reject non-finite values
        try:
            return float(value)
        except ValueError:
            pass
    raise ValueError(f"doubleValue {str(value)[:48]!r} is not a number")


def _json_bytes(value: Any) -> bytes:
    if isinstance(value, str):
        try:
            return base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError):
            pass
    raise ValueError("bytesValue is not base64")


def json_raw(value: Any, depth: int = 0) -> Any:
    """The raw Python value of an OTLP/JSON AnyValue object (camelCase or snake_case keys)."""
    if depth > MAX_VALUE_DEPTH:
        raise ValueError(f"attribute value nested deeper than {MAX_VALUE_DEPTH} levels")
    if not isinstance(value, dict):
        if value is None:
            return None
        raise ValueError(f"attribute value must be an object, got {type(value).__name__}")
    for key, inner in value.items():
        if key in ("stringValue", "string_value"):
            if not isinstance(inner, str):
                raise ValueError("stringValue is not a string")
            return inner
        if key in ("intValue", "int_value"):
            return _json_int(inner)
        if key in ("boolValue", "bool_value"):
            if not isinstance(inner, bool):
                raise ValueError("boolValue is not a boolean")
            return inner
        if key in ("doubleValue", "double_value"):
            number = _json_double(inner)
            if math.isnan(number) or math.isinf(number):
                raise ValueError(f"doubleValue {inner!r} is not a finite number")
            return number
        if key in ("bytesValue", "bytes_value"):
            return _json_bytes(inner)
        if key in ("arrayValue", "array_value"):
            items = (inner or {}).get("values") or []
            if not isinstance(items, list):
                raise ValueError("arrayValue.values is not a list")
            return [json_raw(item, depth + 1) for item in items]
        if key in ("kvlistValue", "kvlist_value"):
            items = (inner or {}).get("values") or []
            if not isinstance(items, list):
                raise ValueError("kvlistValue.values is not a list")
            return {_kv_key(kv): json_raw(kv.get("value"), depth + 1) for kv in items}
    return None  # empty AnyValue


def _kv_key(kv: Any) -> str:
    if not isinstance(kv, dict):
        raise ValueError("attribute is not an object")
    key = kv.get("key", "")
    if not isinstance(key, str):
        raise ValueError("attribute key is not a string")
    return key


def json_value_string(value: Any) -> str:
    """An OTLP/JSON AnyValue object rendered as the Collector's AsString would."""
    if isinstance(value, dict) and len(value) == 1:
        inner = value.get("stringValue")
        if inner.__class__ is str:
            return inner
    raw = json_raw(value)
    if raw.__class__ is str:
        return raw
    if raw is None:
        return ""
    if isinstance(raw, (list, dict)):
        return raw_to_json(raw)
    if isinstance(raw, bytes):
        return base64.b64encode(raw).decode("ascii")
    return raw_to_json(raw)


def json_attributes(items: Any) -> dict[str, str]:
    """An OTLP/JSON KeyValue list as {key: string}."""
    if not items:
        return {}
    if not isinstance(items, list):
        raise ValueError("attributes is not a list")
    out = {}
    for kv in items:
        key = _kv_key(kv)  # checks kv is an object before kv.get below
        out[key] = json_value_string(kv.get("value"))
    return out


# ------------------------------------------------------------------------------ protobuf AnyValue


def proto_raw(value: Any, depth: int = 0) -> Any:
    """The raw Python value of a protobuf AnyValue message."""
    if depth > MAX_VALUE_DEPTH:
        raise ValueError(f"attribute value nested deeper than {MAX_VALUE_DEPTH} levels")
    which = value.WhichOneof("value")
    if which is None:
        return None
    if which == "double_value":
        number = value.double_value
        if math.isnan(number) or math.isinf(number):
            raise ValueError(f"doubleValue {number!r} is not a finite number")
        return number
    if which == "array_value":
        return [proto_raw(item, depth + 1) for item in value.array_value.values]
    if which == "kvlist_value":
        return {kv.key: proto_raw(kv.value, depth + 1) for kv in value.kvlist_value.values}
    if which == "string_value_strindex":
        raise ValueError("string_value_strindex (profiles dictionary) is not supported in traces")
    return getattr(value, which)


def proto_value_string(value: Any) -> str:
    which = value.WhichOneof("value")
    if which == "string_value":
        return value.string_value
    raw = proto_raw(value)
    if raw is None:
        return ""
    if isinstance(raw, bytes):
        return base64.b64encode(raw).decode("ascii")
    return raw_to_json(raw)


def proto_attributes(items: Any) -> dict[str, str]:
    out = {}
    for kv in items:
        value = kv.value
        out[kv.key] = value.string_value if value.WhichOneof("value") == "string_value" else (
            proto_value_string(value)
        )
    return out
