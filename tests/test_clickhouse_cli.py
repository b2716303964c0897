"""The commands on a ClickHouse store (--store chdb:///..., $TAILSCOPE_STORE): ingest into the
exporter's schema, then waterfall, compare and diagnose give what they give on DuckDB for the same
files; a bad URL or an unusable store is one line on stderr. chdb runs in this process, so every
command here shares one data folder (module scope)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tailscope.cli.main import main

pytest.importorskip("chdb", reason="chdb not installed (the [clickhouse] extra)")
simulate_api = pytest.importorskip("reference_pipeline.simulate.api")


@pytest.fixture(scope="module")
def traces(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("cli-traces")
    files = {}
    for run, scenario, seed in (("a", "steady", 1), ("b", "slow-downstream", 2)):
        files[run] = folder / f"{run}.jsonl"
        simulate_api.simulate_to_file(files[run], scenario, 500, seed)
    return files


@pytest.fixture(scope="module")
def stores(traces: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    folder = tmp_path_factory.mktemp("cli-stores")
    urls = {"duckdb": str(folder / "s.duckdb"), "chdb": f"chdb://{folder / 'chdb'}"}
    for url in urls.values():
        for run, path in traces.items():
            assert main(["ingest", str(path), "--store", url, "--run", run, "--json"]) == 0
    return urls


def _json(capsys: pytest.CaptureFixture[str], argv: list[str]) -> dict:
    capsys.readouterr()
    code = main(argv)
    out = capsys.readouterr().out
    assert code == 0, out
    return json.loads(out)


def test_ingest_reports_the_same_counts(
    traces: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str], stores: dict[str, str]
) -> None:
    folder = tmp_path / "again"
    folder.mkdir()
    summaries = {}
    for name, url in (("duckdb", str(folder / "s.duckdb")), ("chdb", stores["chdb"])):
        run = "again"
        summaries[name] = _json(capsys, ["ingest", str(traces["a"]), "--store", url, "--run", run, "--json"])
    assert summaries["chdb"]["spans"] == summaries["duckdb"]["spans"] > 0
    assert summaries["chdb"]["traces"] == summaries["duckdb"]["traces"] > 0
    assert summaries["chdb"]["files_failed"] == 0


@pytest.mark.parametrize("band", ["p50", "p99"])
def test_waterfall_json_is_the_same(
    stores: dict[str, str], capsys: pytest.CaptureFixture[str], band: str
) -> None:
    results = {
        name: _json(capsys, ["waterfall", "--store", url, "--run", "b", "--band", band, "--json"])
        for name, url in stores.items()
    }
    duck, clickhouse = results["duckdb"], results["chdb"]
    assert clickhouse["requests_total"] == duck["requests_total"] == 500
    for key in ("requests_in_band", "band_low_ms", "band_high_ms"):
        assert clickhouse[key] == duck[key]
    for got, expected in zip(clickhouse["stages"], duck["stages"], strict=True):
        for key in ("stage", "p50_ms", "p95_ms", "p99_ms", "p999_ms"):
            assert got[key] == expected[key]
        if expected["tail_excess_share"] is not None:
            assert got["tail_excess_share"] == pytest.approx(expected["tail_excess_share"], abs=1e-9)


def test_store_from_the_environment(
    stores: dict[str, str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TAILSCOPE_STORE", stores["chdb"])
    via_env = _json(capsys, ["waterfall", "--run", "a", "--json"])
    via_flag = _json(capsys, ["waterfall", "--store", stores["chdb"], "--run", "a", "--json"])
    assert via_env == via_flag


def test_compare_and_diagnose_run_on_chdb(stores: dict[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    results = {
        name: _json(capsys, ["compare", "a", "b", "--store", url, "--resamples", "200", "--json"])
        for name, url in stores.items()
    }
    assert results["chdb"]["stages"] == results["duckdb"]["stages"]
    found = {
        name: _json(capsys, ["diagnose", "--store", url, "--run", "b", "--json"])
        for name, url in stores.items()
    }
    patterns = [f["pattern"] for f in found["chdb"]["findings"]]
    assert patterns == [f["pattern"] for f in found["duckdb"]["findings"]]
    assert patterns and patterns[0] == "slow_dependency"


def test_unknown_run_names_the_store_by_url(
    stores: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["waterfall", "--store", stores["chdb"], "--run", "nope"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"tailscope: unknown run 'nope'; runs in {stores['chdb']}: a, ")
    assert "\n" not in err and ", b" in err


def test_bad_url_and_unreachable_server_are_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["waterfall", "--store", "sqlite:///x.db"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "unknown engine 'sqlite'" in err
    assert main(["diagnose", "--store", "clickhouse://u:secret@127.0.0.1:9/default"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no ClickHouse server answers" in err and "secret" not in err


def test_select_names_spans_already_in_the_store_as_a_run(
    stores: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    # the spans of run b, selected by a resource attribute as a Collector-written table would be
    url = stores["chdb"]
    capsys.readouterr()
    assert main(["select", "picked", "--store", url, "--where", "tailscope.run=b"]) == 0
    assert capsys.readouterr().out.startswith("run picked: 6,500 spans, 500 requests (chdb://")
    picked = _json(capsys, ["waterfall", "--store", url, "--run", "picked", "--json"])
    original = _json(capsys, ["waterfall", "--store", url, "--run", "b", "--json"])
    assert picked["stages"] == original["stages"]
    assert main(["select", "nothing", "--store", url, "--where", "service.name=no-such-service"]) == 2
    assert "no spans match" in capsys.readouterr().err


def test_select_by_time_takes_part_of_a_run(
    stores: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    from tailscope.analysis import Filter, overview
    from tailscope.store.engine import open_store

    url = stores["chdb"]
    store = open_store(url)
    run_a = overview(store, Filter(run="a")).runs[0]
    store.close()  # (the command below opens the folder itself)
    middle = run_a.first_request + (run_a.last_request - run_a.first_request) / 2
    capsys.readouterr()
    argv = ["select", "a-late", "--store", url, "--where", "tailscope.run=a", "--since", middle.isoformat()]
    assert main(argv) == 0
    store = open_store(url)
    late = overview(store, Filter(run="a-late")).runs[0]
    store.close()
    assert 0 < late.requests < run_a.requests
    assert late.first_request >= middle


def test_select_refuses_a_duckdb_store(stores: dict[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["select", "x", "--store", stores["duckdb"], "--where", "a=b"]) == 2
    assert "only on a ClickHouse store" in capsys.readouterr().err
    assert main(["select", "x", "--store", stores["chdb"], "--where", "nokey"]) == 2
    assert "is not KEY=VALUE" in capsys.readouterr().err


def test_a_rejected_file_writes_nothing(
    traces: dict[str, Path], stores: dict[str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # strict mode: a malformed record after good ones rejects the whole file, and ClickHouse (no
    # transaction over a file) gets none of its spans: they were only staged
    from tailscope.store.engine import open_store

    lines = traces["a"].read_text(encoding="utf-8").splitlines()
    broken = tmp_path / "broken.jsonl"
    broken.write_text("\n".join([*lines[:5], '{"resourceSpans": [{"scopeSpans": 7}]}', *lines[5:]]) + "\n")
    url = stores["chdb"]
    store = open_store(url)
    before = store.query("SELECT count() FROM otel_traces").single_value()
    store.close()
    assert main(["ingest", str(broken), "--store", url, "--run", "broken"]) == 2
    assert "broken.jsonl" in capsys.readouterr().err
    store = open_store(url)
    after = store.query("SELECT count() FROM otel_traces").single_value()
    runs = store.query("SELECT count() FROM tailscope_runs WHERE RunLabel = 'broken'").single_value()
    store.close()
    assert (after, runs) == (before, 0)
    assert main(["ingest", str(broken), "--store", url, "--run", "skipped", "--skip-bad", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["rejected"] == 1


def test_serve_opens_the_dashboard_on_a_clickhouse_store(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # the URL reaches the dashboard in its environment only (a password stays off the command line
    # and out of what is printed); tests/test_clickhouse_dashboard.py serves a chdb store for real
    from tailscope.cli import serve_cmd

    started: dict[str, Any] = {}

    class Child:
        def __init__(self, command: list[str], env: dict[str, str], preexec_fn: Any) -> None:
            started.update(command=command, env=env)

        def wait(self) -> int:
            return 0

    monkeypatch.setattr(serve_cmd.subprocess, "Popen", Child)
    monkeypatch.setenv("TAILSCOPE_STORE", "clickhouse://u:secret@h:8123/otel")
    monkeypatch.setenv("TAILSCOPE_DB", "/tmp/other.duckdb")
    assert main(["serve"]) == 0
    out = capsys.readouterr().out
    assert "dashboard on clickhouse://u:***@h:8123/otel" in out and "secret" not in out
    assert started["env"]["TAILSCOPE_STORE"] == "clickhouse://u:secret@h:8123/otel"
    assert "TAILSCOPE_DB" not in started["env"]
    assert "--db" not in started["command"] and not any("secret" in part for part in started["command"])
    assert main(["serve", "--store", "chdb:///tmp/somewhere"]) == 0
    assert started["env"]["TAILSCOPE_STORE"] == "chdb:///tmp/somewhere"
