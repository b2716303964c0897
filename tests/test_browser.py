"""The real dashboard in a real browser: `tailscope serve` on a free port, every page loaded in
Chromium by its URL, no exception or error box, a full-page screenshot of each in
artifacts/screenshots/ (gitignored), and a box brushed on the latency heatmap selects requests."""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from typing import Any

import pytest
from app_data import build_store, simulated_store
from browser_support import (
    ONE_SPAN_OTLP_JSON,
    PAGES,
    REPO_ROOT,
    browser_missing,
    chromium,
    problems_on,
    screenshot,
    serving,
    upload_on_page,
    wait_for_app,
)

pytestmark = [pytest.mark.browser, pytest.mark.timeout(180)]
if (reason := browser_missing()) is not None:
    pytestmark.append(pytest.mark.skip(reason=reason))

SHOTS = REPO_ROOT / "artifacts" / "screenshots"
RUN = "sim-burst" if importlib.util.find_spec("reference_pipeline.simulate") else "cpu-fp32"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    folder = tmp_path_factory.mktemp("browser")
    db = simulated_store(folder / "store.duckdb") or build_store(folder / "store.duckdb", requests=400)
    with serving(db, log=folder / "serve.log") as url:
        yield url


@pytest.fixture(scope="module")
def browser(server: str) -> Iterator[Any]:
    with chromium() as b:
        yield b


@pytest.fixture(scope="module")
def context(browser: Any) -> Iterator[Any]:
    """One browser context for every page, so plotly's bundle is fetched and compiled once."""
    ctx = browser.new_context(viewport={"width": 1440, "height": 900})
    yield ctx
    ctx.close()


@pytest.fixture
def page(context: Any) -> Iterator[Any]:
    tab = context.new_page()
    yield tab
    tab.close()


@pytest.mark.parametrize("path", list(PAGES))
def test_page_loads_without_errors(path: str, server: str, page: Any) -> None:
    if path == "diagnosis" and importlib.util.find_spec("app.views.diagnosis") is None:
        pytest.skip("no Diagnosis page in this build (app/views/diagnosis.py)")
    response = page.goto(f"{server}/{path}?run={RUN}")
    assert response is not None and response.ok
    wait_for_app(page)
    assert PAGES[path] in page.inner_text("h1")
    screenshot(page, SHOTS / f"{path}.png")
    assert problems_on(page) == []
    assert f"run={RUN}" in page.url, "the filters stay in the URL"


def test_the_root_url_opens_the_overview_at_its_own_url(server: str, page: Any) -> None:
    page.goto(f"{server}/?run={RUN}")
    wait_for_app(page)
    page.wait_for_url(f"**/overview?run={RUN}", timeout=30_000)
    assert "Overview" in page.inner_text("h1")
    assert problems_on(page) == []


def test_brushing_the_heatmap_selects_requests(server: str, page: Any) -> None:
    page.goto(f"{server}/time?run={RUN}")
    wait_for_app(page)
    plot = page.locator(".js-plotly-plot .nsewdrag").first
    box = plot.bounding_box()
    assert box is not None
    x0, y0 = box["x"] + box["width"] * 0.1, box["y"] + box["height"] * 0.05
    x1, y1 = box["x"] + box["width"] * 0.9, box["y"] + box["height"] * 0.6
    page.mouse.move(x0, y0)
    page.mouse.down()
    page.mouse.move((x0 + x1) / 2, (y0 + y1) / 2, steps=5)
    page.mouse.move(x1, y1, steps=5)
    page.mouse.up()
    page.wait_for_selector("text=Selected:", timeout=30_000)
    wait_for_app(page)
    assert problems_on(page) == []
    screenshot(page, SHOTS / "time-selected.png")
    page.get_by_text("Compare with the rest").click()
    wait_for_app(page)
    assert "Tail vs body" in page.inner_text("h1")
    assert f"run={RUN}" in page.url, "the filters follow to the next page"
    assert page.get_by_text("Brushed region").count() >= 1
    assert problems_on(page) == []


def test_upload_from_the_browser_adds_a_run(server: str, page: Any) -> None:
    upload_on_page(page, server, "browser-upload.json", ONE_SPAN_OTLP_JSON, "from-browser")
    assert "Loaded 1 spans" in page.inner_text("body")
    assert problems_on(page) == []
    assert "run=from-browser" in page.url
