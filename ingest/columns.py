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
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

STRING_MAP = pa.map_(pa.string(), pa.string())
EVENT = pa.struct(
    [("Timestamp", pa.timestamp("ns")), ("Name", pa.string()), ("Attributes", STRING_MAP)]
)
LINK = pa.struct(
    [
        ("TraceId", pa.string()),
        ("SpanId", pa.string()),
        ("TraceState", pa.string()),
        ("Attributes", STRING_MAP),
    ]
)

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
    ("resource_attributes", "ResourceAttributes", STRING_MAP),
    ("scope_name", "ScopeName", pa.string()),
    ("scope_version", "ScopeVersion", pa.string()),
    ("span_attributes", "SpanAttributes", STRING_MAP),
    ("duration_ns", "Duration", pa.int64()),
    ("status_code", "StatusCode", pa.string()),
    ("status_message", "StatusMessage", pa.string()),
    ("events", "Events", pa.list_(EVENT)),
    ("links", "Links", pa.list_(LINK)),
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
            if arrow_type == STRING_MAP:
                values = [list(d.items()) for d in values]
            elif name == "events":
                values = [[(ts, n, list(a.items())) for ts, n, a in evs] for evs in values]
            elif name == "links":
                values = [[(t, s, st, list(a.items())) for t, s, st, a in lks] for lks in values]
            arrays.append(pa.array(values, type=arrow_type))
        return pa.Table.from_arrays(arrays, names=[column for _, column, _ in COLUMNS])
