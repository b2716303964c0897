"""The engine-parity tests' store pair, built once for this folder: chdb holds one data folder per
process, so one package-scoped pair (the same traces in a DuckDB file and a chdb folder) serves
every test module here and is closed after the last of them."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest
from parity_traces import SIMULATED, WINDOWED, _async_built, _frameworks, _hand_built, _simulated

from tailscope.store.clickhouse import dedupe as ch_dedupe
from tailscope.store.clickhouse import write as ch_write
from tailscope.store.clickhouse.engine import ClickHouseStore
from tailscope.store.clickhouse.statements import RunSelection
from tailscope.store.duckdb.connection import connect_writer
from tailscope.store.duckdb.derive import refresh_run
from tailscope.store.duckdb.store import DuckDBStore as Store
from tailscope.store.engine import open_store


@pytest.fixture(scope="package")
def runs() -> dict[str, list[pa.Table]]:
    loaded = {"hand": _hand_built(), "frameworks": _frameworks(), "async": _async_built()}
    for run, (scenario, requests, seed, options) in SIMULATED.items():
        loaded[run] = _simulated(scenario, requests, seed, dict(options))
    return loaded


@pytest.fixture(scope="package")
def stores(
    runs: dict[str, list[pa.Table]], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Store, ClickHouseStore]]:
    pytest.importorskip("chdb", reason="chdb not installed (the [clickhouse] extra): no ClickHouse engine")
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
        bounds = [ch_dedupe.append_spans_once(clickhouse, batch, run) for batch in batches]
        selection = RunSelection(min(b[0] for b in bounds), max(b[1] for b in bounds), {"tailscope.run": run})
        ch_write.define_run(clickhouse, run, selection)
        # two runs derived in many time windows (the rest in one): the same rows either way
        ch_write.refresh_run(clickhouse, run, part_spans=WINDOWED.get(run, ch_write.PART_SPANS))
    yield Store(folder / "store.duckdb"), clickhouse
    clickhouse.close()
