"""TorchServe's per-request metrics log: one span per request id, HandlerTime as model_forward."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from ingest import detect, torchserve_log
from ingest.errors import DecodeError
from ingest.loader import load_paths
from tailscope.analysis import Filter, waterfall
from tailscope.store.duckdb.connection import connect_reader
from tailscope.store.duckdb.store import DuckDBStore as Store

FIXTURE = Path(__file__).parent / "fixtures" / "frameworks" / "torchserve_model_metrics.log"
LINE = (
    "2022-08-26T03:42:59,892 [INFO ] W-9001-second-resnet-18_1.0-stdout MODEL_METRICS - "
    "{metric}|#ModelName:second-resnet-18,Level:Model|#hostname:ip-1,requestID:{rid},timestamp:1661485379"
)
RID = "a93cb112-7344-48da-8800-506628631f4e"


def decode(text: str, on_bad=None) -> dict:
    batches = list(torchserve_log.decode(io.BytesIO(text.encode()), "model_metrics.log", on_bad))
    return {k: v for b in batches for k, v in b.to_arrow().to_pydict().items()} if batches else {}


def test_one_span_per_request_ending_at_its_line() -> None:
    text = "\n".join(
        [
            "2022-08-26T03:42:59,878 [INFO ] W-9001 MODEL_LOG - Backend received inference at: 1661485379",
            LINE.format(metric="HandlerTime.Milliseconds:12.95", rid=RID),
            LINE.format(metric="PredictionTime.Milliseconds:12.99", rid=RID),
            LINE.format(metric="ImageSize.Kilobytes:88|", rid=RID).replace("|#ModelName", "#ModelName", 1),
        ]
    )
    assert detect.detect(text.encode()) == "torchserve_log"
    cols = decode(text, on_bad=lambda e: None)
    assert cols["TraceId"] == [RID.replace("-", "")] and cols["SpanName"] == ["second-resnet-18"]
    assert cols["Duration"] == [12_990_000]
    assert cols["Timestamp"][0].value + 12_990_000 == 1661485379_892_000_000  # ends at the line's time
    attributes = json.loads(cols["SpanAttributes"][0])
    assert attributes["torchserve.HandlerTime"] == "12.95" and attributes["request_id"] == RID


def test_a_metric_line_that_does_not_parse_is_named() -> None:
    text = LINE.format(metric="HandlerTime.Milliseconds:abc", rid=RID).replace(":abc|#", ":|#")
    with pytest.raises(DecodeError, match=r"^model_metrics.log: line 1: a metric line that does not parse$"):
        decode(text)


def test_the_fixture_handler_time_is_model_forward(tmp_path) -> None:
    db = tmp_path / "store.duckdb"
    summary = load_paths([FIXTURE], db, "torchserve")
    assert not [f.error for f in summary.files if f.error]
    with connect_reader(db) as conn:
        assert conn.execute("SELECT SpanCount, TraceCount FROM runs").fetchone() == (20, 20)
        ratio = conn.execute("SELECT min(model_forward_ns::DOUBLE / Duration) FROM requests").fetchone()[0]
    assert ratio > 0.99  # the handler is all of a prediction but ~0.05 ms
    tail = {s.stage: s for s in waterfall(Store(db), Filter(run="torchserve"), "p90").stages}
    assert tail["model_forward"].tail_excess_share > 0.99 and tail["model_forward"].mean_ms > 80


def test_a_batch_line_names_every_request_of_the_batch() -> None:
    other = "0c0a33e1-53a2-4f65-b0b7-1d2bb55b9f36"
    text = LINE.format(metric="HandlerTime.ms:40.5", rid=f"{RID},{other}")
    cols = decode(text)
    assert sorted(cols["TraceId"]) == sorted([RID.replace("-", ""), other.replace("-", "")])
    assert cols["Duration"] == [40_500_000, 40_500_000]
