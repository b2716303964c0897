"""Property-based tests of every decoder (hypothesis).

1. Round trip: any generated set of spans, written as OTLP JSON (camelCase or snake_case, hex of
   either case or base64 ids, ints as strings or numbers, enums as ints or names; one document,
   JSON lines or an array), as OTLP protobuf (raw or length-prefixed), as Jaeger UI JSON and as
   Zipkin v2 JSON, decodes to the same normalised spans (what each format can carry of them).
   Files are routed by `ingest.detect`, as the loader routes them.
2. Robustness: arbitrary bytes, arbitrary JSON values and valid exports with one value replaced by an
   arbitrary JSON value never make a decoder raise anything but DecodeError.
"""

from __future__ import annotations

import io
import json
import struct
from typing import Any

import pyarrow as pa
import pytest
from generated_exports import (
    JsonStyle,
    Span,
    expected_jaeger,
    expected_otlp,
    expected_zipkin,
    otlp_json_request,
    span_sets,
    write_jaeger,
    write_otlp_json,
    write_otlp_proto,
    write_zipkin,
)
from hypothesis import HealthCheck, Phase, assume, given, settings
from hypothesis import strategies as st

from ingest import detect, jaeger, otlp_fast, otlp_json, otlp_proto, zipkin
from ingest.errors import DecodeError

SETTINGS = settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)
# No shrinking for the fuzzers: a failure is reported as found, in a second, instead of minutes.
FUZZ = settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    phases=[Phase.explicit, Phase.reuse, Phase.generate],
)


def arrow_rows(table: pa.Table) -> list[dict[str, Any]]:
    """A decoded batch (SpanColumns or the fast path's Arrow) as comparable plain rows."""
    columns: dict[str, list[Any]] = {}
    for name in table.column_names:
        column = table.column(name).combine_chunks()
        if pa.types.is_dictionary(column.type):
            column = column.dictionary_decode()
        if name == "Timestamp":
            column = column.cast(pa.int64())
        columns[name] = column.to_pylist()
    rows = []
    for i in range(table.num_rows):
        row = {name: values[i] for name, values in columns.items()}
        for name in ("ResourceAttributes", "SpanAttributes"):  # JSON text, as stored
            row[name] = json.loads(row[name])
        row["Events"] = [(e["Timestamp"], e["Name"], e["Attributes"]) for e in json.loads(row["Events"])]
        row["Links"] = [
            (k["TraceId"], k["SpanId"], k["TraceState"], k["Attributes"]) for k in json.loads(row["Links"])
        ]
        rows.append(row)
    return rows


def decode_file(data: bytes, expect_format: str) -> list[dict[str, Any]]:
    """Route by content as the loader does, decode strictly, return rows sorted by span id."""
    fmt = detect.detect(data[: detect.HEAD_BYTES], "gen")
    assert fmt == expect_format
    decoder = detect.decoder_for(fmt, "gen")
    rows = [row for batch in decoder(io.BytesIO(data), "gen", None) for row in arrow_rows(batch.to_arrow())]
    return sorted(rows, key=lambda r: r["SpanId"])


def by_id(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(rows, key=lambda r: r["SpanId"])


json_styles = st.builds(
    JsonStyle,
    snake=st.booleans(),
    ids=st.sampled_from(["hex", "HEX", "base64"]),
    ints_as_strings=st.booleans(),
    enum_names=st.booleans(),
    shape=st.sampled_from(["document", "lines", "array"]),
)


@SETTINGS
@given(spans=span_sets(), style=json_styles)
def test_otlp_json_round_trips(spans: list[Span], style: JsonStyle) -> None:
    rows = decode_file(write_otlp_json(spans, style), "otlp_json")
    assert rows == by_id([expected_otlp(s) for s in spans])


@SETTINGS
@given(spans=span_sets(), ids=st.sampled_from(["hex", "HEX", "base64"]))
def test_the_fast_json_lines_path_agrees_with_the_model(spans: list[Span], ids: str) -> None:
    data = write_otlp_json(spans, JsonStyle(False, ids, True, False, "lines"))
    rows = [
        row for batch in otlp_fast.decode(io.BytesIO(data), "gen") for row in arrow_rows(batch.to_arrow())
    ]
    assert by_id(rows) == by_id([expected_otlp(s) for s in spans])


@SETTINGS
@given(spans=span_sets(), prefixed=st.booleans())
def test_otlp_protobuf_round_trips(spans: list[Span], prefixed: bool) -> None:
    message = write_otlp_proto(spans).SerializeToString()
    data = struct.pack(">I", len(message)) + message if prefixed else message
    assume(detect.detect(data[: detect.HEAD_BYTES], "gen") == "otlp_proto")
    assert decode_file(data, "otlp_proto") == by_id([expected_otlp(s) for s in spans])


@SETTINGS
@given(spans=span_sets(), wrapped=st.booleans(), short_ids=st.booleans())
def test_jaeger_round_trips(spans: list[Span], wrapped: bool, short_ids: bool) -> None:
    rows = decode_file(write_jaeger(spans, wrapped, short_ids), "jaeger")
    assert rows == by_id([expected_jaeger(s) for s in spans])


@SETTINGS
@given(spans=span_sets())
def test_zipkin_round_trips(spans: list[Span]) -> None:
    rows = decode_file(write_zipkin(spans), "zipkin")
    assert rows == by_id([expected_zipkin(s) for s in spans])


# ----------------------------------------------------------------------------------- robustness

DECODERS = {
    "otlp_json": otlp_json.decode,
    "otlp_fast": otlp_fast.decode,
    "otlp_proto": otlp_proto.decode,
    "jaeger": jaeger.decode,
    "zipkin": zipkin.decode,
}
# Every decoder's batches must also convert to Arrow: a bad value is the decoder's to refuse.
BATCHES_MUST_CONVERT = set(DECODERS)


scalars = st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.text(max_size=10)
json_values = st.recursive(
    scalars | st.floats(allow_nan=False, allow_infinity=False),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)  # fmt: skip


def survives(name: str, data: bytes, on_bad: bool) -> None:
    """Decoding either completes or raises DecodeError; nothing else escapes."""
    reported: list[DecodeError] = []
    try:
        for batch in DECODERS[name](io.BytesIO(data), "fuzz", reported.append if on_bad else None):
            if name in BATCHES_MUST_CONVERT:
                batch.to_arrow()
    except DecodeError as error:
        assert str(error).startswith("fuzz: ")
        assert "\n" not in str(error)
    assert all(isinstance(e, DecodeError) for e in reported)


@pytest.mark.parametrize("name", sorted(DECODERS))
@FUZZ
@given(data=st.binary(max_size=300), on_bad=st.booleans())
def test_arbitrary_bytes_raise_only_decode_errors(name: str, data: bytes, on_bad: bool) -> None:
    survives(name, data, on_bad)


@pytest.mark.parametrize("name", sorted(DECODERS))
@FUZZ
@given(value=json_values, on_bad=st.booleans())
def test_arbitrary_json_values_raise_only_decode_errors(name: str, value: Any, on_bad: bool) -> None:
    survives(name, json.dumps(value).encode(), on_bad)


def _leaves(value: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Paths to every value inside a JSON document (containers included)."""
    paths = [path]
    if isinstance(value, dict):
        for key, inner in value.items():
            paths += _leaves(inner, (*path, key))
    elif isinstance(value, list):
        for index, inner in enumerate(value):
            paths += _leaves(inner, (*path, index))
    return paths


def _replaced(value: Any, path: tuple[Any, ...], new: Any) -> Any:
    if not path:
        return new
    copy = dict(value) if isinstance(value, dict) else list(value)
    copy[path[0]] = _replaced(value[path[0]], path[1:], new)
    return copy


def _valid_document(name: str, spans: list[Span]) -> Any:
    if name == "jaeger":
        return json.loads(write_jaeger(spans, True, False))
    if name == "zipkin":
        return json.loads(write_zipkin(spans))
    return otlp_json_request(spans, JsonStyle(False, "hex", True, False, "document"))


@pytest.mark.parametrize(
    "name",
    [
        "otlp_json",
        "otlp_fast",
        "jaeger",
        "zipkin",
    ],
)
@FUZZ
@given(spans=span_sets(), data=st.data(), on_bad=st.booleans())
def test_a_valid_export_with_one_value_replaced_raises_only_decode_errors(
    name: str, spans: list[Span], data: st.DataObject, on_bad: bool
) -> None:
    document = _valid_document(name, spans)
    path = data.draw(st.sampled_from(_leaves(document)))
    mutated = _replaced(document, path, data.draw(json_values))
    survives(name, json.dumps(mutated).encode() + b"\n", on_bad)
