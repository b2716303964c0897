"""`tailscope whatif`: the table, the JSON a deploy gate reads, and bad input."""

from __future__ import annotations

import json

import pytest

from tailscope.cli.main import main

simulate_api = pytest.importorskip("reference_pipeline.simulate.api")
loader = pytest.importorskip("ingest.loader")


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("whatif")
    out = tmp / "gc.jsonl"
    simulate_api.simulate_to_file(out, "gc-pressure", 1500, 3)
    assert not loader.load_paths([out], tmp / "s.duckdb", "gc").failed
    return tmp / "s.duckdb"


def test_json_has_every_fix_with_its_change_and_the_slo(store, capsys) -> None:
    assert main(["whatif", "--db", str(store), "--json", "--slo-ms", "60"]) == 0
    out = json.loads(capsys.readouterr().out)
    measured = out["measured"]["p99_ms"]
    fixes = {o["key"]: o for o in out["outcomes"]}
    assert {"no_gc_stalls", "replicas+1", "forward_x0.5", "queue_within_window"} <= set(fixes)
    gc = fixes["no_gc_stalls"]
    assert gc["p99_ms"] < 0.6 * measured and gc["meets_slo"] is (gc["p99_ms"] <= 60)
    assert gc["p99_change"] == pytest.approx(gc["p99_ms"] / measured - 1, abs=1e-3)
    assert out["model_check"]["p99_ms"] == pytest.approx(measured, rel=0.02)
    assert out["latency"] == "client-observed" and out["slo_ms"] == 60


def test_text_table_and_an_unknown_run(store, capsys) -> None:
    assert main(["whatif", "--db", str(store), "--replicas", "2", "--k", "0.25"]) == 0
    text = capsys.readouterr().out
    assert "No GC pauses" in text and "Model forward × 0.25" in text and "2 more replica(s)" in text
    assert "cannot know" in text
    assert main(["whatif", "--db", str(store), "--run", "nope"]) == 2
    assert "unknown run 'nope'" in capsys.readouterr().err
    assert main(["whatif", "--db", str(store), "--k", "0"]) == 2
