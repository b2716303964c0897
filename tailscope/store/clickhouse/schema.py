"""What tailscope needs of the exporter's otel_traces: the columns it reads and the types the
OpenTelemetry Collector's ClickHouse exporter gives them (any of the listed ones), checked before a
command uses a ClickHouse store (ClickHouseClient.check)."""

from __future__ import annotations

from collections.abc import Mapping

_MAP = ("Map(LowCardinality(String), String)", "Map(String, String)")
_TEXT = ("String", "LowCardinality(String)")
# The columns tailscope reads from otel_traces and the types the exporter gives them (any of these).
REQUIRED_COLUMNS: dict[str, tuple[str, ...]] = {
    "Timestamp": ("DateTime64(9)",),
    "TraceId": _TEXT,
    "SpanId": _TEXT,
    "ParentSpanId": _TEXT,
    "SpanName": _TEXT,
    "SpanKind": _TEXT,
    "ServiceName": _TEXT,
    "ResourceAttributes": _MAP,
    "SpanAttributes": _MAP,
    "Duration": ("UInt64", "Int64"),
    "StatusCode": _TEXT,
    "StatusMessage": _TEXT,
    "Events.Timestamp": ("Array(DateTime64(9))",),
    "Events.Name": tuple(f"Array({t})" for t in _TEXT),
    "Events.Attributes": tuple(f"Array({t})" for t in _MAP),
}


def schema_problem(columns: Mapping[str, str]) -> str | None:
    """Why otel_traces' columns (name -> type) are not the exporter's schema, None when they are."""
    for name, types in REQUIRED_COLUMNS.items():
        found = columns.get(name)
        if found is None:
            return f"column {name} is missing"
        if found not in types:
            return f"column {name} is {found}, expected {' or '.join(types)}"
    return None
