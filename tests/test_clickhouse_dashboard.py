"""The dashboard on a ClickHouse store: `tailscope demo --store chdb:///dir` opens it, and its pages
load in Chromium without an exception: Overview, Waterfall, Latency over time (the heatmap), Tail vs
body, Traces (the slowest traces and the Gantt of one), Stage mapping (the stage and phase rules'
editors and the mapping) and Upload, which loads a file into the store's otel_traces. The
demo opens a copy of the folder `demo --no-serve` loaded (tests/conftest.py's chdb_demo), finds its
runs there, closes it and starts the dashboard, whose process then holds it (chdb allows one process
per folder)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from browser_support import (
    ONE_SPAN_OTLP_JSON,
    browser_missing,
    chromium,
    problems_on,
    serving_command,
    upload_on_page,
    wait_for_app,
)

pytest.importorskip("chdb", reason="chdb not installed (the [clickhouse] extra): no ClickHouse store")
pytest.importorskip("reference_pipeline.simulate", reason="the demo's simulator is not installed")
pytestmark = [pytest.mark.browser, pytest.mark.timeout(300)]
if reason := browser_missing():
    pytestmark.append(pytest.mark.skip(reason=reason))

RUN = "demo-steady"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, chdb_demo: tuple[Path, str]) -> Iterator[str]:
    folder = tmp_path_factory.mktemp("chdb-dashboard")
    # a copy of the folder `demo --no-serve` loaded (tests/conftest.py; test_clickhouse_demo checks it)
    shutil.copytree(chdb_demo[0], folder / "store", symlinks=True)  # its links are relative
    url = f"chdb://{folder / 'store'}"
    # what a user types: the demo finds its runs in the chdb folder, lets go of it, opens the dashboard
    demo = ["demo", "--store", url, "--requests", "150"]
    with serving_command(demo, log=folder / "demo.log", timeout=240) as base:
        yield base


@pytest.fixture(scope="module")
def page(server: str) -> Iterator[Any]:
    with chromium() as browser:
        context = browser.new_context(viewport={"width": 1440, "height": 900})
        yield context.new_page()
        context.close()


@pytest.mark.parametrize(
    ("path", "title", "expect"),
    [
        ("overview", "Overview", RUN),
        ("waterfall", "Waterfall", "model_forward"),
        ("time", "Latency over time", "requests"),
        ("tail", "Tail vs body", "dominant stage"),
        ("traces", "Traces", "On the critical path"),
        ("mapping", "Stage mapping", "Serving framework phases"),
        ("upload", "Upload", "Run label"),
    ],
)
def test_page_loads_on_chdb(server: str, page: Any, path: str, title: str, expect: str) -> None:
    response = page.goto(f"{server}/{path}?run={RUN}")
    assert response is not None and response.ok
    wait_for_app(page)
    assert title in page.inner_text("h1")
    assert problems_on(page) == []
    text = page.inner_text("body")
    assert expect in text
    assert "chdb://" in text  # the sidebar names the store
    assert "This view failed" not in text


def test_upload_into_chdb_adds_a_run(server: str, page: Any) -> None:
    upload_on_page(page, server, "chdb-upload.json", ONE_SPAN_OTLP_JSON, "from-browser")
    assert "Loaded 1 spans" in page.inner_text("body")
    assert problems_on(page) == []
    assert "run=from-browser" in page.url
    page.goto(f"{server}/overview?run=from-browser")
    wait_for_app(page)
    assert "from-browser" in page.inner_text("body") and problems_on(page) == []
