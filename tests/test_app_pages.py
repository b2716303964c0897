"""Every dashboard page through Streamlit's AppTest: no exceptions, no error boxes, the expected
elements, on a small store and on the stores that have nothing to chart (empty, one span, no roots)."""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from pathlib import Path

import duckdb
import pytest
from app_data import build_store, no_root_store, one_span_store
from streamlit.testing.v1 import AppTest

from app.components.rules import phase_rules_frame, phase_rules_from_frame, rules_frame, rules_from_frame
from tailscope import analysis
from tailscope.analysis import StageRule
from tailscope.store.duckdb.reader import DuckDBReader
from tailscope.store.duckdb.store import DuckDBStore as Store

APP_MAIN = Path(__file__).resolve().parents[1] / "app" / "main.py"
PAGES = [
    "views/overview.py",
    "views/waterfall.py",
    "views/latency_time.py",
    "views/tail_vs_body.py",
    "views/traces.py",
    "views/compare.py",
    "views/upload.py",
    "views/stage_mapping.py",
]
if importlib.util.find_spec("app.views.diagnosis") is not None:
    PAGES.append("views/diagnosis.py")
TIMEOUT = 120


@pytest.fixture(scope="module")
def small_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_store(tmp_path_factory.mktemp("app") / "small.duckdb", requests=300)


def open_page(
    db: Path, page: str, monkeypatch: pytest.MonkeyPatch, query: dict[str, str] | None = None
) -> AppTest:
    monkeypatch.setenv("TAILSCOPE_DB", str(db))
    at = AppTest.from_file(str(APP_MAIN), default_timeout=TIMEOUT)
    if query:
        at.query_params.update(query)
    at.run()
    if page != "views/overview.py":
        at.switch_page(page).run()
    return at


def texts(at: AppTest) -> str:
    parts = [m.value for m in at.markdown] + [c.value for c in at.caption] + [i.value for i in at.info]
    parts += [t.value for t in at.title] + [s.value for s in at.subheader]
    return "\n".join(str(p) for p in parts)


def assert_clean(at: AppTest) -> None:
    assert not at.exception, [e.value for e in at.exception]
    assert not at.error, [e.value for e in at.error]


def charts(at: AppTest) -> list:
    return list(at.get("plotly_chart"))


def open_on_a_run(small_store: Path, page: str, monkeypatch: pytest.MonkeyPatch) -> AppTest:
    """The page on the small store at `?run=cpu-fp32`: it renders cleanly, with a title, on that run."""
    at = open_page(small_store, page, monkeypatch, {"run": "cpu-fp32"})
    assert_clean(at)
    assert at.title, "every page has a title"
    assert at.sidebar.selectbox(key="f_run").value == "cpu-fp32"
    return at


# The pages a test below opens at `?run=cpu-fp32` first (open_on_a_run) before it checks more: not here again.
OPENED_ON_A_RUN_BELOW = {
    "views/waterfall.py", "views/latency_time.py", "views/tail_vs_body.py", "views/traces.py",
    "views/stage_mapping.py",
}


@pytest.mark.parametrize("page", [p for p in PAGES if p not in OPENED_ON_A_RUN_BELOW])
def test_page_renders_on_a_small_store(page: str, small_store: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    open_on_a_run(small_store, page, monkeypatch)


MAKERS: dict[str, Callable[[Path], Path]] = {
    "empty": lambda db: db,
    "one-span": one_span_store,
    "no-root": no_root_store,
}


@pytest.fixture(scope="module")
def degenerate_stores(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("degenerate")
    return {kind: make(folder / f"{kind}.duckdb") for kind, make in MAKERS.items()}


@pytest.mark.parametrize("kind", list(MAKERS))
@pytest.mark.parametrize("page", PAGES)
def test_page_explains_when_there_is_nothing_to_chart(
    page: str, kind: str, degenerate_stores: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    at = open_page(degenerate_stores[kind], page, monkeypatch)
    assert_clean(at)
    if kind != "one-span" and page not in ("views/upload.py", "views/stage_mapping.py"):
        assert at.info, "an empty view says why and what to do"
    if kind == "empty" and page == "views/overview.py":
        assert "tailscope demo" in texts(at)


def test_overview_cards_and_target(small_store: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    at = open_page(small_store, "views/overview.py", monkeypatch, {"run": "cpu-fp32", "target": "50"})
    assert_clean(at)
    labels = {m.label: m.value for m in at.metric}
    for label in (
        "Requests",
        "Throughput",
        "Error rate",
        "p50 end to end",
        "p99 end to end",
        "p99.9 end to end",
    ):
        assert label in labels
    assert labels["Requests"] == "300"
    assert labels["Throughput"].endswith("req/s")
    assert labels["p99 end to end"].endswith("ms")
    assert at.number_input(key="latency_target_ms").value == 50.0
    assert "dominates the tail" in texts(at) or "No stage stands out" in texts(at)
    assert charts(at)


def test_overview_of_all_runs_is_a_table(small_store: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    at = open_page(small_store, "views/overview.py", monkeypatch)
    assert_clean(at)
    at.sidebar.selectbox(key="f_run").set_value("(all)").run()
    assert_clean(at)
    assert at.dataframe
    assert at.query_params.get("run") in (None, [])


def test_filters_live_in_the_url(small_store: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    at = open_page(small_store, "views/waterfall.py", monkeypatch, {"run": "gpu-bf16"})
    assert at.sidebar.selectbox(key="f_run").value == "gpu-bf16"
    at.sidebar.selectbox(key="f_run").set_value("cpu-fp32").run()
    assert_clean(at)
    assert at.query_params["run"] == "cpu-fp32"


def test_waterfall_bands(small_store: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    at = open_on_a_run(small_store, "views/waterfall.py", monkeypatch)
    assert len(charts(at)) == 2, "the budget and the tail-excess share"
    assert at.dataframe, "the per-stage percentile table"
    assert "do not add" in "\n".join(w.value for w in at.warning)
    at.button_group(key="waterfall_band").set_value("p50").run()
    assert_clean(at)
    assert len(charts(at)) == 1, "the median band has no excess chart"
    assert at.query_params["band"] == "p50", "the band is part of the shareable URL"
    at.button_group(key="waterfall_band").set_value("p99.9").run()
    assert_clean(at)
    assert len(charts(at)) == 2


def test_latency_over_time_per_stage(small_store: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    at = open_on_a_run(small_store, "views/latency_time.py", monkeypatch)
    assert charts(at)
    at.selectbox(key="time_stage").set_value("feature_hydration").run()
    assert_clean(at)
    assert charts(at)


def test_tail_vs_body_ranks_the_planted_cause(small_store: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    at = open_on_a_run(small_store, "views/tail_vs_body.py", monkeypatch)
    at.radio(key="tail_set").set_value("slowest 5 %").run()
    assert_clean(at)
    assert len(charts(at)) == 2
    labels = {m.label: m.value for m in at.metric}
    assert int(labels["Selected requests"].replace(",", "")) > 0


def test_traces_table_and_gantt(small_store: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    at = open_on_a_run(small_store, "views/traces.py", monkeypatch)
    assert at.dataframe
    assert charts(at), "the Gantt chart of the slowest trace"
    assert any(m.label == "On the critical path" for m in at.metric)


def test_compare_two_runs_with_prices(small_store: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    at = open_page(small_store, "views/compare.py", monkeypatch)
    assert_clean(at)
    at.number_input(key="price:cpu-fp32").set_value(1.2)
    at.number_input(key="price:gpu-bf16").set_value(3.5)
    at.run()
    assert_clean(at)
    labels = {m.label: m.value for m in at.metric}
    assert labels["Cost per 1,000 inferences, A"].endswith("USD")
    keys = [chart.key for chart in charts(at)]
    costs = ["costs_throughput_rps", "costs_p99_ms", "costs_cost_per_1k"]
    assert keys == [*costs, "compare_q0.99", "compare_q0.5"]
    assert len(at.dataframe) >= 3
    # the prices' editor (prices entered for A and B flow into it), then every run's throughput, p99, cost
    side_by_side = at.dataframe[1].value.set_index("run")
    assert sorted(side_by_side.index) == ["cpu-fp32", "gpu-bf16"]
    assert at.dataframe[0].value.set_index("run").loc["cpu-fp32", "price (USD/h)"] == 1.2  # run A's price
    row = side_by_side.loc["gpu-bf16"]
    assert row["p99 (ms)"] > 0 and row["throughput (req/s)"] > 0
    assert row["cost per 1,000 inferences (USD)"] == pytest.approx(
        3.5 / 3600 / row["throughput (req/s)"] * 1000, rel=1e-2  # throughput shown to 0.1 req/s
    )


def test_upload_loads_a_file_and_selects_its_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    otlp = (
        b'{"resourceSpans":[{"resource":{"attributes":[{"key":"service.name","value":{"stringValue":"up"}}]},'
        b'"scopeSpans":[{"spans":[{"traceId":"0af7651916cd43dd8448eb211c80319c","spanId":"b7ad6b7169203331",'
        b'"name":"GET /","kind":2,"startTimeUnixNano":"1700000000000000000",'
        b'"endTimeUnixNano":"1700000000050000000"}]}]}]}'
    )
    db = tmp_path / "store.duckdb"
    at = open_page(db, "views/upload.py", monkeypatch)
    assert_clean(at)
    assert "400 MB" in texts(at)
    at.file_uploader(key="upload_files").set_value(("trace.json", otlp, "application/json")).run()
    at.text_input[0].set_value("uploaded").run()
    at.button[0].click().run()
    assert_clean(at)
    assert any("Loaded 1 spans" in s.value for s in at.success)
    assert at.sidebar.selectbox(key="f_run").value == "uploaded"


def test_upload_reports_a_bad_file_in_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    db = tmp_path / "store.duckdb"
    at = open_page(db, "views/upload.py", monkeypatch)
    at.file_uploader(key="upload_files").set_value(
        ("broken.json", b'{"resourceSpans": [', "application/json")
    )
    at.run()
    at.text_input[0].set_value("broken").run()
    at.button[0].click().run()
    assert not at.exception
    assert len(at.error) == 1
    message = at.error[0].value
    assert message.startswith("broken.json: ") and "\n" not in message and "tailscope-upload" not in message


def test_stage_mapping_shows_rules_and_mapping(small_store: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    at = open_on_a_run(small_store, "views/stage_mapping.py", monkeypatch)
    assert len(at.dataframe) >= 1
    assert "model.forward" in texts(at) or any("model.forward" in str(d.value) for d in at.dataframe)


def test_stage_mapping_checks_the_rules(small_store: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    at = open_page(small_store, "views/stage_mapping.py", monkeypatch)
    assert_clean(at)
    check = next(b for b in at.button if b.label == "Check only")
    check.click().run()
    assert_clean(at)
    assert any("all valid" in s.value for s in at.success)


def test_stage_mapping_saves_the_rules_and_recomputes(
    small_store: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = tmp_path / "copy.duckdb"
    db.write_bytes(small_store.read_bytes())
    at = open_page(db, "views/stage_mapping.py", monkeypatch)
    next(b for b in at.button if b.label == "Save and recompute").click().run()
    assert_clean(at)
    assert any("every run's stages were recomputed" in s.value for s in at.success)


def test_rules_table_round_trip_orders_and_drops_empty_rows() -> None:
    rules = [
        StageRule(position=1, stage="queue", name_regex="wait"),
        StageRule(position=2, stage="downstream", span_kind="Client", description="calls out"),
    ]
    frame = rules_frame(rules)
    assert rules_from_frame(frame) == rules
    moved = frame.copy()
    moved.loc[1, "order"] = 0.5  # the second rule moves first
    moved.loc[2] = [None, None, None, None, None, None]  # a row the editor added and left empty
    back = rules_from_frame(moved)
    assert [r.stage for r in back] == ["downstream", "queue"]
    assert [r.position for r in back] == [1, 2]


def test_invalid_rules_are_named_by_the_analysis_layer(small_store: Path) -> None:
    frame = rules_frame([StageRule(position=1, stage="not-a-stage", name_regex="(")])
    problems = analysis.validate_rules(Store(small_store), rules_from_frame(frame))
    assert problems


def test_stage_mapping_shows_and_checks_the_phase_rules(
    small_store: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    at = open_page(small_store, "views/stage_mapping.py", monkeypatch)
    assert any(s.value == "Serving framework phases" for s in at.subheader)
    checks = [b for b in at.button if b.label == "Check only"]
    assert len(checks) == 2
    checks[1].click().run()
    assert_clean(at)
    assert any("phase rules, all valid" in s.value for s in at.success)


def test_phase_rules_table_round_trip() -> None:
    rules = analysis.default_phase_rules()
    frame = phase_rules_frame(rules)
    assert phase_rules_from_frame(frame) == rules
    frame.loc[len(frame)] = [None] * len(frame.columns)  # a row the editor added and left empty
    frame.loc[0, "unit"] = "fortnights"
    back = phase_rules_from_frame(frame)
    assert len(back) == len(rules)
    assert any("fortnights" in p for p in analysis.validate_phase_rules(DuckDBReader(duckdb.connect()), back))
