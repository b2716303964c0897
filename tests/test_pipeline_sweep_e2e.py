"""`tailscope pipeline sweep` end to end on a tiny model: real service processes at saturation, each setup
a labelled run in the store (the plan, prices and table without a service: test_pipeline_sweep.py)."""

from __future__ import annotations

import importlib.util
import json

import duckdb
import pytest

from reference_pipeline import span_model as sm

pytestmark = [
    pytest.mark.torch,
    pytest.mark.skipif(
        importlib.util.find_spec("torch") is None, reason="needs PyTorch: pip install -e '.[pipeline]'"
    ),
    pytest.mark.skipif(importlib.util.find_spec("tokenizers") is None, reason="needs tokenizers"),
]


def query(db, sql: str, params: list) -> list[tuple]:
    with duckdb.connect(str(db), read_only=True) as con:
        return con.execute(sql, params).fetchall()


@pytest.mark.slow
def test_sweep_compares_setups_at_saturation_with_costs(tmp_path, capsys) -> None:
    """A hardware comparison on a tiny model: every setup a labelled run in the store at saturation,
    what the CPU cannot run set aside, the table's numbers as JSON, the price recorded with each run."""
    from tailscope.analysis import run_costs
    from tailscope.cli.main import main
    from tailscope.store.engine import open_store

    db = tmp_path / "store.duckdb"
    argv = ["pipeline", "sweep", "--dtypes", "fp32,int8", "--executors", "torchscript,cuda-graphs"]
    argv += ["--batch-policies", "1:0", "--layers", "0", "--duration", "2", "--no-downstream"]
    argv += ["--frontends", "0", "--price-per-hour", "0.36", "--json"]
    code = main([*argv, "--out-dir", str(tmp_path / "sweep"), "--db", str(db)])
    captured = capsys.readouterr()
    assert code == 0, captured
    rows = {row["label"]: row for row in json.loads(captured.out)}
    ran = ["cpu-fp32-torchscript-b1w0", "cpu-int8-torchscript-b1w0"]
    assert sorted(p.name for p in (tmp_path / "sweep").glob("*.jsonl")) == [f"{r}.jsonl" for r in ran]
    assert rows["cpu-fp32-cuda-graphs-b1w0"]["skipped"] == "CUDA graphs need a CUDA device"
    for label in ran:
        row = rows[label]
        assert row["requests"] > 10 and row["errors"] == 0 and row["throughput_rps"] > 0
        assert row["cost_per_1k"] == pytest.approx(0.36 / 3600 / row["throughput_rps"] * 1000)
    runs = dict(query(db, "SELECT RunLabel, TraceCount FROM runs ORDER BY 1", []))
    assert set(runs) == set(ran) and all(n > 10 for n in runs.values())
    setups = query(
        db,
        """
        SELECT DISTINCT RunLabel, ResourceAttributes->>'tailscope.dtype',
            ResourceAttributes->>'tailscope.model.executor' FROM otel_traces
        WHERE ServiceName = ? ORDER BY 1""",
        [sm.SERVICE_NAME],
    )
    assert setups == [(ran[0], "fp32", "torchscript"), (ran[1], "int8", "torchscript")]
    costs = run_costs(open_store(str(db)), ran).table.set_index("run")  # what the Compare page shows
    assert costs["price_per_hour"].tolist() == [0.36, 0.36]
    assert costs["price_from"].tolist() == ["recorded", "recorded"]
    assert costs["cost_per_1k"].notna().all() and (costs["p99_ms"] > 0).all()
