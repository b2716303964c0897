"""The slowest-traces list of a large run read above a floor its histogram proves (issue 29):
views.slowest_floor_ns takes the lower edge of the highest e2e bucket that, with the buckets above
it, holds `limit` requests, and request_list.sql skips every request below it; the list is the
exact one. histogram.MIN_REQUESTS is set to 0 (floor read) or 10**12 (no floor) so the small test
runs take both paths."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from tailscope.analysis import histogram, slowest_traces
from tailscope.analysis.histogram import Buckets
from tailscope.analysis.types import Filter
from tailscope.analysis.views import NO_FLOOR_NS, slowest_floor_ns
from tailscope.cli.main import main
from tailscope.store.duckdb.store import DuckDBStore
from tests.run_cache import ingested_copy, simulated_copy


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> DuckDBStore:
    folder = tmp_path_factory.mktemp("slowest")
    path = folder / "store.duckdb"
    # run "a" into the empty store is test_heatmap_histogram's store (the same bytes and label): a copy of
    # the session's one (run_cache.ingested_copy); "b" goes on top of it
    a = simulated_copy(tmp_path_factory, folder / "a.json", "lock-contention", 1500, 3)
    ingested_copy(tmp_path_factory, path, a, "a")
    b = simulated_copy(tmp_path_factory, folder / "b.json", "slow-downstream", 1500, 5)
    assert main(["ingest", str(b), "--db", str(path), "--run", "b"]) == 0
    return DuckDBStore(path)


def test_the_floor_is_the_lower_edge_of_the_bucket_reaching_the_count() -> None:
    buckets = Buckets(np.array([-1, 1000, 1001, 1500]), np.array([5.0, 10.0, 3.0, 2.0]), np.ones(4))
    edge = np.exp(1001 / histogram.BUCKETS_PER_UNIT)
    assert buckets.floor_of_top(2) == int(np.exp(1500 / histogram.BUCKETS_PER_UNIT) * (1 - 1e-9))
    assert edge - 1 <= buckets.floor_of_top(5) <= edge  # 2 + 3 requests at or above bucket 1001
    assert buckets.floor_of_top(6) == int(np.exp(1000 / histogram.BUCKETS_PER_UNIT) * (1 - 1e-9))
    assert buckets.floor_of_top(16) is None  # only the 0-ns bucket brings it to 16
    assert buckets.floor_of_top(21) is None  # more than the run has


def _lists(store: DuckDBStore, flt: Filter, limit: int, monkeypatch: pytest.MonkeyPatch) -> tuple:
    monkeypatch.setattr(histogram, "MIN_REQUESTS", 10**12)
    with store.reading() as conn:
        assert slowest_floor_ns(conn, flt, limit) == NO_FLOOR_NS
        exact = slowest_traces(conn, flt, limit)
    monkeypatch.setattr(histogram, "MIN_REQUESTS", 0)
    with store.reading() as conn:
        floor = slowest_floor_ns(conn, flt, limit)
        got = slowest_traces(conn, flt, limit)
        every_param = ["", None, None, None, None, NO_FLOOR_NS, 10**9]
        everything = conn.run("request_list", every_param, where=flt).df()
    return exact, got, floor, everything


@pytest.mark.parametrize("flt", [Filter(run="a"), Filter(run="b"), Filter()], ids=["a", "b", "all"])
@pytest.mark.parametrize("limit", [1, 7, 50, 400])
def test_the_list_above_the_floor_is_the_exact_list(
    store: DuckDBStore, flt: Filter, limit: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    exact, got, floor, everything = _lists(store, flt, limit, monkeypatch)
    assert len(exact) == limit
    pd.testing.assert_frame_equal(got, exact)
    # the floor is read and skips requests: at or below the limit-th slowest, above most of the run
    durations_ns = everything["duration_ms"] * 1e6
    assert NO_FLOOR_NS < floor <= durations_ns.iloc[limit - 1] + 1
    assert (durations_ns < floor).mean() > 0.5


def test_all_runs_take_the_highest_floor_of_the_runs(
    store: DuckDBStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(histogram, "MIN_REQUESTS", 0)
    with store.reading() as conn:
        floors = [slowest_floor_ns(conn, Filter(run=run), 50) for run in ("a", "b")]
        assert slowest_floor_ns(conn, Filter(), 50) == max(floors)


def test_a_filtered_list_or_more_than_the_run_reads_without_a_floor(
    store: DuckDBStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(histogram, "MIN_REQUESTS", 0)
    with store.reading() as conn:
        route = conn.run("request_list", ["", None, None, None, None, NO_FLOOR_NS, 1], where=Filter(run="a"))
        filtered = Filter(run="a", route=route.df()["route"][0])
        assert slowest_floor_ns(conn, filtered, 5) == NO_FLOOR_NS
        assert slowest_floor_ns(conn, Filter(run="a"), 10**7) == NO_FLOOR_NS
        assert len(slowest_traces(conn, Filter(run="a"), 10**7)) == len(
            slowest_traces(conn, Filter(run="a"), 10**6)
        )
