"""Spans held column-wise on their way to Arrow, with dictionary-encoded maps: the fast decoders'
shared batch builder (`otlp_fast` for JSON lines, `otlp_proto_fast` for protobuf).

Resource and span attribute maps are kept once per distinct map in a batch, written as JSON text
once each, and the Arrow columns are dictionary arrays of those texts. Ids, durations and enums are
checked per batch with Arrow/NumPy kernels; the spans of any record (line or message) holding a
value the fast path does not take as-is are dropped from the batch and the record handed back for
the reference decoder.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ingest import anyvalue as av
from ingest.columns import COLUMNS, attributes_json

_KINDS = {key: av.SPAN_KIND_NAMES.index(name) for key, name in av.SPAN_KINDS.items() if key is not None}
_STATUS = {key: av.STATUS_CODE_NAMES.index(name) for key, name in av.STATUS_CODES.items() if key is not None}
_KIND_ARRAY = pa.array(av.SPAN_KIND_NAMES)
_STATUS_ARRAY = pa.array(av.STATUS_CODE_NAMES)
_NAMES = [column for _, column, _ in COLUMNS]


class ArrowSpans:
    """A batch already in Arrow form (what the fast path yields); the loader stores it like a
    SpanColumns batch."""

    __slots__ = ("resources", "table")

    def __init__(self, table: pa.Table, resources: list[dict[str, str]]) -> None:
        self.table = table
        self.resources = resources

    def __len__(self) -> int:
        return self.table.num_rows

    def to_arrow(self) -> pa.Table:
        return self.table

    def unique_resources(self) -> list[dict[str, str]]:
        return self.resources


class ColumnBatch:
    """Columns of the spans decoded so far, plus the records (numbered lines or messages) they came
    from. Subclasses fill the lists and say how events and links become Arrow arrays."""

    def __init__(self) -> None:
        self.lines: list[tuple[int, Any]] = []
        self.span_line: list[int] = []
        self.trace_id: list[str] = []
        self.span_id: list[str] = []
        self.parent: list[str] = []
        self.trace_state: list[str] = []
        self.name: list[str] = []
        self.kind: list[Any] = []
        self.start: list[int] = []
        self.end: list[int] = []
        self.status: list[Any] = []
        self.message: list[str] = []
        self.resource: list[int] = []
        self.scope: list[int] = []
        self.attributes: list[int] = []
        self.events: list[Any] = []
        self.links: list[Any] = []
        self.resource_keys: dict[Any, int] = {}
        self.resource_maps: list[dict[str, str]] = []
        self.services: list[str] = []
        self.scope_keys: dict[tuple[str, str], int] = {}
        self.attribute_keys: dict[Any, int] = {}
        self.attribute_maps: list[dict[str, str]] = []

    def __len__(self) -> int:
        return len(self.span_id)

    def truncate(self, size: int) -> None:
        for column in (
            self.span_line, self.trace_id, self.span_id, self.parent, self.trace_state, self.name,
            self.kind, self.start, self.end, self.status, self.message, self.resource, self.scope,
            self.attributes, self.events, self.links,
        ):  # fmt: skip
            del column[size:]

    def resource_index(self, key: Any, render: Callable[[], dict[str, str]], unknown_service: str) -> int:
        index = self.resource_keys.get(key)
        if index is None:
            attributes = render()
            index = self.resource_keys[key] = len(self.resource_maps)
            self.resource_maps.append(attributes)
            self.services.append(attributes.get("service.name") or unknown_service)
        return index

    def scope_index(self, name: str, version: str) -> int:
        return self.scope_keys.setdefault((name, version), len(self.scope_keys))

    def new_attributes(self, key: Any, attributes: dict[str, str]) -> int:
        index = self.attribute_keys[key] = len(self.attribute_maps)
        self.attribute_maps.append(attributes)
        return index

    def events_array(self) -> pa.Array:
        raise NotImplementedError

    def links_array(self) -> pa.Array:
        raise NotImplementedError

    def finish(self) -> tuple[ArrowSpans | None, list[tuple[int, Any]]]:
        """The batch as Arrow, and the records whose values the fast path does not take as-is."""
        try:
            table, bad = self._table()
        except (OverflowError, ValueError, TypeError, pa.ArrowException):
            return None, self.lines  # e.g. a time past int64: let the reference decoder say where
        if bad is not None and len(bad):
            bad_lines = set(np.asarray(self.span_line)[bad].tolist())
            keep = pc.invert(pc.is_in(pa.array(self.span_line), pa.array(sorted(bad_lines))))
            table = table.filter(keep)
            return ArrowSpans(table, self.resource_maps), [ln for ln in self.lines if ln[0] in bad_lines]
        return ArrowSpans(table, self.resource_maps), []

    def _table(self) -> tuple[pa.Table, np.ndarray | None]:
        start = np.array(self.start, dtype=np.int64)
        duration = np.array(self.end, dtype=np.int64) - start
        kind = [_KINDS.get(k, -1) for k in self.kind]
        status = [_STATUS.get(c, -1) for c in self.status]
        trace_id = pa.array(self.trace_id, pa.string())
        span_id = pa.array(self.span_id, pa.string())
        parent = pa.array(self.parent, pa.string())
        kind_index = np.array(kind, dtype=np.int32)
        status_index = np.array(status, dtype=np.int32)
        bad = (
            (duration < 0)
            | (kind_index < 0)
            | (status_index < 0)
            | ~pc.match_substring_regex(trace_id, "^[0-9a-f]{32}$").to_numpy(zero_copy_only=False)
            | ~pc.match_substring_regex(span_id, "^[0-9a-f]{16}$").to_numpy(zero_copy_only=False)
            | ~pc.match_substring_regex(parent, "^([0-9a-f]{16})?$").to_numpy(zero_copy_only=False)
        )
        kind_index[kind_index < 0] = 0
        status_index[status_index < 0] = 0
        resource = pa.array(self.resource, pa.int32())
        arrays = {
            "Timestamp": pa.array(start, pa.int64()).cast(pa.timestamp("ns")),
            "TraceId": trace_id,
            "SpanId": span_id,
            "ParentSpanId": parent,
            "TraceState": pa.array(self.trace_state, pa.string()),
            "SpanName": pa.array(self.name, pa.string()),
            "SpanKind": pa.DictionaryArray.from_arrays(pa.array(kind_index), _KIND_ARRAY),
            "ServiceName": pa.DictionaryArray.from_arrays(resource, pa.array(self.services, pa.string())),
            "ResourceAttributes": pa.DictionaryArray.from_arrays(
                resource, pa.array([attributes_json(m) for m in self.resource_maps], pa.string())
            ),
            "ScopeName": pa.DictionaryArray.from_arrays(
                pa.array(self.scope, pa.int32()), pa.array([k[0] for k in self.scope_keys], pa.string())
            ),
            "ScopeVersion": pa.DictionaryArray.from_arrays(
                pa.array(self.scope, pa.int32()), pa.array([k[1] for k in self.scope_keys], pa.string())
            ),
            "SpanAttributes": pa.DictionaryArray.from_arrays(
                pa.array(self.attributes, pa.int32()),
                pa.array([attributes_json(m) for m in self.attribute_maps], pa.string()),
            ),
            "Duration": pa.array(duration, pa.int64()),
            "StatusCode": pa.DictionaryArray.from_arrays(pa.array(status_index), _STATUS_ARRAY),
            "StatusMessage": pa.array(self.message, pa.string()),
            "Events": self.events_array(),
            "Links": self.links_array(),
        }
        return pa.Table.from_arrays([arrays[name] for name in _NAMES], names=_NAMES), (
            np.flatnonzero(bad) if bad.any() else None
        )
