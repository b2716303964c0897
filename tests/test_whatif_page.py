"""The Diagnosis page's "What if" section (AppTest) and its pure builders."""

from __future__ import annotations

from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from app.views.whatif_section import card_line, figure, rows

simulate_api = pytest.importorskip("reference_pipeline.simulate.api")
loader = pytest.importorskip("ingest.loader")
APP_MAIN = Path(__file__).resolve().parents[1] / "app" / "main.py"


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("whatif_page")
    out = tmp / "gc.jsonl"
    simulate_api.simulate_to_file(out, "gc-pressure", 1200, 2)
    assert not loader.load_paths([out], tmp / "store.duckdb", "gc").failed
    return tmp / "store.duckdb"


def test_the_section_follows_the_findings_and_fills_their_cards(db: Path, monkeypatch) -> None:
    monkeypatch.setenv("TAILSCOPE_DB", str(db))
    at = AppTest.from_file(str(APP_MAIN), default_timeout=180)
    at.query_params["run"] = "gc"
    at.run()
    at.switch_page("views/diagnosis.py").run()
    assert not at.exception, [e.value for e in at.exception]
    assert "What if" in [s.value for s in at.subheader]
    lines = [m.value for m in at.markdown if m.value.startswith("**Fixing this:**")]
    assert lines and "→" in lines[0] and "no gc pauses" in lines[0]
    assert any("cannot know" in c.value for c in at.caption)
    table = at.dataframe[-1].value
    assert table["fix"].iloc[0] == "As measured" and "Model forward × 0.5" in " ".join(table["fix"])


RESULT = {
    "measured": {
        "key": "measured",
        "label": "As measured",
        "kind": "measured",
        "model": "m",
        "p50_ms": 10.0,
        "p95_ms": 40.0,
        "p99_ms": 100.0,
        "p99_change": 0.0,
    },
    "outcomes": [
        {
            "key": "no_gc_stalls",
            "label": "No GC pauses",
            "kind": "software",
            "model": "cut",
            "pattern": "gc_pause",
            "span_name": None,
            "p50_ms": 9.0,
            "p95_ms": 20.0,
            "p99_ms": 30.0,
            "p99_change": -0.7,
        },
        {
            "key": "forward_x0.5",
            "label": "Model forward × 0.5",
            "kind": "hardware",
            "model": "k",
            "pattern": "compute_bound",
            "span_name": None,
            "p50_ms": 6.0,
            "p95_ms": 35.0,
            "p99_ms": 90.0,
            "p99_change": -0.1,
        },
    ],
}


def test_bars_per_kind_with_the_run_and_the_target() -> None:
    fig = figure(RESULT, target_ms=50.0)
    assert {t.name for t in fig.data} == {"as measured", "software fix", "hardware"}
    assert [s.x0 for s in fig.layout.shapes] == [100.0, 50.0]
    table = rows(RESULT, 50.0)
    assert [r["p99 vs target"] for r in table] == ["+50.0 ms", "-20.0 ms", "+40.0 ms"]


def test_a_card_names_the_fix_that_answers_its_finding() -> None:
    line = card_line(RESULT, {"pattern": "gc_pause", "span_name": None})
    assert line is not None and "100.0 ms → 30.0 ms" in line and "-70 %" in line
    assert card_line(RESULT, {"pattern": "unexplained_tail", "span_name": "x"}) is None
    assert card_line(None, {"pattern": "gc_pause"}) is None


def test_a_retried_calls_card_names_its_fix() -> None:
    from tailscope.analysis.whatif import evaluate
    from tests.hand_frames import hand_frame
    from tests.test_whatif_cause_levers import RETRY, _retry_rows

    result = evaluate(hand_frame(_retry_rows()), [RETRY]).to_dict()
    line = card_line(result, RETRY)
    # p99 of two requests (322 and 30 ms; 67 and 30 after the fix), interpolated
    assert line is not None and "319.1 ms → 66.6 ms" in line and "no timed-out attempts" in line


def test_a_card_of_another_population_than_the_one_evaluated_gets_no_line() -> None:
    """An asynchronous run: the what-if is of the consumer work the diagnosis reports; a finding of
    the API's requests has no fix evaluated there."""
    result = {**RESULT, "unit": "consumer", "entry_point": "worker process q"}
    mine = {"pattern": "gc_pause", "span_name": None,
            "evidence": {"stats": {"entry_point": "worker process q"}}}
    other = {**mine, "evidence": {"stats": {"entry_point": "api POST /v1/events"}}}
    assert card_line(result, mine) is not None
    assert card_line(result, other) is None
