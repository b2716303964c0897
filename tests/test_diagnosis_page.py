"""The Diagnosis page through Streamlit's AppTest, and its pure figure builders."""

from __future__ import annotations

from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from tailscope.analysis.diagnosis import diagnose
from tailscope.store.duckdb.derive import refresh_run
from tailscope.store.duckdb.store import DuckDBStore as Store

simulate_api = pytest.importorskip("reference_pipeline.simulate.api")
APP_MAIN = Path(__file__).resolve().parents[1] / "app" / "main.py"


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("diagnosis_page") / "store.duckdb"
    with Store(path).writer() as writer:
        conn = writer.cursor()
        for run, scenario, seed in (("locks", "lock-contention", 1),):
            for batch in simulate_api.simulate_columns(scenario, 1000, seed):
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


def test_each_finding_is_a_card_with_its_chart_and_advice(db: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    at = open_diagnosis(db, monkeypatch, "locks")
    assert at.sidebar.selectbox(key="f_run").value == "locks"  # the shared sidebar filter picked the run
    assert at.subheader[0].value.startswith("1. Lock contention")
    assert any("lock_contention" in c.value for c in at.caption)
    assert list(at.get("plotly_chart")), "the top finding has an evidence chart"
    assert any("What to change" in s.value for s in at.success)
    assert at.metric[0].label == "confidence"
    assert at.metric[1].label == "share of the tail" and at.metric[1].value.endswith("%")
    assert any("Where the tail goes" in m.value for m in at.markdown)  # the share bar above the cards


def test_the_only_run_is_diagnosed_without_a_filter(db: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    at = open_diagnosis(db, monkeypatch, None)
    assert any("Run **locks**" in m.value for m in at.markdown)


# one hand-built chart of every kind (the shapes the detectors emit)
CHARTS = [
    {
        "kind": "stall_timeline",
        "row": [0, 1],
        "start_ms": [0.0, 5.0],
        "end_ms": [40.0, 45.0],
        "name": ["a", "b"],
        "slow": [True, False],
        "stall_ms": [10.0, 40.0],
        "instance": "api/1",
    },
    {
        "kind": "wait_vs_concurrency",
        "concurrency": [0, 1, 2],
        "duration_ms": [1.0, 2.0, 3.1],
        "slope_ms": 1.0,
        "intercept_ms": 1.0,
    },
    {
        "kind": "arrival_vs_wait",
        "time_s": [0, 1, 2],
        "arrival_rps": [10, 50, 10],
        "mean_wait_ms": [1, 2, 30],
        "lag_ms": 1000.0,
    },
    {
        "kind": "log_duration_histogram",
        "log10_ms": [-1.0, 0.0, 1.0],
        "count": [50, 0, 5],
        "modes_ms": [0.1, 10.0],
        "threshold_ms": 1.0,
        "miss_per_bin": [1, 2],
        "spans_per_bin": [10, 10],
    },
    {
        "kind": "warmup_curve",
        "request_index": [0, 1, 3, 10],
        "median_ms": [900.0, 300.0, 50.0, 30.0],
        "warm_median_ms": 30.0,
        "warmup_requests": 10,
    },
    {
        "kind": "dependency_tail_share",
        "quantiles": [0.5, 0.99],
        "dependency_ms": [2.0, 80.0],
        "latency_ms": [30.0, 120.0],
    },
    {"kind": "network_gap", "server_ms": [10.0, 12.0], "gap_ms": [0.5, 60.0]},
    {
        "kind": "forward_vs_batch",
        "batch_size": [1, 4, 8],
        "forward_ms": [12.0, 20.0, 30.0],
        "slope_ms": 2.5,
        "intercept_ms": 10.0,
    },
    {
        "kind": "tail_excess_by_span",
        "span": ["pg.select_profile", "scorer.run"],
        "share": [0.9, 0.05],
        "present_in_tail": [1.0, 1.0],
        "present_in_body": [0.2, 1.0],
        "unexplained": [True, False],
    },
    {
        "kind": "miss_rate_over_time",
        "seconds": [10.0, 30.0, 50.0],
        "miss_rate": [0.02, 0.9, 0.01],
        "requests": [100, 100, 100],
        "overall_rate": 0.31,
    },
    {
        "kind": "attempt_durations",
        "edges_ms": [0.0, 25.0, 50.0, 75.0],
        "first_attempts": [0, 3, 40],
        "other_calls": [900, 10, 0],
        "timeout_ms": 50.2,
    },
    {
        "kind": "size_vs_time",
        "size": [1000.0, 50_000.0, 900_000.0],
        "duration_ms": [0.4, 1.6, 22.0],
        "tail": [False, False, True],
        "fit_ms": [0.3, 25.3],
        "fit_size": [0.0, 1_000_000.0],
        "size_attribute": "http.response.body.size",
    },
    {"kind": "stall_phase", "phase_ms": [41.0, 41.5, 40.8, 12.0], "period_ms": 100.0},
    {"kind": "wait_vs_running", "running": [0.0, 1.0, 3.0, 3.0], "wait_ms": [0.4, 0.5, 20.0, 80.0]},
    {
        "kind": "proxy_time",
        "time_s": [1.0, 2.0, 2.0],
        "proxy_ms": [0.4, 90.0, 88.0],
        "released": [False, True, True],
        "instance": "gw/0",
    },
]


def test_every_chart_kind_builds_a_figure(db: Path) -> None:
    from app.views.diagnosis import BUILDERS, evidence_figure

    assert {c["kind"] for c in CHARTS} == set(BUILDERS)
    for chart in CHARTS:
        fig = evidence_figure(chart)
        assert fig is not None and fig.data, chart["kind"]
    for finding in diagnose(Store(db), "locks").findings:  # and what the detectors really emit
        assert evidence_figure(finding.evidence.get("chart")) is not None, finding.pattern
    assert evidence_figure(None) is None and evidence_figure({"kind": "unknown"}) is None


def test_every_pattern_has_a_card_title() -> None:
    from app.views.diagnosis import TITLES
    from tailscope.vocabulary import PATTERNS

    assert set(PATTERNS) <= set(TITLES)


def _write_run(path: Path, run: str, scenario: str, requests: int, seed: int) -> None:
    with Store(path).writer() as writer:
        conn = writer.cursor()
        for batch in simulate_api.simulate_columns(scenario, requests, seed):
            conn.register("page_batch", batch.to_arrow())
            conn.execute("INSERT INTO otel_traces SELECT *, ? FROM page_batch", [run]).fetchall()
            conn.unregister("page_batch")
        refresh_run(conn, run)


def test_the_diagnosis_shows_progress_and_is_cached_per_run_and_rules_version(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import dataclasses

    import tailscope.analysis.diagnosis as diagnosis_api
    from tailscope.analysis.diagnosis import run_version

    path = tmp_path / "store.duckdb"
    _write_run(path, "locks", "lock-contention", 600, 1)
    calls: list[list[float]] = []

    def counted(source, run=None, seed=0, max_spans=None, progress=None):
        steps: list[float] = []
        calls.append(steps)

        def heard(fraction: float, step: str) -> None:
            steps.append(fraction)
            progress(fraction, step)

        return diagnose(source, run, seed, max_spans, heard if progress else None)

    monkeypatch.setattr(diagnosis_api, "diagnose", counted)
    open_diagnosis(path, monkeypatch, "locks")
    assert len(calls) == 1 and len(calls[0]) > 5  # the page handed the diagnosis a progress bar
    assert calls[0] == sorted(calls[0]) and calls[0][-1] < 1.0
    version = run_version(Store(path), "locks")
    _write_run(path, "other", "steady", 300, 2)  # another run written: the cached diagnosis stands
    assert run_version(Store(path), "locks") == version
    open_diagnosis(path, monkeypatch, "locks")
    assert len(calls) == 1
    store = Store(path)  # a rule edit: diagnosed again
    with store.reading() as conn:
        rules = conn.stage_rules()
    store.replace_stage_rules([dataclasses.replace(rules[0], stage="postprocessing"), *rules[1:]])
    assert run_version(Store(path), "locks") != version
    open_diagnosis(path, monkeypatch, "locks")
    assert len(calls) == 2


def test_a_sampled_diagnosis_says_what_it_read_and_its_error() -> None:
    from app.views.diagnosis import sampling_note

    note = sampling_note(
        {
            "windows": 32,
            "window_s": 0.8,
            "time_fraction": 0.134,
            "spans_read": 135769,
            "spans_in_run": 999999,
            "p99_ms_95ci": [144.2, 181.2],
            "excess_ms_95ci": [142.4, 202.9],
        }
    )
    assert "32 windows of 0.8 s" in note and "13.4%" in note
    assert "144" in note and "181" in note and "--max-spans 0" in note
