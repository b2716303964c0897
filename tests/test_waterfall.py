"""Waterfall, overview and the other views on small hand-built runs, and their empty results."""

from __future__ import annotations

import json
import random

import pytest
from analysis_spans import S, SpanColumns, add_rootless_trace, add_trace, load

from tailscope.analysis import (
    BANDS,
    Filter,
    heatmap,
    overview,
    slowest_traces,
    tail_vs_body,
    trace_gantt,
    waterfall,
)
from tailscope.store.duckdb.store import DuckDBStore as Store


@pytest.fixture(scope="module")  # the tests below only read it: built once for the file
def store(tmp_path_factory):
    db_path = tmp_path_factory.mktemp("waterfall") / "store.duckdb"
    rnd = random.Random(7)
    cols = SpanColumns()
    for i in range(400):
        slow = i % 50 == 0
        forward = 20 + rnd.random() * 5 + (100 if slow else 0)
        hit = "false" if slow else "true"
        add_trace(
            cols,
            S(
                "POST /v1/predict",
                0,
                forward + 15,
                kind="Server",
                children=[
                    S("parse_request", 0, 5),
                    S("feature_hydration", 5, 10, attrs={"cache.hit": hit}),
                    S("model.forward", 10, 10 + forward),
                    S("serialize_response", 10 + forward, 14 + forward),
                ],
            ),
            i + 1,
            offset_ms=i * 10,
        )
    load(db_path, "run1", cols)
    return Store(db_path)


@pytest.mark.parametrize("band", BANDS)
def test_band_means_add_up_to_the_band_mean_latency(store, band):
    result = waterfall(store, Filter(run="run1"), band)
    assert result.requests_in_band > 0
    assert sum(s.mean_ms for s in result.stages) == pytest.approx(result.band_mean_ms, rel=1e-9)


@pytest.mark.parametrize("band", ["p90", "p99", "p99.9"])
def test_tail_excess_shares_sum_to_one(store, band):
    result = waterfall(store, Filter(run="run1"), band)
    shares = [s.tail_excess_share for s in result.stages]
    assert None not in shares
    assert sum(shares) == pytest.approx(1.0)
    assert max(result.stages, key=lambda s: s.tail_excess_share).stage == "model_forward"


def test_overview_names_the_stage_that_dominates_the_tail(store):
    (run,) = overview(store, Filter()).runs
    assert run.requests == 400
    assert run.tail_stage == "model_forward"
    assert run.p50_ms < run.p99_ms


def test_tail_vs_body_ranks_the_cache_miss_first(store):
    result = tail_vs_body(store, Filter(run="run1"), tail_quantile=0.98)
    top = result.attributes.iloc[0]
    assert (top["key"], top["value"]) == ("cache.hit", "false")
    assert result.stages.iloc[0]["stage"] == "model_forward"


def test_slowest_trace_gantt_marks_the_critical_path(store):
    slow = slowest_traces(store, Filter(run="run1"), 3)
    assert list(slow["duration_ms"]) == sorted(slow["duration_ms"], reverse=True)
    gantt = trace_gantt(store, slow["trace_id"][0])
    spans = gantt.spans.set_index("name")
    assert spans.loc["model.forward", "critical"]
    assert spans.loc["model.forward", "duration_pct_rank"] > 95
    assert gantt.spans["exclusive_ms"].sum() == pytest.approx(gantt.duration_ms)


def test_heatmap_counts_every_request(store):
    result = heatmap(store, Filter(run="run1"), time_bins=10)
    assert result.cells["count"].sum() == 400
    assert (result.lines["p99_ms"] >= result.lines["p50_ms"]).all()


@pytest.mark.parametrize("spans", [0, 1])
def test_empty_and_one_span_stores_give_reasons_not_errors(db_path, spans):
    cols = SpanColumns()
    if spans:
        add_trace(cols, S("lonely", 0, 3, kind="Internal"), 1)
    load(db_path, "r", cols)
    store = Store(db_path)
    flt = Filter(run="r")
    assert waterfall(store, flt).band_mean_ms == (3.0 if spans else None)
    expected = "no run 'nope' in the store" if spans else "the store is empty"
    assert overview(store, Filter(run="nope")).reason.startswith(expected)
    assert heatmap(store, Filter(run="nope")).cells.empty
    assert tail_vs_body(store, flt).reason
    assert trace_gantt(store, "f" * 32).reason
    assert slowest_traces(store, Filter(run="nope")).empty


def test_run_without_roots_says_so(db_path):
    cols = SpanColumns()
    add_rootless_trace(cols)
    load(db_path, "r", cols)
    result = waterfall(Store(db_path), Filter(run="r"))
    assert result.stages == []
    assert "no request root" in result.reason


def test_cli_waterfall_table_json_and_unknown_run(store, capsys):
    from tailscope.cli.main import main

    assert main(["waterfall", "--db", str(store.path), "--band", "p99"]) == 0
    out = capsys.readouterr().out
    assert "model_forward" in out and "do not add up" in out
    assert main(["waterfall", "--db", str(store.path), "--run", "run1", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert sum(s["mean_ms"] for s in data["stages"]) == pytest.approx(data["band_mean_ms"])
    assert main(["waterfall", "--db", str(store.path), "--run", "nope"]) == 2
    assert "runs in" in capsys.readouterr().err
