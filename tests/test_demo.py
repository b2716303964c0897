"""`tailscope demo --no-serve`: every demo run lands in the store, and a second call reuses them."""

from __future__ import annotations

from reference_pipeline.simulate.config import SCENARIOS
from tailscope.cli.demo_cmd import demo_runs
from tailscope.cli.main import main
from tailscope.store.duckdb.connection import connect_reader


def test_demo_loads_every_scenario_and_the_hardware_pair_then_reuses_them(tmp_path, capsys) -> None:
    db = tmp_path / "demo.duckdb"
    assert main(["demo", "--db", str(db), "--no-serve", "--requests", "200"]) == 0
    first = capsys.readouterr().out
    with connect_reader(db) as conn:
        runs = dict(conn.execute("SELECT RunLabel, TraceCount FROM runs").fetchall())
        setup = dict(conn.execute("SELECT RunLabel, SetupAttributes FROM runs").fetchall())
    assert {f"demo-{scenario}" for scenario in SCENARIOS} <= set(runs)
    assert {"demo-cpu-fp32", "demo-gpu-bf16", "demo-foreign-names"} <= set(runs)
    assert set(runs) == {run.label for run in demo_runs()}
    assert set(runs.values()) == {200}
    assert setup["demo-gpu-bf16"]["tailscope.device"] == "cuda"
    assert setup["demo-gpu-bf16"]["tailscope.dtype"] == "bf16"
    assert setup["demo-cpu-fp32"]["tailscope.device"] == "cpu"
    assert "demo-burst" in first and "tailscope serve --db" in first

    assert main(["demo", "--db", str(db), "--no-serve"]) == 0
    again = capsys.readouterr().out
    assert "reusing the 12 runs" in again and "demo-burst " not in again
