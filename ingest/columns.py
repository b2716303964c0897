"""SpanColumns: the one shape every decoder produces and the store consumes.

A decoder appends spans column by column (one Python list per `otel_traces` column), which keeps
per-span work to a handful of list appends and lets the store hand the whole batch to DuckDB as one
Arrow table. Values are already normalised when appended:

- ids: lowercase hex strings (trace 32 chars, span 16 chars; '' when absent, e.g. a root's parent)
- timestamp_ns / duration_ns: ints, nanoseconds since the Unix epoch / nanoseconds
- span_kind: 'Unspecified' | 'Internal' | 'Server' | 'Client' | 'Producer' | 'Consumer'
- status_code: 'Unset' | 'Ok' | 'Error'   (the ClickHouse exporter's spelling)
- attributes: dict[str, str]; non-string AnyValues rendered as the Collector's AsString does
  (bools 'true'/'false', ints decimal, doubles shortest repr, bytes base64, arrays/kvlists JSON)
- events: list of (timestamp_ns, name, attributes); links: list of (trace_id, span_id, trace_state,
  attributes)

In the Arrow table (and the store) attributes, events and links are JSON text, as schema.sql
describes; `attributes_json`, `events_json` and `links_json` write that form.
"""

from __future__ import annotations

from typing import Any

import orjson
import pyarrow as pa

JSON_TEXT = pa.string()
EMPTY_OBJECT = "{}"
EMPTY_LIST = "[]"


def attributes_json(attributes: dict[str, str]) -> str:
    """An attribute map as stored: a JSON object of string values."""
    return orjson.dumps(attributes).decode() if attributes else EMPTY_OBJECT


def events_json(events: list[tuple[int, str, dict[str, str]]] | tuple) -> str:
    """Span events as stored: [{"Timestamp": ns, "Name": ..., "Attributes": {...}}, ...]."""
    if not events:
        return EMPTY_LIST
    return orjson.dumps(
        [{"Timestamp": ts, "Name": name, "Attributes": attributes} for ts, name, attributes in events]
    ).decode()


def links_json(links: list[tuple[str, str, str, dict[str, str]]] | tuple) -> str:
    """Span links as stored: [{"TraceId", "SpanId", "TraceState", "Attributes": {...}}, ...]."""
    if not links:
        return EMPTY_LIST
    return orjson.dumps(
        [
            {"TraceId": trace_id, "SpanId": span_id, "TraceState": state, "Attributes": attributes}
            for trace_id, span_id, state, attributes in links
        ]
    ).decode()


# (attribute on SpanColumns, otel_traces column, arrow type) in table order, RunLabel excluded.
COLUMNS: tuple[tuple[str, str, pa.DataType], ...] = (
    ("timestamp_ns", "Timestamp", pa.timestamp("ns")),
    ("trace_id", "TraceId", pa.string()),
    ("span_id", "SpanId", pa.string()),
    ("parent_span_id", "ParentSpanId", pa.string()),
    ("trace_state", "TraceState", pa.string()),
    ("span_name", "SpanName", pa.string()),
    ("span_kind", "SpanKind", pa.string()),
    ("service_name", "ServiceName", pa.string()),
    ("resource_attributes", "ResourceAttributes", JSON_TEXT),
    ("scope_name", "ScopeName", pa.string()),
    ("scope_version", "ScopeVersion", pa.string()),
    ("span_attributes", "SpanAttributes", JSON_TEXT),
    ("duration_ns", "Duration", pa.int64()),
    ("status_code", "StatusCode", pa.string()),
    ("status_message", "StatusMessage", pa.string()),
    ("events", "Events", JSON_TEXT),
    ("links", "Links", JSON_TEXT),
)

SPAN_KINDS = ("Unspecified", "Internal", "Server", "Client", "Producer", "Consumer")
STATUS_CODES = ("Unset", "Ok", "Error")


class SpanColumns:
    """A batch of spans held column-wise. Append with `append(...)` or directly to the lists."""

    __slots__ = tuple(name for name, _, _ in COLUMNS)

    def __init__(self) -> None:
        for name, _, _ in COLUMNS:
            setattr(self, name, [])

    def __len__(self) -> int:
        return len(self.span_id)

    def append(
        self,
        *,
        timestamp_ns: int,
        trace_id: str,
        span_id: str,
        parent_span_id: str,
        span_name: str,
        duration_ns: int,
        service_name: str,
        trace_state: str = "",
        span_kind: str = "Unspecified",
        resource_attributes: dict[str, str] | None = None,
        scope_name: str = "",
        scope_version: str = "",
        span_attributes: dict[str, str] | None = None,
        status_code: str = "Unset",
        status_message: str = "",
        events: list[tuple[int, str, dict[str, str]]] | None = None,
        links: list[tuple[str, str, str, dict[str, str]]] | None = None,
    ) -> None:
        """Append one span (keyword arguments; the slow but obvious path for small decoders)."""
        self.timestamp_ns.append(timestamp_ns)
        self.trace_id.append(trace_id)
        self.span_id.append(span_id)
        self.parent_span_id.append(parent_span_id)
        self.trace_state.append(trace_state)
        self.span_name.append(span_name)
        self.span_kind.append(span_kind)
        self.service_name.append(service_name)
        self.resource_attributes.append(resource_attributes or {})
        self.scope_name.append(scope_name)
        self.scope_version.append(scope_version)
        self.span_attributes.append(span_attributes or {})
        self.duration_ns.append(duration_ns)
        self.status_code.append(status_code)
        self.status_message.append(status_message)
        self.events.append(events or [])
        self.links.append(links or [])

    def extend(self, other: SpanColumns) -> None:
        for name, _, _ in COLUMNS:
            getattr(self, name).extend(getattr(other, name))

    def unique_resources(self) -> list[dict[str, str]]:
        """The distinct resource attribute dicts of the batch (by identity: decoders share one dict
        per resource)."""
        return list({id(attrs): attrs for attrs in self.resource_attributes}.values())

    def rows(self) -> list[dict[str, Any]]:
        """The batch as one dict per span (tests and debugging; not the fast path)."""
        names = [name for name, _, _ in COLUMNS]
        columns = [getattr(self, n) for n in names]
        return [dict(zip(names, values, strict=True)) for values in zip(*columns, strict=True)]

    def to_arrow(self) -> pa.Table:
        """The batch as an Arrow table whose column names and types match `otel_traces`."""
        arrays = []
        for name, _, arrow_type in COLUMNS:
            values = getattr(self, name)
            if name in ("resource_attributes", "span_attributes"):
                values = [attributes_json(d) for d in values]
            elif name == "events":
                values = [events_json(evs) for evs in values]
            elif name == "links":
                values = [links_json(lks) for lks in values]
            arrays.append(pa.array(values, type=arrow_type))
        return pa.Table.from_arrays(arrays, names=[column for _, column, _ in COLUMNS])
