"""What each run costs (tailscope.analysis.costs, the Compare page's table): throughput, e2e p50/p99
and cost per 1,000 inferences of any number of runs, from the price given or the one the run recorded;
the same on both engines (test_clickhouse_views)."""

from __future__ import annotations

from pathlib import Path

import pytest
from analysis_spans import S, SpanColumns, add_trace, insert
from run_cache import cached, copy_store

from tailscope.analysis import compare, run_costs
from tailscope.analysis.costs import recorded_price
from tailscope.analysis.types import Filter
from tailscope.store.duckdb.connection import connect_writer
from tailscope.store.duckdb.derive import refresh_run
from tailscope.store.duckdb.store import DuckDBStore as Store
from tailscope.vocabulary import PRICE_ATTRIBUTE

# run → (forward ms, requests, ms between request starts, recorded price)
RUNS = {"gpu-b1": (2.0, 200, 10, "3.6"), "gpu-b32": (1.0, 400, 5, "3.6"), "cpu": (40.0, 100, 50, None)}


def _build(db_path: Path) -> None:
    with connect_writer(db_path) as conn:
        for n, (run, (forward, requests, gap_ms, price)) in enumerate(RUNS.items()):
            cols = SpanColumns()
            for i in range(requests):
                f = forward * (1 + (i % 100) / 100)  # p50 ≈ 1.5 × forward, p99 ≈ 2 × forward
                add_trace(
                    cols,
                    S("root", 0, f + 1, kind="Server", children=[S("model.forward", 1, 1 + f)]),
                    i + 1 + 10_000 * n,
                    offset_ms=i * gap_ms,
                )
            insert(conn, run, cols)
            setup = {"tailscope.device": run.split("-")[0], "tailscope.model.executor": "cuda-graphs"}
            if price is not None:
                setup[PRICE_ATTRIBUTE] = price
            conn.execute(
                "INSERT INTO runs VALUES (?, [], now(), 0, 0, MAP(?, ?))",
                [run, list(setup), list(setup.values())],
            )
            refresh_run(conn, run)


@pytest.fixture
def store(db_path, tmp_path_factory):
    """The three runs' store, built once per session (tests/run_cache.py), a copy of it per test."""
    entry = cached(tmp_path_factory, "run_costs", RUNS, lambda folder: _build(folder / "store.duckdb"))
    return Store(copy_store(entry, "store.duckdb", db_path))


def test_each_run_gets_its_throughput_p99_and_cost(store) -> None:
    result = run_costs(store, ["gpu-b1", "gpu-b32", "cpu"], prices={"cpu": 0.36})
    assert result.reason is None and result.missing == []
    rows = result.table.set_index("run")
    assert list(rows.index) == ["gpu-b1", "gpu-b32", "cpu"]  # the order asked for
    # 200 requests starting every 10 ms, the last ending 1990 ms + its 5 ms: 200 / 1.995 s
    assert rows.loc["gpu-b1", "throughput_rps"] == pytest.approx(200 / 1.995, rel=1e-3)
    assert rows.loc["gpu-b32", "throughput_rps"] == pytest.approx(400 / (1.995 + 0.003 - 0.002), rel=1e-2)
    assert rows.loc["gpu-b1", "p99_ms"] == pytest.approx(1 + 2.0 * 1.99, abs=0.02)
    assert rows.loc["cpu", "p50_ms"] == pytest.approx(1 + 40.0 * 1.495, abs=0.5)
    for run in RUNS:
        row = rows.loc[run]
        per_second = row["price_per_hour"] / 3600
        assert row["cost_per_1k"] == pytest.approx(per_second / row["throughput_rps"] * 1000)
    assert rows.loc["gpu-b1", "price_per_hour"] == 3.6 and rows.loc["gpu-b1", "price_from"] == "recorded"
    assert rows.loc["cpu", "price_per_hour"] == 0.36 and rows.loc["cpu", "price_from"] == "given"
    assert rows.loc["gpu-b1", "device"] == "gpu" and rows.loc["cpu", "executor"] == "cuda-graphs"
    assert result.fastest == "gpu-b32"
    assert result.cheapest == "gpu-b32"  # same price, twice the throughput of gpu-b1


def test_a_run_without_a_price_has_no_cost_and_unknown_runs_are_named(store) -> None:
    result = run_costs(store, ["cpu", "nope", "gpu-b1"])
    rows = result.table.set_index("run")
    assert result.missing == ["nope"] and list(rows.index) == ["cpu", "gpu-b1"]
    assert rows["price_per_hour"].isna()["cpu"] and rows["price_from"].isna()["cpu"]
    assert rows["cost_per_1k"].isna()["cpu"] and result.cheapest == "gpu-b1"
    given = run_costs(store, ["gpu-b1"], prices={"gpu-b1": 7.2}).table.iloc[0]
    assert given["price_per_hour"] == 7.2 and given["price_from"] == "given"
    nothing = run_costs(store, ["nope"])
    assert nothing.table.empty and nothing.reason == "no requests in the runs asked for ('nope')"
    narrowed = run_costs(store, ["gpu-b1"], flt=Filter(service="no-such-service"))
    assert narrowed.table.empty and narrowed.missing == ["gpu-b1"]


def test_compare_uses_the_recorded_price_unless_given_one(store) -> None:
    result = compare(store, "gpu-b1", "cpu", resamples=50)
    assert result.a.price_per_hour == 3.6 and result.a.cost_per_1k is not None
    assert result.b.price_per_hour is None and result.b.cost_per_1k is None
    given = compare(store, "gpu-b1", "cpu", price_a_per_hour=1.0, price_b_per_hour=0.5, resamples=50)
    assert (given.a.price_per_hour, given.b.price_per_hour) == (1.0, 0.5)


def test_a_recorded_price_must_be_a_number() -> None:
    assert recorded_price({PRICE_ATTRIBUTE: "2.5"}) == 2.5
    assert recorded_price({PRICE_ATTRIBUTE: "2.5,3.0"}) is None  # two prices in one run: none is its price
    assert recorded_price({PRICE_ATTRIBUTE: "-1"}) is None
    assert recorded_price({}) is None
