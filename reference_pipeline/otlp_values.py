"""Python values as OTLP/JSON AnyValues and KeyValue lists, without the OpenTelemetry SDK.

Shared by the service's file exporter (reference_pipeline.tracing) and the simulator's writers, so
both render attributes the same way.
"""

from __future__ import annotations

import base64
from collections.abc import Iterable, Mapping, Sequence
from typing import Any


def any_value(value: Any) -> dict[str, Any]:
    """One value as an OTLP/JSON AnyValue (64-bit ints as strings, bytes as base64)."""
    kind = type(value)  # the exact built-in types first: the exporter's hot path
    if kind is str:
        return {"stringValue": value}
    if kind is int:
        return {"intValue": str(value)}
    if isinstance(value, bool):
        return {"boolValue": value}
    if isinstance(value, int):
        return {"intValue": str(value)}
    if isinstance(value, float):
        return {"doubleValue": value}
    if isinstance(value, str):
        return {"stringValue": value}
    if isinstance(value, bytes):
        return {"bytesValue": base64.b64encode(value).decode()}
    if isinstance(value, Sequence):
        return {"arrayValue": {"values": [any_value(v) for v in value]}}
    return {"stringValue": str(value)}


def key_values(attrs: Mapping[str, Any] | Iterable[tuple[str, Any]] | None) -> list[dict[str, Any]]:
    """Attributes (a mapping, key/value pairs, or None) as an OTLP/JSON KeyValue list."""
    items = attrs.items() if isinstance(attrs, Mapping) else (attrs or ())
    return [{"key": k, "value": any_value(v)} for k, v in items]
