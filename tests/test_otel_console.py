"""The OpenTelemetry SDK's console exporter JSON (what Ray Serve's tracing writes), and Ray Serve's
spans as stages."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from ingest import detect, otel_console
from ingest.errors import DecodeError
from ingest.loader import load_paths
from tailscope.analysis import Filter, waterfall
from tailscope.store.duckdb.connection import connect_reader
from tailscope.store.duckdb.store import DuckDBStore as Store

RAYSERVE = Path(__file__).parent / "fixtures" / "frameworks" / "rayserve_spans.json"


def console_span(**overrides) -> dict:
    span = {
        "name": "GET /",
        "context": {"trace_id": "0x" + "ab" * 16, "span_id": "0x" + "01" * 8, "trace_state": "[]"},
        "kind": "SpanKind.SERVER",
        "parent_id": None,
        "start_time": "2024-05-28T18:05:04.864137Z",
        "end_time": "2024-05-28T18:05:04.891003Z",
        "status": {"status_code": "ERROR", "description": "boom"},
        "attributes": {"http.status_code": 500, "ratio": 0.5, "tags": ["a", "b"], "ok": False},
        "events": [{"name": "exception", "timestamp": "2024-05-28T18:05:04.890000Z", "attributes": {"n": 1}}],
        "links": [{"context": {"trace_id": "0x" + "cd" * 16, "span_id": "0x" + "02" * 8}, "attributes": {}}],
        "resource": {"attributes": {"service.name": "api", "host.name": "h1"}, "schema_url": ""},
    }
    span.update(overrides)
    return span


def decode(text: str, on_bad=None) -> dict:
    batches = list(otel_console.decode(io.BytesIO(text.encode()), "spans.json", on_bad))
    return {k: v for batch in batches for k, v in batch.to_arrow().to_pydict().items()} if batches else {}


@pytest.mark.parametrize(
    "layout",
    [
        lambda spans: "".join(json.dumps(s, indent=4) + "\n" for s in spans),  # the exporter's own
        lambda spans: "\n".join(json.dumps(s) for s in spans),  # one per line
        lambda spans: json.dumps(spans),  # an array
    ],
)
def test_each_layout_decodes_every_field(layout) -> None:
    child = console_span(
        name="child",
        kind="SpanKind.INTERNAL",
        parent_id="0x" + "01" * 8,
        status={"status_code": "OK"},
        context={"trace_id": "0x" + "ab" * 16, "span_id": "0x" + "03" * 8, "trace_state": "[]"},
        events=[],
        links=[],
    )
    text = layout([console_span(), child])
    assert detect.detect(text.encode()) == "otel_console"
    cols = decode(text)
    assert cols["SpanName"] == ["GET /", "child"]
    assert cols["TraceId"] == ["ab" * 16] * 2 and cols["ParentSpanId"] == ["", "01" * 8]
    assert cols["Duration"][0] == 26_866_000 and cols["ServiceName"][0] == "api"
    assert cols["StatusCode"] == ["Error", "Ok"] and cols["StatusMessage"][0] == "boom"
    attributes = json.loads(cols["SpanAttributes"][0])
    assert attributes == {"http.status_code": "500", "ratio": "0.5", "tags": '["a","b"]', "ok": "false"}
    events = json.loads(cols["Events"][0])
    assert events[0]["Name"] == "exception" and events[0]["Attributes"] == {"n": "1"}
    assert json.loads(cols["Links"][0])[0]["TraceId"] == "cd" * 16


def test_bad_spans_are_named_by_number_and_line() -> None:
    text = (
        json.dumps(console_span(), indent=4)
        + "\n"
        + json.dumps(console_span(start_time="yesterday"), indent=4)
    )
    with pytest.raises(DecodeError, match=r"spans.json: span 2 \(line 51\): start_time 'yesterday'"):
        decode(text)
    bad: list[DecodeError] = []
    assert len(decode(text, bad.append)["SpanName"]) == 1 and len(bad) == 1
    with pytest.raises(DecodeError, match=r"spans.json: line 1 column \d+: invalid JSON"):
        decode('{"name": "x", "context": ')


def test_ray_serve_traces_become_stages(tmp_path) -> None:
    db = tmp_path / "store.duckdb"
    summary = load_paths([RAYSERVE], db, "rayserve")
    assert not [f.error for f in summary.files if f.error]
    with connect_reader(db) as conn:
        spans, traces = conn.execute("SELECT SpanCount, TraceCount FROM runs").fetchone()
        sums = conn.execute(
            "SELECT bool_and(ingress_ns + queue_ns + parsing_ns + feature_hydration_ns + preprocessing_ns"
            " + model_forward_ns + postprocessing_ns + downstream_ns + serialization_ns + unattributed_ns"
            " = Duration) FROM requests"
        ).fetchone()[0]
    assert (spans, traces) == (80, 20) and sums
    tail = {s.stage: s for s in waterfall(Store(db), Filter(run="rayserve"), "p99").stages}
    assert tail["queue"].tail_excess_share > 0.9  # the burst waited for a replica
    body = {s.stage: s.mean_ms for s in waterfall(Store(db), Filter(run="rayserve"), "p50").stages}
    assert body["model_forward"] > 15 and body["queue"] < 2
