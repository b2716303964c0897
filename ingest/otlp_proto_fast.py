"""The fast path for OTLP protobuf files: upb-parsed messages straight into Arrow columns.

Messages are parsed with the `opentelemetry-proto` classes (upb runtime); per scope the span fields
are pulled with list comprehensions into an `arrow_batch.ColumnBatch` (dictionary-encoded maps,
vectorised checks). A message that holds anything the fast path does not take as-is (empty ids,
end before start, non-scalar attribute values are fine; unknown enums, bad id lengths are not) is
re-decoded by `otlp_proto`'s reference decoder, which names the message and byte offset.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterator
from typing import Any, BinaryIO

import pyarrow as pa
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from opentelemetry.proto.common.v1 import common_pb2
from opentelemetry.proto.resource.v1 import resource_pb2
from opentelemetry.proto.trace.v1 import trace_pb2

from ingest import anyvalue as av
from ingest import otlp_json, otlp_proto
from ingest.arrow_batch import ArrowSpans, ColumnBatch
from ingest.columns import EMPTY_LIST, SpanColumns, events_json, links_json
from ingest.compression import ZSTD_MAGIC
from ingest.errors import DecodeError

BLOCK_BYTES = 8 << 20
OnBad = Callable[[DecodeError], None] | None

# Fields the fast path reads as their raw encoded bytes: equal bytes are equal values, so each
# distinct resource, scope and attribute list is parsed (with the official classes) once per batch.
_AS_BYTES = {
    ("ResourceSpans", "resource"),
    ("ScopeSpans", "scope"),
    ("Span", "attributes"),
    ("Span", "events"),
    ("Span", "links"),
    ("Span", "status"),
}
_OFFICIAL = ".opentelemetry.proto.trace.v1."
_SHADOW = "tailscope.shadow.trace.v1"


def _shadow_traces_data() -> Any:
    """TracesData from a copy of the official trace.proto descriptor in which the fields above are
    declared `bytes` (wire-compatible: both are length-delimited). upb still does all the parsing."""
    proto = descriptor_pb2.FileDescriptorProto()
    trace_pb2.DESCRIPTOR.CopyToProto(proto)
    proto.name = "tailscope/shadow/trace.proto"
    proto.package = _SHADOW

    def retarget(message: Any) -> None:
        for field in message.field:
            if (message.name, field.name) in _AS_BYTES:
                field.type = descriptor_pb2.FieldDescriptorProto.TYPE_BYTES
                field.ClearField("type_name")
            elif field.type_name.startswith(_OFFICIAL):
                field.type_name = f".{_SHADOW}." + field.type_name[len(_OFFICIAL) :]
        for nested in message.nested_type:
            retarget(nested)

    for message in proto.message_type:
        retarget(message)
    pool = descriptor_pool.Default()
    try:
        pool.FindFileByName(proto.name)
    except KeyError:
        pool.Add(proto)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{_SHADOW}.TracesData"))


_TRACES_DATA = _shadow_traces_data()
_KEY_VALUE = common_pb2.KeyValue.FromString
_RESOURCE = resource_pb2.Resource.FromString
_SCOPE = common_pb2.InstrumentationScope.FromString
_EVENT = trace_pb2.Span.Event.FromString
_LINK = trace_pb2.Span.Link.FromString
_STATUS = trace_pb2.Status.FromString
_SPAN_FIELDS = operator.attrgetter(
    "trace_id", "span_id", "parent_span_id", "trace_state", "name", "kind", "start_time_unix_nano",
    "end_time_unix_nano", "status", "attributes", "events", "links",
)  # fmt: skip


def _pair(kv: Any) -> tuple[str, str]:
    """One KeyValue as (key, stored value text)."""
    value = kv.value
    which = value.WhichOneof("value")
    if which == "string_value":
        return kv.key, value.string_value
    if which == "int_value":
        return kv.key, str(value.int_value)
    return kv.key, av.proto_value_string(value)


def _attributes(items: Any) -> dict[str, str]:
    return dict(map(_pair, items))  # a repeated key: the last one wins, as in the reference decoder


class _ProtoBatch(ColumnBatch):
    """A ColumnBatch filled from TracesData messages (resources, scopes and attribute lists keyed by
    their encoded bytes)."""

    def __init__(self) -> None:
        super().__init__()
        self.scope_bytes: dict[bytes, int] = {}
        self.statuses: dict[bytes, tuple[int, str]] = {b"": (0, "")}
        self.pairs: dict[bytes, tuple[str, str]] = {}  # encoded KeyValue -> (key, value text)

    def add_message(self, number: int, payload: bytes) -> bool:
        """Add one message's spans; False (and nothing added) when it needs the reference decoder."""
        size = len(self.span_id)
        try:
            if payload[:4] == ZSTD_MAGIC or payload[:1] == b"{":
                return False
            message = _TRACES_DATA.FromString(payload)
            scopes = self.scope_bytes
            for rs in message.resource_spans:
                raw = rs.resource
                resource = self.resource_index(
                    raw, lambda raw=raw: _attributes(_RESOURCE(raw).attributes), otlp_json.UNKNOWN_SERVICE
                )
                for ss in rs.scope_spans:
                    spans = ss.spans
                    count = len(spans)
                    if not count:
                        continue
                    scope_index = scopes.get(ss.scope)
                    if scope_index is None:
                        scope = _SCOPE(ss.scope)
                        scope_index = scopes[ss.scope] = self.scope_index(scope.name, scope.version)
                    self.span_line += [number] * count
                    self.resource += [resource] * count
                    self.scope += [scope_index] * count
                    self._add_spans(spans, count)
        except Exception:  # any surprise: the reference decoder names it properly
            self.truncate(size)
            return False
        if len(self.span_id) > size:
            self.lines.append((number, payload))
        return True

    def _add_spans(self, spans: Any, count: int) -> None:
        """One scope's spans, field by field: one C-level pass reads every field of every span."""
        (
            trace_ids,
            span_ids,
            parents,
            states,
            names,
            kinds,
            starts,
            ends,
            statuses,
            attributes,
            events,
            links,
        ) = zip(*map(_SPAN_FIELDS, spans), strict=True)
        self.trace_id += map(bytes.hex, trace_ids)
        self.span_id += map(bytes.hex, span_ids)
        self.parent += map(bytes.hex, parents)
        self.trace_state += states
        self.name += names
        self.kind += kinds
        self.start += starts
        self.end += ends
        if any(statuses):
            known = self.statuses
            for raw in set(statuses).difference(known):
                status = _STATUS(raw)
                known[raw] = (status.code, status.message)
            pairs = [known[raw] for raw in statuses]
            self.status += [pair[0] for pair in pairs]
            self.message += [pair[1] for pair in pairs]
        else:
            self.status += [0] * count
            self.message += [""] * count
        get = self.attribute_keys.get
        for key in map(tuple, attributes):
            index = get(key)
            if index is None:
                index = self.new_attributes(key, self._span_attributes(key))
            self.attributes.append(index)
        self.events += [e or None for e in events]
        self.links += [link or None for link in links]

    def _span_attributes(self, encoded: tuple[bytes, ...]) -> dict[str, str]:
        """A span's attribute list from its encoded KeyValues, each distinct one parsed once per batch
        (lists that differ in one value share the others)."""
        pairs = self.pairs
        out = {}
        for raw in encoded:
            pair = pairs.get(raw)
            if pair is None:
                pair = pairs[raw] = _pair(_KEY_VALUE(raw))
            out[pair[0]] = pair[1]
        return out

    def events_array(self) -> pa.Array:
        values = [
            EMPTY_LIST
            if events is None
            else events_json(
                [
                    (e.time_unix_nano, e.name, _attributes(e.attributes))
                    for e in map(_EVENT, events)
                    if e.time_unix_nano <= av.INT64_MAX or _raise("event time out of range")
                ]
            )
            for events in self.events
        ]
        return pa.array(values, pa.string())

    def links_array(self) -> pa.Array:
        values = [
            EMPTY_LIST
            if links is None
            else links_json(
                [
                    (
                        av.id_from_bytes(link.trace_id, 16, "link trace_id"),
                        av.id_from_bytes(link.span_id, 8, "link span_id"),
                        link.trace_state,
                        _attributes(link.attributes),
                    )
                    for link in map(_LINK, links)
                ]
            )
            for links in self.links
        ]
        return pa.array(values, pa.string())


def _raise(message: str) -> bool:
    raise ValueError(message)


def read_message_blocks(stream: BinaryIO, source: str) -> Iterator[list[tuple[int, int, bytes]]]:
    """Groups of (message number, byte offset, payload) of about BLOCK_BYTES each."""
    group: list[tuple[int, int, bytes]] = []
    size = 0
    for message in otlp_proto.read_messages(stream, source):
        group.append(message)
        size += len(message[2])
        if size >= BLOCK_BYTES:
            yield group
            group, size = [], 0
    if group:
        yield group


def decode_messages(
    messages: list[tuple[int, int, bytes]], source: str, on_bad: OnBad
) -> Iterator[ArrowSpans | SpanColumns]:
    """A group of messages: the fast path, then the reference decoder for those it passed on."""
    batch = _ProtoBatch()
    slow = []
    for number, _, payload in messages:
        if not batch.add_message(number, payload):
            slow.append(number)
    if len(batch):
        table, rejected = batch.finish()
        if table is not None and len(table):
            yield table
        slow.extend(number for number, _ in rejected)
    if slow:
        wanted = set(slow)
        yield from otlp_proto.decode_payloads([m for m in messages if m[0] in wanted], source, on_bad)


def decode_request(body: bytes) -> ArrowSpans | SpanColumns | None:
    """One OTLP/HTTP protobuf body through the fast path (the receiver's); None when any of it needs
    the reference decoder (a body that does not parse, a span it would reject or synthesise ids for),
    which then says what is wrong and rejects only the bad spans."""
    batch = _ProtoBatch()
    if not batch.add_message(1, body):
        return None
    if not len(batch):
        return SpanColumns()
    table, passed_on = batch.finish()
    return None if table is None or passed_on else table


def decode(stream: BinaryIO, source: str, on_bad: OnBad = None) -> Iterator[ArrowSpans | SpanColumns]:
    """A length-prefixed protobuf stream → Arrow batches (and SpanColumns for passed-on messages)."""
    for group in read_message_blocks(stream, source):
        yield from decode_messages(group, source, on_bad)
