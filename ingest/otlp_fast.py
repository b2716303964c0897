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
import orjson
import pyarrow as pa
from msgspec import Raw, Struct

from ingest import anyvalue as av
from ingest import otlp_json
from ingest.arrow_batch import ArrowSpans, ColumnBatch
from ingest.columns import EMPTY_LIST, SpanColumns, events_json, links_json
from ingest.errors import DecodeError, report

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


class _JsonBatch(ColumnBatch):
    """A ColumnBatch filled from OTLP JSON lines (attribute lists keyed by their raw bytes)."""

    def _resource(self, resource: _Resource | None) -> int:
        raw = bytes(resource.attributes) if resource is not None else b""
        return self.resource_index(raw, lambda: render_attributes(raw), otlp_json.UNKNOWN_SERVICE)

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
                    scope_index = (
                        self.scope_index(scope.name, scope.version) if scope else self.scope_index("", "")
                    )
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
                        if index is None:
                            index = self.new_attributes(raw, render_attributes(raw))
                        self.attributes.append(index)
                    self.events += [s.events for s in spans]
                    self.links += [s.links for s in spans]
        except (msgspec.ValidationError, msgspec.DecodeError, ValueError, orjson.JSONDecodeError):
            self.truncate(size)
            return False
        if len(self.span_id) > size:
            self.lines.append((line_no, line))
        return True

    def events_array(self) -> pa.Array:
        values: list[Any] = []
        for raw in self.events:
            data = b"" if raw is _EMPTY else bytes(raw)
            if data in _NO_LIST:
                values.append(EMPTY_LIST)
                continue
            values.append(
                events_json(
                    [
                        (
                            av.unix_nano(event.time_unix_nano, "event timeUnixNano"),
                            event.name,
                            render_attributes(bytes(event.attributes)),
                        )
                        for event in _EVENTS.decode(data)
                    ]
                )
            )
        return pa.array(values, pa.string())

    def links_array(self) -> pa.Array:
        values: list[Any] = []
        for raw in self.links:
            data = b"" if raw is _EMPTY else bytes(raw)
            if data in _NO_LIST:
                values.append(EMPTY_LIST)
                continue
            values.append(
                links_json(
                    [
                        (
                            av.normalize_id(link.trace_id, 16, "link traceId"),
                            av.normalize_id(link.span_id, 8, "link spanId"),
                            link.trace_state,
                            render_attributes(bytes(link.attributes)),
                        )
                        for link in _LINKS.decode(data)
                    ]
                )
            )
        return pa.array(values, pa.string())


def decode_lines(
    lines: list[tuple[int, bytes]], source: str, on_bad: Callable[[DecodeError], None] | None
) -> Iterator[ArrowSpans | SpanColumns]:
    """Decode numbered JSON lines (a batch's worth): the fast path, then the reference decoder for
    the lines it passed on."""
    batch = _JsonBatch()
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
            report(ctx.error(f"invalid JSON: {error}"), on_bad)
            continue
        otlp_json.decode_record(record, out, ctx, on_bad)
    if len(out):
        yield out


def read_blocks(stream: BinaryIO, source: str, block_bytes: int = BLOCK_BYTES) -> Iterator[tuple[int, bytes]]:
    """(number of the block's first line, block of whole lines); lines longer than otlp_json.MAX_LINE_BYTES
    raise DecodeError."""
    carry = b""
    line_no = 1
    first = True
    while True:
        data = stream.read(block_bytes)
        if first:
            first = False
            if data.startswith(otlp_json.BOM):
                data = data[len(otlp_json.BOM) :]
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
    text = head.removeprefix(otlp_json.BOM).lstrip()
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
