"""OTLP protobuf (raw and length-prefixed, per-message zstd), whole-file compression and bombs,
format detection."""

from __future__ import annotations

import base64
import gzip
import io
import json

import pytest
import zstandard
from google.protobuf import json_format
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
from opentelemetry.proto.trace.v1 import trace_pb2

from ingest import compression, detect, otlp_proto
from ingest.columns import SpanColumns
from ingest.errors import DecodeError
from tests.test_ingest_json import PARENT, SPAN, TRACE, request, span


def protojson(value: object) -> object:
    """OTLP/JSON (hex ids) → protojson (base64 ids), which json_format.Parse reads."""
    if isinstance(value, dict):
        return {
            k: base64.b64encode(bytes.fromhex(v)).decode() if k in _ID_KEYS and v else protojson(v)
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [protojson(item) for item in value]
    return value


_ID_KEYS = ("traceId", "spanId", "parentSpanId")


def parse(req: dict, into: object) -> object:
    return json_format.Parse(json.dumps(protojson(req)), into)


def message(*spans: dict) -> bytes:
    return parse(request(*spans), trace_pb2.TracesData()).SerializeToString()


def prefixed(*payloads: bytes) -> bytes:
    return b"".join(len(p).to_bytes(4, "big") + p for p in payloads)


def decode(data: bytes, on_bad=None) -> SpanColumns:
    out = SpanColumns()
    for batch in otlp_proto.decode(io.BytesIO(data), "t.pb", on_bad):
        out.extend(batch)
    return out


def test_raw_message_decodes_every_field() -> None:
    data = message(
        span(
            links=[{"traceId": TRACE, "spanId": PARENT}],
            events=[{"timeUnixNano": "1544712660500000000", "name": "gc"}],
        )
    )
    [row] = decode(data).rows()
    assert (row["trace_id"], row["span_id"], row["parent_span_id"]) == (TRACE, SPAN, PARENT)
    assert (row["span_kind"], row["status_code"], row["status_message"]) == ("Server", "Error", "boom")
    assert row["span_attributes"] == {"batch.size": "8"} and row["service_name"] == "api"
    assert row["events"] == [(1544712660500000000, "gc", {})]
    assert row["links"] == [(TRACE, PARENT, "", {})]
    assert row["duration_ns"] == 1_000_000_000


def test_proto_and_json_decoders_agree() -> None:
    from ingest import otlp_json

    req = request(
        span(
            attributes=[
                {"key": "d", "value": {"doubleValue": 0.25}},
                {"key": "b", "value": {"bytesValue": "AQID"}},
                {"key": "a", "value": {"arrayValue": {"values": [{"intValue": "1"}, {"stringValue": "x"}]}}},
                {
                    "key": "m",
                    "value": {"kvlistValue": {"values": [{"key": "k", "value": {"boolValue": False}}]}},
                },
            ]
        )
    )
    from_json = otlp_json.decode_request(json.dumps(req).encode(), "j").rows()
    from_proto = otlp_proto.decode_request(
        message(*req["resourceSpans"][0]["scopeSpans"][0]["spans"]), "p"
    ).rows()
    assert from_json == from_proto


def test_length_prefixed_stream_and_export_request_type() -> None:
    export = parse(request(span(spanId=PARENT)), trace_service_pb2.ExportTraceServiceRequest())
    data = prefixed(message(span()), export.SerializeToString(), message(span(spanId="1111111111111111")))
    assert decode(data).span_id == [SPAN, PARENT, "1111111111111111"]


def test_per_message_zstd_of_proto_and_json_payloads() -> None:
    compressor = zstandard.ZstdCompressor()
    data = prefixed(
        compressor.compress(message(span())),
        compressor.compress(json.dumps(request(span(spanId=PARENT))).encode()),
    )
    assert decode(data).span_id == [SPAN, PARENT]


@pytest.mark.parametrize(
    ("data", "position"),
    [
        (prefixed(message(span())) + b"\x00\x00\x01", "message 2 at byte"),
        (prefixed(message(span())) + b"\x00\x00\x00\x50" + b"\x0a\x02", "message 2 at byte"),
        (b"\x0a\xff\xff\xff\x0f", "message 1 at byte 0"),
    ],
    ids=["truncated-prefix", "truncated-message", "garbage"],
)
def test_truncated_or_corrupt_input_is_a_decode_error(data: bytes, position: str) -> None:
    with pytest.raises(DecodeError) as caught:
        decode(data)
    assert caught.value.position.startswith(position)


def test_bad_span_is_rejected_or_skipped() -> None:
    data = prefixed(message(span()), message(span(spanId=PARENT, endTimeUnixNano="1")))
    with pytest.raises(DecodeError, match=r"message 2 at byte .*ends before it starts"):
        decode(data)
    skipped: list[DecodeError] = []
    assert len(decode(data, skipped.append)) == 1 and len(skipped) == 1


def test_decode_request() -> None:
    assert len(otlp_proto.decode_request(message(span(), span(spanId=PARENT)), "req")) == 2
    with pytest.raises(DecodeError, match="req: body"):
        otlp_proto.decode_request(b"\x0a\xff\xff", "req")


@pytest.mark.parametrize("compress", [gzip.compress, zstandard.ZstdCompressor().compress])
def test_whole_file_compression_is_sniffed(compress) -> None:
    raw = io.BufferedReader(io.BytesIO(compress(prefixed(message(span())))))
    stream, kind = compression.open_decompressed(raw, "f", 100)
    assert kind in ("gzip", "zstd")
    assert decode(stream.read()).span_id == [SPAN]


@pytest.mark.parametrize("compress", [gzip.compress, zstandard.ZstdCompressor().compress])
def test_decompression_bombs_stop_with_a_clear_error(compress, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(compression, "ALLOWANCE", 1 << 20)
    bomb = compress(b"\n" * (64 << 20))
    raw = io.BufferedReader(io.BytesIO(bomb))
    stream, _ = compression.open_decompressed(raw, "bomb.gz", len(bomb))
    with pytest.raises(DecodeError, match="decompression bomb"):
        while stream.read(1 << 20):
            pass


def test_corrupt_gzip_is_a_decode_error() -> None:
    data = gzip.compress(b"x" * 10000)[:-30] + b"\x00" * 30
    stream, _ = compression.open_decompressed(io.BufferedReader(io.BytesIO(data)), "c.gz", len(data))
    with pytest.raises(DecodeError, match="corrupt gzip"):
        stream.read()


@pytest.mark.parametrize(
    ("head", "fmt"),
    [
        (b'\xef\xbb\xbf{"resourceSpans": []}', "otlp_json"),
        (b'  {\n "resource_spans": []}', "otlp_json"),
        (b'{"result": {"resourceSpans": []}}', "otlp_json"),
        (b'{"data": [{"traceID": "1", "spans": []}]}', "jaeger"),
        (b'[{"traceId": "1", "id": "2", "name": "x"}]', "zipkin"),
        (b"\x0a\x10", "otlp_proto"),
        (b"\x00\x00\x00\x05\x0a\x03\x0a\x01\x00", "otlp_proto"),
        (b"   \n", None),
    ],
)
def test_detect_by_content(head: bytes, fmt: str | None) -> None:
    assert detect.detect(head, "f") == fmt


@pytest.mark.parametrize("size", [91, 123])
def test_protobuf_whose_first_bytes_read_as_json_is_protobuf(size: int) -> None:
    # TracesData: 0x0A, then the first ResourceSpans' length: 91 is "[", 123 is "{" (found by the
    # property test: a span name that made the message 123 bytes long was refused as "JSON, but...")
    resource_spans = trace_pb2.ResourceSpans()
    resource_spans.scope_spans.add().spans.add(name="x" * (size - 10))
    while resource_spans.ByteSize() < size:
        resource_spans.scope_spans[0].spans[0].name += "x"
    assert resource_spans.ByteSize() == size
    data = trace_pb2.TracesData(resource_spans=[resource_spans]).SerializeToString()
    assert data[:2] in (b"\n[", b"\n{")
    assert detect.detect(data, "f") == "otlp_proto"
    spans = [c for c in otlp_proto.decode(io.BytesIO(data), "f", None)]
    assert sum(len(c) for c in spans) == 1


@pytest.mark.parametrize(
    "head", [b"hello world", b'{"some": "json"}', b'\n{"some": "json"}', b"\n[1, 2, 3]", b"\x89PNG\r\n"]
)
def test_detect_refuses_other_files(head: bytes) -> None:
    with pytest.raises(DecodeError, match="f: byte 0: "):
        detect.detect(head, "f")


def test_fast_protobuf_path_matches_reference_and_passes_on_odd_messages() -> None:
    from ingest import otlp_proto_fast
    from tests.test_ingest_json import _table

    compressor = zstandard.ZstdCompressor()
    data = prefixed(
        message(span(), span(spanId=PARENT, parentSpanId="", status={}, kind=1)),
        message(span(traceId="")),
        compressor.compress(message(span(spanId="2222222222222222"))),
        message(
            span(
                spanId="3333333333333333",
                events=[{"timeUnixNano": "7", "name": "e"}],
                links=[{"traceId": TRACE, "spanId": SPAN, "traceState": "t"}],
            )
        ),
    )
    fast = list(otlp_proto_fast.decode(io.BytesIO(data), "p.pb"))
    reference = list(otlp_proto.decode(io.BytesIO(data), "p.pb"))
    assert any(isinstance(batch, otlp_proto_fast.ArrowSpans) for batch in fast)
    assert _table(fast) == _table(reference)
    bad = prefixed(message(span()), message(span(spanId=PARENT, endTimeUnixNano="1")))
    with pytest.raises(DecodeError, match=r"message 2 at byte \d+: .*ends before it starts"):
        list(otlp_proto_fast.decode(io.BytesIO(bad), "p.pb"))


def test_truncated_zstd_file_is_a_decode_error() -> None:
    data = zstandard.ZstdCompressor().compress(prefixed(message(span())) * 200)
    truncated = data[: len(data) // 2]
    stream, _ = compression.open_decompressed(
        io.BufferedReader(io.BytesIO(truncated)), "t.zst", len(truncated)
    )
    with pytest.raises(DecodeError, match="truncated zstd frame"):
        stream.read()
