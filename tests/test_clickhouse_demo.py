"""`tailscope demo --store chdb:///...`: the demo runs go into a ClickHouse store (the exporter's
schema), the reports read them there, and the dashboard opens on them."""

from __future__ import annotations

from pathlib import Path

import pytest

from tailscope.cli.demo_cmd import demo_runs
from tailscope.cli.main import main

pytest.importorskip("chdb", reason="chdb not installed (the [clickhouse] extra)")
pytest.importorskip("reference_pipeline.simulate.api")


def test_demo_into_chdb(chdb_demo: tuple[Path, str], capsys: pytest.CaptureFixture[str]) -> None:
    folder, out = chdb_demo  # `demo --store chdb://FOLDER --requests 150 --no-serve` (tests/conftest.py)
    url = f"chdb://{folder}"
    assert f"tailscope waterfall --store {url} --run demo-steady" in out
    assert f"open the dashboard with: tailscope serve --store {url}" in out
    labels = [run.label for run in demo_runs()]
    assert all(label in out for label in labels)
    assert main(["waterfall", "--store", url, "--run", "demo-steady", "--json"]) == 0
    assert '"requests_total": 150' in capsys.readouterr().out
    assert main(["demo", "--store", url, "--requests", "100", "--no-serve"]) == 0  # nothing missing: reused
    assert f"reusing the {len(labels)} runs already in {url}" in capsys.readouterr().out
    assert main(["demo", "--store", url, "--fresh"]) == 2
