"""Run comparison: bootstrap intervals, deltas, cost per 1,000 inferences, unknown runs."""

from __future__ import annotations

import json

import numpy as np
import pytest
from analysis_spans import S, SpanColumns, add_trace, insert
from run_cache import cached, copy_store

from tailscope.analysis import compare
from tailscope.analysis.compare import bootstrap_quantile
from tailscope.analysis.costs import cost_per_1k
from tailscope.store.duckdb.connection import connect_writer
from tailscope.store.duckdb.derive import refresh_run
from tailscope.store.duckdb.store import DuckDBStore as Store


def test_order_statistic_bootstrap_matches_naive_resampling():
    rng = np.random.default_rng(1)
    sample = np.sort(rng.lognormal(3, 1, size=2000))
    estimate, fast = bootstrap_quantile(rng.permutation(sample), 0.99, np.random.default_rng(2), 4000)
    assert estimate == np.quantile(sample, 0.99, method="inverted_cdf")
    naive = np.quantile(rng.choice(sample, size=(4000, sample.size)), 0.99, axis=1, method="inverted_cdf")
    assert np.percentile(fast, [2.5, 50, 97.5]) == pytest.approx(
        np.percentile(naive, [2.5, 50, 97.5]), rel=0.05
    )


def test_cost_per_thousand_inferences():
    assert cost_per_1k(3.6, 10.0) == pytest.approx(0.1)
    assert cost_per_1k(None, 10.0) is None
    assert cost_per_1k(1.0, 0.0) is None


def _build(db_path) -> None:
    with connect_writer(db_path) as conn:
        for run, forward in (("a", 20.0), ("b", 30.0)):
            cols = SpanColumns()
            for i in range(300):
                f = forward + (i % 10)
                add_trace(
                    cols,
                    S("root", 0, f + 5, kind="Server", children=[S("model.forward", 5, 5 + f)]),
                    i + 1 + (1000 if run == "b" else 0),
                    offset_ms=i * 100,
                )
            insert(conn, run, cols)
            conn.execute(
                "INSERT INTO runs VALUES (?, [], now(), 0, 0, MAP {'device': ?})", [run, run.upper()]
            )
            refresh_run(conn, run)


@pytest.fixture
def store(db_path, tmp_path_factory):
    """Runs a and b, built once per session (tests/run_cache.py), a copy of the store per test."""
    entry = cached(tmp_path_factory, "compare", (), lambda folder: _build(folder / "store.duckdb"))
    return Store(copy_store(entry, "store.duckdb", db_path))


def test_compare_finds_the_slower_stage_with_intervals(store):
    result = compare(store, "a", "b", price_a_per_hour=1.0, price_b_per_hour=2.0, resamples=500, seed=3)
    rows = {(s.stage, s.quantile): s for s in result.stages}
    forward = rows[("model_forward", 0.5)]
    assert forward.delta_ms == pytest.approx(10.0)
    assert forward.delta_low_ms <= 10.0 <= forward.delta_high_ms
    assert forward.a_low_ms <= forward.a_ms <= forward.a_high_ms
    assert rows[("parsing", 0.99)].delta_ms == 0.0
    assert result.a.throughput_rps == pytest.approx(300 / 29.929, rel=0.01)
    assert result.b.cost_per_1k == pytest.approx(2.0 / 3600 / result.b.throughput_rps * 1000)
    assert result.setup.set_index("key").loc["device"].tolist() == ["A", "B", True]
    again = compare(store, "a", "b", resamples=500, seed=3)
    assert [s.delta_low_ms for s in again.stages] == [s.delta_low_ms for s in result.stages]


def test_unknown_run_lists_the_known_ones(store):
    result = compare(store, "a", "zzz")
    assert result.stages == []
    assert "'zzz'" in result.reason and "a, b" in result.reason


def test_cli_compare_table_json_and_unknown_run(store, capsys):
    from tailscope.cli.main import main

    assert main(["compare", "a", "b", "--db", str(store.path), "--price-a", "1", "--price-b", "2"]) == 0
    out = capsys.readouterr().out
    assert "per 1,000 inferences" in out and "model_forward" in out and "device: A → B" in out
    assert main(["compare", "a", "b", "--db", str(store.path), "--json", "--resamples", "100"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert {s["stage"] for s in data["stages"]} >= {"e2e", "model_forward"}
    assert main(["compare", "a", "nope", "--db", str(store.path)]) == 2
    assert "unknown run 'nope'" in capsys.readouterr().err
