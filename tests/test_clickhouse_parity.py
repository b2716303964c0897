"""Same answers on both engines: the same traces loaded into DuckDB and into chdb (the ClickHouse engine
in-process) give the same derived requests and the same views: counts exact, percentiles identical
(one quantile definition: exact order statistics, interpolated in Python as DuckDB's quantile_cont
does), shares within 1e-9.

Runs: hand-built traces with parallel and overlapping branches (the sweep), and simulated runs of the
reference pipeline (several scenarios and topologies). chdb holds one data folder per process, so one
module-scoped store serves every test here and is closed at the end."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from analysis_spans import S, add_trace

from ingest.columns import SpanColumns
from tailscope.analysis.derive import refresh_run
from tailscope.query.clickhouse import RunSelection
from tailscope.store import ch_write
from tailscope.store.clickhouse import ClickHouseStore
from tailscope.store.db import Store, connect_writer
from tailscope.store.engine import open_store

pytest.importorskip(
    "chdb", reason="chdb not installed (the [clickhouse] extra): no ClickHouse engine to compare"
)
simulate_api = pytest.importorskip("reference_pipeline.simulate.api")

# run label -> (scenario, requests, seed, options)
SIMULATED: dict[str, tuple[str, int, int, dict[str, Any]]] = {
    "steady": ("steady", 600, 1, {}),
    "burst": ("burst", 600, 2, {}),
    "lock": ("lock-contention", 600, 3, {}),
    "gateway": ("steady", 400, 4, {"topology": "gateway"}),
    "alt-slow": ("slow-downstream", 400, 5, {"naming": "alt"}),
}


def _hand_built() -> list[pa.Table]:
    """Traces whose branches run in parallel or overlap, nest, outlast their parent, or carry an
    explicit stage: every path of the span tree, the sweep included."""
    cols = SpanColumns()
    for i in range(40):
        jitter = (i % 7) * 1.5
        add_trace(
            cols,
            S(
                "POST /predict",
                0,
                100 + jitter,
                kind="Server",
                attrs={"http.route": "/predict", "http.status_code": "503" if i % 9 == 0 else "200"},
                children=[
                    S("feature lookup", 5, 30, kind="Client", attrs={"db.system": "redis"}),
                    S("embed", 20, 45 + jitter),  # overlaps the lookup
                    S("model.forward", 40, 90, children=[S("onnx run", 45, 95 + jitter)]),  # outlasts
                    S("custom", 60, 70, stage="serialization"),
                    S("helper", 92, 99),  # no rule: a direct child of the root
                ],
            ),
            i + 1,
            offset_ms=i * 50,
        )
    return [cols.to_arrow()]


def _simulated(scenario: str, requests: int, seed: int, options: dict[str, Any]) -> list[pa.Table]:
    naming = options.pop("naming", "reference")
    batches = simulate_api.simulate_columns(scenario, requests, seed, naming=naming, **options)
    return [batch.to_arrow() for batch in batches]


@pytest.fixture(scope="module")
def runs() -> dict[str, list[pa.Table]]:
    loaded = {"hand": _hand_built()}
    for run, (scenario, requests, seed, options) in SIMULATED.items():
        loaded[run] = _simulated(scenario, requests, seed, dict(options))
    return loaded


@pytest.fixture(scope="module")
def stores(
    runs: dict[str, list[pa.Table]], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Store, ClickHouseStore]]:
    folder: Path = tmp_path_factory.mktemp("parity")
    with connect_writer(folder / "store.duckdb") as writer:
        for run, batches in runs.items():
            for batch in batches:
                conn = writer.cursor()  # a fresh cursor: nothing pending on it
                conn.register("parity_batch", batch)
                conn.execute("INSERT INTO otel_traces SELECT *, ? FROM parity_batch", [run]).fetchall()
                conn.unregister("parity_batch")
            refresh_run(writer.cursor(), run)
    clickhouse = open_store(f"chdb://{folder / 'chdb'}")
    assert isinstance(clickhouse, ClickHouseStore)
    clickhouse.create_tables()
    for run, batches in runs.items():
        bounds = [ch_write.append_spans(clickhouse, batch, run) for batch in batches]
        selection = RunSelection(min(b[0] for b in bounds), max(b[1] for b in bounds), {"tailscope.run": run})
        ch_write.define_run(clickhouse, run, selection)
        ch_write.refresh_run(clickhouse, run)
    yield Store(folder / "store.duckdb"), clickhouse
    clickhouse.close()


REQUEST_COLUMNS = (
    "RunLabel, TraceId, SpanId, ServiceName, Route, Instance, Duration, IsError, ClientDuration, "
    "SpanCount, DominantStage, ingress_ns, queue_ns, parsing_ns, feature_hydration_ns, preprocessing_ns, "
    "model_forward_ns, postprocessing_ns, downstream_ns, serialization_ns, unattributed_ns"
)


@pytest.mark.parametrize("run", ["hand", *SIMULATED])
def test_derived_requests_are_identical(stores: tuple[Store, ClickHouseStore], run: str) -> None:
    duck, clickhouse = stores
    columns = REQUEST_COLUMNS
    # (fixed column list; the run is a parameter on both engines)
    expected = duck.query(f"SELECT {columns} FROM requests WHERE RunLabel = ? ORDER BY TraceId", [run]).rows
    got = clickhouse.query(
        f"SELECT {columns} FROM tailscope_requests WHERE RunLabel = {{run:String}} ORDER BY TraceId",
        {"run": run},
    ).rows
    assert len(expected) > 0
    assert len(got) == len(expected)
    assert got == expected


def test_hand_built_traces_take_the_sweep(stores: tuple[Store, ClickHouseStore]) -> None:
    # the lookup (5-30 ms) overlaps the embedding for 10 ms: the sweep gives each half of the overlap,
    # so the lookup keeps 20 ms, not its whole 25 ms; guards that the comparison covers the sweep
    _, clickhouse = stores
    values = clickhouse.query(
        "SELECT DISTINCT feature_hydration_ns FROM tailscope_requests WHERE RunLabel = 'hand'"
    ).rows
    assert values == [(20_000_000,)]
