"""Diagnosis end to end: simulated runs of every planted scenario go through the store and must be
named correctly (top finding = the planted cause; steady raises no false alarm), with the
alternative naming (no tailscope.stage attributes) and the Jaeger format too. Small runs only; the
big matrix is bench/accuracy.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tailscope.analysis.diagnosis import UnknownRunError, diagnose, list_runs
from tailscope.cli.main import main
from tailscope.store.duckdb.store import DuckDBStore as Store

simulate_api = pytest.importorskip("reference_pipeline.simulate.api")

# scenario -> the pattern it plants
PLANTED = {
    "burst": "queueing",
    "gc-pressure": "gc_pause",
    "lock-contention": "lock_contention",
    "cold-cache": "cache_miss",
    "key-expiry": "cache_miss",
    "slow-downstream": "slow_dependency",
    "cold-start": "cold_start",
    "network-jitter": "network",
}
REQUESTS = 1500


def _insert(conn, run: str, scenario: str, seed: int, naming: str = "reference") -> None:
    """Insert simulated spans straight into otel_traces (the loader's own tests cover ingest; its
    derived tables are not needed by the diagnosis, which reads spans only)."""
    for batch in simulate_api.simulate_columns(scenario, REQUESTS, seed, naming=naming):
        conn.register("diag_batch", batch.to_arrow())
        try:
            conn.execute("INSERT INTO otel_traces SELECT *, ? FROM diag_batch", [run]).fetchall()
        finally:
            conn.unregister("diag_batch")


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Store:
    db = tmp_path_factory.mktemp("diagnosis") / "store.duckdb"
    with Store(db).writer() as writer:
        conn = writer.cursor()  # a fresh cursor: nothing pending on it
        for i, scenario in enumerate(["steady", *PLANTED]):
            _insert(conn, scenario, scenario, seed=10 + i)
        _insert(conn, "steady-alt", "steady", seed=3, naming="alt")
        _insert(conn, "gc-pressure-alt", "gc-pressure", seed=7, naming="alt")
    return Store(db)


@pytest.mark.parametrize("scenario", sorted(PLANTED))
def test_top_finding_is_the_planted_cause(store: Store, scenario: str) -> None:
    result = diagnose(store, scenario)
    assert result.findings, f"{scenario}: no finding"
    top = result.findings[0]
    assert top.pattern == PLANTED[scenario], [(f.pattern, round(f.confidence, 2)) for f in result.findings]
    assert top.confidence > 0.5
    assert top.evidence["summary"] and top.evidence["stats"] and top.advice


@pytest.mark.parametrize("run", ["steady", "steady-alt"])
def test_steady_raises_no_false_alarm(store: Store, run: str) -> None:
    result = diagnose(store, run)
    loud = [(f.pattern, round(f.confidence, 2)) for f in result.findings if f.confidence > 0.5]
    assert all(p == "compute_bound" for p, _ in loud), loud


def test_alternative_naming_without_stage_attributes(store: Store) -> None:
    # (lock-contention in alt naming goes through the Jaeger test below; the rest: bench/accuracy.py)
    top = diagnose(store, "gc-pressure-alt").findings[0]
    assert top.pattern == "gc_pause"


def test_findings_are_sorted_and_carry_chart_data(store: Store) -> None:
    result = diagnose(store, "lock-contention")
    named = [f for f in result.findings if f.pattern != "unexplained_tail"]
    assert result.findings[: len(named)] == named  # where the rest of the tail goes comes last
    confidences = [f.confidence for f in named]
    assert confidences == sorted(confidences, reverse=True)
    assert all(0.0 <= c <= 1.0 for c in confidences)
    chart = result.findings[0].evidence["chart"]
    assert chart["kind"] == "wait_vs_concurrency" and len(chart["concurrency"]) == len(chart["duration_ms"])
    assert result.findings[0].evidence["stats"]["hold_ms"] > 0


def test_stall_timeline_shows_the_requests_caught_in_the_stall(store: Store) -> None:
    chart = diagnose(store, "gc-pressure").findings[0].evidence["chart"]
    assert chart["kind"] == "stall_timeline"
    lo, hi = chart["stall_ms"]
    assert [lo, hi] in chart["stalls_ms"]
    slow_spans = [
        (start, end)
        for start, end, slow in zip(chart["start_ms"], chart["end_ms"], chart["slow"], strict=True)
        if slow
    ]
    in_longest = [1 for start, end in slow_spans if start < hi and end > lo]
    in_a_stall = [1 for start, end in slow_spans if any(start < b and end > a for a, b in chart["stalls_ms"])]
    assert in_longest, "no slow span drawn overlaps the longest stall the chart is about"
    assert len(in_a_stall) >= 0.8 * len(slow_spans), (
        f"only {len(in_a_stall)} of {len(slow_spans)} slow spans drawn lie in a shaded stall"
    )


def test_stalls_the_runtime_does_not_report_as_gc_weigh_less(store: Store) -> None:
    """Where the runtime reports its GC pauses and they miss the stalls, the stalls are not GC."""
    import dataclasses

    from tailscope.analysis.diagnosis import diagnose_frame
    from tailscope.analysis.diagnosis.load import load_frame
    from tailscope.analysis.source import reading

    def gc_confidence(f) -> float:
        return max((x.confidence for x in diagnose_frame(f).findings if x.pattern == "gc_pause"), default=0.0)

    with reading(store) as shared:  # the detectors read span attributes while the source is open
        frame = load_frame(shared, "gc-pressure")
        assert len(frame.gc_time), "the simulated runtime reports its GC pauses"
        reported = gc_confidence(frame)
        elsewhere = dataclasses.replace(frame, gc_time=frame.gc_time - 3_600_000_000_000)  # an hour earlier
        assert reported > 0.8
        assert gc_confidence(elsewhere) < 0.75 * reported


def test_cache_miss_names_the_attribute_that_explains_the_slow_mode(store: Store) -> None:
    top = diagnose(store, "cold-cache").findings[0]
    stats = top.evidence["stats"]
    assert top.stage == "feature_hydration"
    assert "cache.hit" in stats["explained_by"] or "feature_store" in stats["explained_by"]
    assert 0.05 < stats["miss_rate"] < 0.95


def test_jaeger_format_is_diagnosed_too(tmp_path: Path) -> None:
    from ingest.loader import load_paths

    out = tmp_path / "lock.json"
    simulate_api.simulate_to_file(out, "lock-contention", REQUESTS, 21, naming="alt", fmt="jaeger")
    db = tmp_path / "j.duckdb"
    load_paths([out], db, "jaeger-lock")
    assert diagnose(Store(db), "jaeger-lock").findings[0].pattern == "lock_contention"


def test_unknown_run_lists_the_available_ones(store: Store) -> None:
    with pytest.raises(UnknownRunError) as info:
        diagnose(store, "nope")
    assert "steady" in info.value.available
    assert "steady" in list_runs(store)


def test_cli_json_report(store: Store, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["diagnose", "--db", str(store.path), "--run", "slow-downstream", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["run"] == "slow-downstream" and out["requests"] == REQUESTS
    first = out["findings"][0]
    assert set(first) == {"pattern", "confidence", "stage", "span_name", "evidence", "advice", "share"}
    assert first["pattern"] == "slow_dependency"
    assert "chart" not in first["evidence"]
    # each finding's share of the tail excess; all of them together never pass 100 %
    assert 0.3 <= first["share"] <= 1.0
    assert sum(fd["share"] or 0.0 for fd in out["findings"]) <= 1.0 + 1e-9
    assert out["tail"]["excess_ms"] > 0 and out["tail"]["p99_ms"] > out["tail"]["p50_ms"]


def test_cli_text_report_and_exit_codes(store: Store, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["diagnose", "--db", str(store.path), "--run", "burst"]) == 0
    text = capsys.readouterr().out
    assert "1. queueing" in text and "advice:" in text and "evidence:" in text
    assert "% of the tail excess" in text
    assert main(["diagnose", "--db", str(store.path), "--run", "missing"]) == 2
    err = capsys.readouterr().err
    assert "unknown run 'missing'" in err and "steady" in err
    assert main(["diagnose", "--db", str(store.path)]) == 2  # several runs: pick one
