"""Each serving framework's fixture, in its real shape, ingests and its stages add up to every
request's duration; unattributed is only what the framework does not account for; the slow requests'
excess lands in the stage the fixture planted it in."""

from __future__ import annotations

from pathlib import Path

import pytest

from ingest.loader import load_paths
from tailscope.analysis import Filter, waterfall
from tailscope.store.duckdb.connection import connect_reader
from tailscope.store.duckdb.store import DuckDBStore as Store

FIXTURES = Path(__file__).parent / "fixtures" / "frameworks"
CASES = [
    # file, spans, requests, stage carrying the tail, most unattributed share of any request
    ("vllm_otlp.json", 24, 24, "queue", 0.02),
    ("tgi_otlp.json", 32, 16, "model_forward", 0.05),
    ("triton_trace.json", 28, 20, "queue", 0.10),
    ("rayserve_spans.json", 80, 20, "queue", 0.15),
    ("torchserve_model_metrics.log", 20, 20, "model_forward", 0.01),
    # made independently from the frameworks' sources, without the rules in view (independent/README.md)
    ("independent/vllm_otlp.json", 32, 32, "queue", 0.02),
    ("independent/triton_otel_otlp.json", 108, 30, "queue", 0.06),
    ("independent/triton_trace.json", 44, 30, "queue", 0.05),
    ("independent/tgi_otlp.json", 281, 20, "model_forward", 0.01),
    ("independent/ray_serve_otlp.json", 100, 20, "queue", 0.05),
    ("independent/torchserve_model_metrics.log", 13, 13, "model_forward", 0.05),
]
STAGE_SUM = (
    "ingress_ns + queue_ns + parsing_ns + feature_hydration_ns + preprocessing_ns + model_forward_ns"
    " + postprocessing_ns + downstream_ns + serialization_ns + unattributed_ns"
)


@pytest.mark.parametrize(("name", "spans", "requests", "tail_stage", "unattributed"), CASES)
def test_framework_fixture(tmp_path, name, spans, requests, tail_stage, unattributed) -> None:
    db = tmp_path / "store.duckdb"
    summary = load_paths([FIXTURES / name], db, "fw")
    assert not [f.error for f in summary.files if f.error]
    with connect_reader(db) as conn:
        stored = conn.execute("SELECT count(*) FROM otel_traces").fetchone()[0]
        n, adds_up, worst = conn.execute(
            f"SELECT count(*), bool_and({STAGE_SUM} = Duration), max(unattributed_ns::DOUBLE / Duration) "
            "FROM requests"
        ).fetchone()
    assert (stored, n) == (spans, requests) and adds_up
    assert worst < unattributed
    tail = max(waterfall(Store(db), Filter(run="fw"), "p90").stages, key=lambda s: s.tail_excess_share or -1)
    assert tail.stage == tail_stage
