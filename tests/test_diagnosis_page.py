"""The Diagnosis page through Streamlit's AppTest, and its pure figure builders."""

from __future__ import annotations

from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from tailscope.analysis.derive import refresh_run
from tailscope.analysis.diagnosis import diagnose
from tailscope.store.db import Store

simulate_api = pytest.importorskip("reference_pipeline.simulate.api")
APP_MAIN = Path(__file__).resolve().parents[1] / "app" / "main.py"


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("diagnosis_page") / "store.duckdb"
    with Store(path).writer() as writer:
        conn = writer.cursor()
        for run, scenario, seed in (("locks", "lock-contention", 1), ("gc", "gc-pressure", 2)):
            for batch in simulate_api.simulate_columns(scenario, 1200, seed):
                conn.register("page_batch", batch.to_arrow())
                conn.execute("INSERT INTO otel_traces SELECT *, ? FROM page_batch", [run]).fetchall()
                conn.unregister("page_batch")
            refresh_run(conn, run)  # the sidebar lists runs from the derived requests table
    return path


def open_diagnosis(db: Path, monkeypatch: pytest.MonkeyPatch, run: str | None) -> AppTest:
    monkeypatch.setenv("TAILSCOPE_DB", str(db))
    at = AppTest.from_file(str(APP_MAIN), default_timeout=120)
    if run:
        at.query_params["run"] = run
    at.run()
    at.switch_page("views/diagnosis.py").run()
    assert not at.exception, [e.value for e in at.exception]
    assert not at.error, [e.value for e in at.error]
    return at


@pytest.mark.parametrize(
    ("run", "pattern", "title"),
    [("locks", "lock_contention", "Lock contention"), ("gc", "gc_pause", "GC pauses")],
)
def test_each_finding_is_a_card_with_its_chart_and_advice(
    db: Path, monkeypatch: pytest.MonkeyPatch, run: str, pattern: str, title: str
) -> None:
    at = open_diagnosis(db, monkeypatch, run)
    assert at.sidebar.selectbox(key="f_run").value == run  # the shared sidebar filter picked the run
    assert at.subheader[0].value.startswith(f"1. {title}")
    assert any(pattern in c.value for c in at.caption)
    assert list(at.get("plotly_chart")), "the top finding has an evidence chart"
    assert any("What to change" in s.value for s in at.success)
    assert at.metric[0].label == "confidence"


def test_without_a_run_filter_the_page_asks_for_one(db: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    at = open_diagnosis(db, monkeypatch, None)
    if at.sidebar.selectbox(key="f_run").value in ("locks", "gc"):
        return  # the sidebar defaulted to a run: then its diagnosis is shown, which the test above covers
    assert any("pick it in the sidebar" in i.value for i in at.info)


def test_every_chart_kind_builds_a_figure(db: Path) -> None:
    from app.views.diagnosis import BUILDERS, evidence_figure

    seen = set()
    for run in ("locks", "gc"):
        for finding in diagnose(Store(db), run).findings:
            chart = finding.evidence.get("chart")
            fig = evidence_figure(chart)
            assert fig is not None and fig.data, finding.pattern
            seen.add(chart["kind"])
    assert seen <= set(BUILDERS)
    assert evidence_figure(None) is None and evidence_figure({"kind": "unknown"}) is None
