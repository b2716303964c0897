"""`tailscope collect --store chdb:///...`: OTLP/HTTP spans into the exporter's otel_traces, the run
defined as a selection while it receives, its requests derived by time window as spans arrive
(every 2 s) and when it stops."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from receiver_support import STOPPED, Collector, json_request, spans_of

from tailscope.analysis import Filter, overview
from tailscope.store.engine import open_store

pytest.importorskip("chdb", reason="chdb not installed (the [clickhouse] extra)")
BASE = 1_700_000_000_000_000_000


def _root_and_child(trace: int, start: int) -> tuple[bytes, bytes]:
    """A trace of a root (10 ms) and one child, as two requests."""
    trace_id, root_id = f"{trace:032x}", f"{trace:016x}"
    root = json_request("svc", [(trace_id, root_id, "POST /predict", start, start + 10_000_000)])
    child = json_request(
        "svc", [(trace_id, f"{trace + 1000:016x}", "model.forward", start + 1_000_000, start + 9_000_000)]
    )
    return root, child.replace(b'"spanId"', b'"parentSpanId": "' + root_id.encode() + b'", "spanId"')


def test_collect_into_chdb_then_read_the_run(tmp_path: Path) -> None:
    url = f"chdb://{tmp_path / 'chdb'}"
    collector = Collector(tmp_path / "unused.duckdb", "live", "--store", url)
    late_root, late_child = _root_and_child(99, BASE + 5_000_000)
    try:
        assert f"store={url}" in collector.output()
        assert collector.post_until_accepted(late_root, "application/json").status_code == 200
        for trace in range(1, 21):
            spans = spans_of(trace, 3, start=BASE + trace * 10_000_000)
            body = json_request("svc", spans, attrs={"http.route": "/predict"})
            assert collector.post_until_accepted(body, "application/json").status_code == 200
            if trace == 10:
                time.sleep(2.5)  # a derive by time window happens at the next flush
        # the child of trace 99 arrives after its root was derived alone: the window is derived again
        assert collector.post_until_accepted(late_child, "application/json").status_code == 200
        # an exporter's retry of a request it thinks lost: its spans are stored once
        assert collector.post_until_accepted(late_child, "application/json").status_code == 200
    finally:
        code = collector.stop()
    assert code == STOPPED, collector.output()
    assert not (tmp_path / "unused.duckdb").exists()  # --store wins over --db
    store = open_store(url)
    try:
        spans = store.query(
            "SELECT count(), countIf(ResourceAttributes['tailscope.run'] = 'live') FROM otel_traces"
        ).first()
        assert spans == (62, 62)
        # the spans' durations the Gantt ranks against (ch_durations): each span once, retry or not
        durations = "SELECT count() FROM tailscope_span_durations WHERE RunLabel = 'live'"
        assert store.query(durations).single_value() == 62
        summary = overview(store, Filter(run="live")).runs
        assert [run.requests for run in summary] == [21]
        late = store.query(
            "SELECT SpanCount, model_forward_ns FROM tailscope_requests WHERE TraceId = {t:String}",
            {"t": f"{99:032x}"},
        ).rows
        assert late == [(2, 8_000_000)]
    finally:
        store.close()
