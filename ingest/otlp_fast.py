"""The fast path for OTLP JSON lines: typed msgspec decode straight into Arrow columns.

`otlp_json` is the reference decoder and accepts every shape; this module takes the common one —
Collector file-exporter JSON lines with camelCase keys and lowercase hex ids — at several times its
speed, and hands every line it cannot take whole back to `otlp_json` (so errors, positions and
synthetic ids stay exactly the reference decoder's):

- each line is decoded by msgspec into `gc=False` Structs that forbid unknown fields, so any other
  spelling (snake_case, legacy instrumentationLibrary…, wrappers) fails fast and falls back;
- attribute lists are kept as raw JSON bytes and rendered once per distinct list in a batch; the
  Arrow map columns are dictionary-encoded, so DuckDB builds and checks each distinct map once
  (its per-row MAP conversion, not Python, is what dominates otherwise);
- ids, durations and enums are checked per batch with Arrow/NumPy kernels; a line with any value
  the fast path does not accept as-is (uppercase or base64 ids, empty ids, end before start,
  out-of-range times) is re-decoded by `otlp_json`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, BinaryIO

import msgspec
import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc
from msgspec import Raw, Struct

from ingest import anyvalue as av
from ingest import otlp_json
from ingest.columns import COLUMNS, EVENT, LINK, STRING_MAP, SpanColumns
from ingest.errors import DecodeError

BLOCK_BYTES = 8 << 20
_EMPTY = Raw(b"")
_NO_LIST = (b"", b"[]")


class _AnyValue(Struct, gc=False, rename="camel", forbid_unknown_fields=True):
    string_value: str | None = None
    int_value: int | None = None
    bool_value: bool | None = None
    double_value: float | None = None
    bytes_value: Raw = _EMPTY
    array_value: Raw = _EMPTY
    kvlist_value: Raw = _EMPTY


class _KeyValue(Struct, gc=False, forbid_unknown_fields=True):
    key: str = ""
    value: _AnyValue | None = None


class _Event(Struct, gc=False, rename="camel", forbid_unknown_fields=True):
    time_unix_nano: int = 0
    name: str = ""
    attributes: Raw = _EMPTY
    dropped_attributes_count: int = 0


class _Link(Struct, gc=False, rename="camel", forbid_unknown_fields=True):
    trace_id: str = ""
    span_id: str = ""
    trace_state: str = ""
    flags: int = 0
    attributes: Raw = _EMPTY
    dropped_attributes_count: int = 0


class _Status(Struct, gc=False, rename="camel", forbid_unknown_fields=True):
    code: int | str = 0
    message: str = ""


class _Span(Struct, gc=False, rename="camel", forbid_unknown_fields=True):
    trace_id: str = ""
    span_id: str = ""
    parent_span_id: str = ""
    trace_state: str = ""
    flags: int = 0
    name: str = ""
    kind: int | str = 0
    start_time_unix_nano: int = 0
    end_time_unix_nano: int = 0
    attributes: Raw = _EMPTY
    dropped_attributes_count: int = 0
    events: Raw = _EMPTY
    dropped_events_count: int = 0
    links: Raw = _EMPTY
    dropped_links_count: int = 0
    status: _Status | None = None


class _Scope(Struct, gc=False, rename="camel", forbid_unknown_fields=True):
    name: str = ""
    version: str = ""
    attributes: Raw = _EMPTY
    dropped_attributes_count: int = 0


class _ScopeSpans(Struct, gc=False, rename="camel", forbid_unknown_fields=True):
    scope: _Scope | None = None
    spans: list[_Span] = []
    schema_url: str = ""


class _Resource(Struct, gc=False, rename="camel", forbid_unknown_fields=True):
    attributes: Raw = _EMPTY
    dropped_attributes_count: int = 0
    entity_refs: Raw = _EMPTY


class _ResourceSpans(Struct, gc=False, rename="camel", forbid_unknown_fields=True):
    resource: _Resource | None = None
    scope_spans: list[_ScopeSpans] = []
    schema_url: str = ""


class _Request(Struct, gc=False, rename="camel", forbid_unknown_fields=True):
    resource_spans: list[_ResourceSpans] = []


_DECODER = msgspec.json.Decoder(_Request, strict=False)
_ATTRIBUTES = msgspec.json.Decoder(list[_KeyValue], strict=False)
_EVENTS = msgspec.json.Decoder(list[_Event], strict=False)
_LINKS = msgspec.json.Decoder(list[_Link], strict=False)


def render_attributes(raw: bytes) -> dict[str, str]:
    """A raw OTLP/JSON attribute list as {key: AsString}: typed for scalar values, through the
    reference renderer for anything else (bytes, arrays, kvlists, empty values, other spellings)."""
    if not raw:
        return {}
    try:
        items = _ATTRIBUTES.decode(raw)
    except msgspec.ValidationError:
        return av.json_attributes(orjson.loads(raw))
    out = {}
    for kv in items:
        value = kv.value
        if value is None:
            out[kv.key] = ""
        elif value.string_value is not None:
            out[kv.key] = value.string_value
        elif value.int_value is not None:
            out[kv.key] = str(value.int_value)
        elif value.bool_value is not None:
            out[kv.key] = "true" if value.bool_value else "false"
        elif value.double_value is not None:
            out[kv.key] = av.format_double(value.double_value)
        else:
            return av.json_attributes(orjson.loads(raw))
    return out


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


class _Batch:
    """Columns of the spans decoded so far, plus the lines they came from."""

    def __init__(self) -> None:
        self.lines: list[tuple[int, bytes]] = []
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
        self.resource_keys: dict[bytes, int] = {}
        self.resource_maps: list[dict[str, str]] = []
        self.services: list[str] = []
        self.scope_keys: dict[tuple[str, str], int] = {}
        self.attribute_keys: dict[bytes, int] = {}
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

    def _resource(self, resource: _Resource | None) -> int:
        raw = bytes(resource.attributes) if resource is not None else b""
        index = self.resource_keys.get(raw)
        if index is None:
            attributes = render_attributes(raw)
            index = self.resource_keys[raw] = len(self.resource_maps)
            self.resource_maps.append(attributes)
            self.services.append(attributes.get("service.name") or otlp_json.UNKNOWN_SERVICE)
        return index

    def _attribute_index(self, raw: bytes) -> int:
        index = self.attribute_keys[raw] = len(self.attribute_maps)
        self.attribute_maps.append(render_attributes(raw))
        return index

    def add_line(self, line_no: int, line: bytes) -> bool:
        """Decode one line into the columns; False (and nothing added) when it needs the slow path."""
        size = len(self.span_id)
        try:
            request = _DECODER.decode(line)
            for rs in request.resource_spans:
                resource = self._resource(rs.resource)
                for ss in rs.scope_spans:
                    spans = ss.spans
                    if not spans:
                        continue
                    scope = ss.scope
                    scope_key = (scope.name, scope.version) if scope is not None else ("", "")
                    scope_index = self.scope_keys.setdefault(scope_key, len(self.scope_keys))
                    count = len(spans)
                    self.span_line += [line_no] * count
                    self.resource += [resource] * count
                    self.scope += [scope_index] * count
                    self.trace_id += [s.trace_id for s in spans]
                    self.span_id += [s.span_id for s in spans]
                    self.parent += [s.parent_span_id for s in spans]
                    self.trace_state += [s.trace_state for s in spans]
                    self.name += [s.name for s in spans]
                    self.kind += [s.kind for s in spans]
                    self.start += [s.start_time_unix_nano for s in spans]
                    self.end += [s.end_time_unix_nano for s in spans]
                    statuses = [s.status for s in spans]
                    self.status += [st.code if st is not None else 0 for st in statuses]
                    self.message += [st.message if st is not None else "" for st in statuses]
                    keys = self.attribute_keys
                    for s in spans:
                        raw = bytes(s.attributes)
                        index = keys.get(raw)
                        self.attributes.append(index if index is not None else self._attribute_index(raw))
                    self.events += [s.events for s in spans]
                    self.links += [s.links for s in spans]
        except (msgspec.ValidationError, msgspec.DecodeError, ValueError, orjson.JSONDecodeError):
            self.truncate(size)
            return False
        if len(self.span_id) > size:
            self.lines.append((line_no, line))
        return True

    def finish(self) -> tuple[ArrowSpans | None, list[tuple[int, bytes]]]:
        """The batch as Arrow, and the lines whose values the fast path does not take as-is."""
        try:
            table, bad = self._table()
        except (OverflowError, ValueError, TypeError, msgspec.ValidationError, pa.ArrowException):
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
                resource, pa.array([list(m.items()) for m in self.resource_maps], STRING_MAP)
            ),
            "ScopeName": pa.DictionaryArray.from_arrays(
                pa.array(self.scope, pa.int32()), pa.array([k[0] for k in self.scope_keys], pa.string())
            ),
            "ScopeVersion": pa.DictionaryArray.from_arrays(
                pa.array(self.scope, pa.int32()), pa.array([k[1] for k in self.scope_keys], pa.string())
            ),
            "SpanAttributes": pa.DictionaryArray.from_arrays(
                pa.array(self.attributes, pa.int32()),
                pa.array([list(m.items()) for m in self.attribute_maps], STRING_MAP),
            ),
            "Duration": pa.array(duration, pa.int64()),
            "StatusCode": pa.DictionaryArray.from_arrays(pa.array(status_index), _STATUS_ARRAY),
            "StatusMessage": pa.array(self.message, pa.string()),
            "Events": _events(self.events),
            "Links": _links(self.links),
        }
        return pa.Table.from_arrays([arrays[name] for name in _NAMES], names=_NAMES), (
            np.flatnonzero(bad) if bad.any() else None
        )


def _events(raws: list[Raw]) -> pa.Array:
    values: list[Any] = []
    for raw in raws:
        data = b"" if raw is _EMPTY else bytes(raw)
        if data in _NO_LIST:
            values.append(())
            continue
        values.append(
            [
                (
                    av.unix_nano(event.time_unix_nano, "event timeUnixNano"),
                    event.name,
                    list(render_attributes(bytes(event.attributes)).items()),
                )
                for event in _EVENTS.decode(data)
            ]
        )
    return pa.array(values, pa.list_(EVENT))


def _links(raws: list[Raw]) -> pa.Array:
    values: list[Any] = []
    for raw in raws:
        data = b"" if raw is _EMPTY else bytes(raw)
        if data in _NO_LIST:
            values.append(())
            continue
        values.append(
            [
                (
                    av.normalize_id(link.trace_id, 16, "link traceId"),
                    av.normalize_id(link.span_id, 8, "link spanId"),
                    link.trace_state,
                    list(render_attributes(bytes(link.attributes)).items()),
                )
                for link in _LINKS.decode(data)
            ]
        )
    return pa.array(values, pa.list_(LINK))


def decode_lines(
    lines: list[tuple[int, bytes]], source: str, on_bad: Callable[[DecodeError], None] | None
) -> Iterator[ArrowSpans | SpanColumns]:
    """Decode numbered JSON lines (a batch's worth): the fast path, then the reference decoder for
    the lines it passed on."""
    batch = _Batch()
    slow: list[tuple[int, bytes]] = []
    for line_no, line in lines:
        if not batch.add_line(line_no, line):
            slow.append((line_no, line))
    if len(batch):
        table, rejected = batch.finish()
        if table is not None and len(table):
            yield table
        slow.extend(rejected)
    if slow:
        slow.sort()
        yield from _reference(slow, source, on_bad)


def _reference(
    lines: list[tuple[int, bytes]], source: str, on_bad: Callable[[DecodeError], None] | None
) -> Iterator[SpanColumns]:
    ctx = otlp_json.DecodeContext(source)
    out = SpanColumns()
    for line_no, line in lines:
        ctx.position = f"line {line_no}"
        ctx.record = line_no
        try:
            record = orjson.loads(line)
        except orjson.JSONDecodeError as error:
            exc = ctx.error(f"invalid JSON: {error}")
            if on_bad is None:
                raise exc from None
            on_bad(exc)
            continue
        otlp_json.decode_record(record, out, ctx, on_bad)
    if len(out):
        yield out


def read_blocks(stream: BinaryIO, source: str, block_bytes: int = BLOCK_BYTES) -> Iterator[tuple[int, bytes]]:
    """(number of the block's first line, block of whole lines); lines longer than otlp_json.MAX_LINE_BYTES
    raise DecodeError."""
    carry = b""
    line_no = 1
    while True:
        data = stream.read(block_bytes)
        if not data:
            if carry:
                yield line_no, carry
            return
        buffer = carry + data if carry else data
        cut = buffer.rfind(b"\n")
        if cut < 0:
            if len(buffer) > otlp_json.MAX_LINE_BYTES:
                raise DecodeError(
                    source, f"line {line_no}", f"line longer than {otlp_json.MAX_LINE_BYTES >> 20} MiB"
                )
            carry = buffer
            continue
        block, carry = buffer[: cut + 1], buffer[cut + 1 :]
        lines = block.count(b"\n")
        if len(carry) > otlp_json.MAX_LINE_BYTES:
            raise DecodeError(
                source, f"line {line_no + lines}", f"line longer than {otlp_json.MAX_LINE_BYTES >> 20} MiB"
            )
        yield line_no, block
        line_no += lines


def numbered_lines(first_line: int, block: bytes, source: str) -> list[tuple[int, bytes]]:
    """The non-blank lines of a block with their line numbers; a line longer than MAX_LINE_BYTES
    raises DecodeError."""
    limit = otlp_json.MAX_LINE_BYTES
    lines = list(enumerate(block.split(b"\n"), first_line))
    if len(block) > limit:
        for number, line in lines:
            if len(line) > limit:
                raise DecodeError(source, f"line {number}", f"line longer than {limit >> 20} MiB")
    return [(number, line) for number, line in lines if line and not line.isspace()]


def is_json_lines(head: bytes) -> bool:
    """Whether a file whose first bytes are `head` is JSON lines (else one pretty-printed document)."""
    text = head.lstrip()
    newline = text.find(b"\n")
    if newline < 0:
        return True  # one long first line
    first = text[:newline].rstrip()
    try:
        orjson.loads(first)
    except orjson.JSONDecodeError:
        return first.endswith((b"}", b"]"))  # a whole but malformed first record
    return True


def decode(
    stream: BinaryIO, source: str, on_bad: Callable[[DecodeError], None] | None = None
) -> Iterator[ArrowSpans | SpanColumns]:
    """OTLP JSON lines → Arrow batches (fast path) and SpanColumns (lines it passed on)."""
    for first_line, block in read_blocks(stream, source):
        yield from decode_lines(numbered_lines(first_line, block, source), source, on_bad)
