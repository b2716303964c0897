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


def test_an_asynchronous_run_is_evaluated_on_the_consumer_work_the_diagnosis_reports(tmp_path, capsys):
    """event-enricher (a blind family; seed 0: a batch consumer): the API answers at the publish
    ack, the causes are the workers'. The what-if is of the consumer's units, per message, as the
    diagnosis reports them; `--entry` picks the API's requests; an unknown entry point is refused."""
    blind = pytest.importorskip("reference_pipeline.simulate.blind")
    out = tmp_path / "gc.jsonl"
    blind.write_run(out, "event-enricher", "worker-gc", 1500, 0)
    assert not loader.load_paths([out], tmp_path / "s.duckdb", "gc").failed
    db = str(tmp_path / "s.duckdb")
    assert main(["whatif", "--db", db, "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["unit"] == "consumer" and result["entry_point"].startswith("enricher-worker")
    assert result["latency"].startswith("per message")
    gc = next(o for o in result["outcomes"] if o["key"] == "no_gc_stalls")
    assert gc["p99_ms"] < 0.7 * result["measured"]["p99_ms"]
    assert main(["whatif", "--db", db]) == 0
    assert "consumer units of enricher-worker" in capsys.readouterr().out
    assert main(["whatif", "--db", db, "--json", "--entry", "event-intake POST /v1/events"]) == 0
    api = json.loads(capsys.readouterr().out)
    assert api["unit"] == "request" and api["measured"]["p99_ms"] < 0.2 * result["measured"]["p99_ms"]
    assert main(["whatif", "--db", db, "--entry", "nope"]) == 2
    assert "no entry point 'nope'" in capsys.readouterr().err
