"""`tailscope collect --store chdb:///...`: OTLP/HTTP spans into the exporter's otel_traces, the run
defined as a selection while it receives and derived when it stops."""

from __future__ import annotations

from pathlib import Path

import pytest
from receiver_support import STOPPED, Collector, json_request, spans_of

from tailscope.analysis import Filter, overview
from tailscope.store.engine import open_store

pytest.importorskip("chdb", reason="chdb not installed (the [clickhouse] extra)")


def test_collect_into_chdb_then_read_the_run(tmp_path: Path) -> None:
    url = f"chdb://{tmp_path / 'chdb'}"
    collector = Collector(tmp_path / "unused.duckdb", "live", "--store", url)
    try:
        assert f"store={url}" in collector.output()
        for trace in range(1, 21):
            spans = spans_of(trace, 3, start=1_700_000_000_000_000_000 + trace * 10_000_000)
            body = json_request("svc", spans, attrs={"http.route": "/predict"})
            assert collector.post_until_accepted(body, "application/json").status_code == 200
    finally:
        code = collector.stop()
    assert code == STOPPED, collector.output()
    assert not (tmp_path / "unused.duckdb").exists()  # --store wins over --db
    store = open_store(url)
    try:
        spans = store.query(
            "SELECT count(), countIf(ResourceAttributes['tailscope.run'] = 'live') FROM otel_traces"
        ).first()
        assert spans == (60, 60)
        summary = overview(store, Filter(run="live")).runs
        assert [run.requests for run in summary] == [20]
    finally:
        store.close()
