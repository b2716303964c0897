"""Two causes at once: a mechanism that is surely present and carries a material share of the tail
excess (>= 15 %) is named at >= 0.5 beside a larger cause, not only when it dominates. Each case was
missed before (confidence in brackets) although the simulator's own accounting gives the second
cause 19-27 % of the tail excess (bench/ground_truth.py)."""

from __future__ import annotations

import pytest

from tailscope.analysis.diagnosis import diagnose
from tailscope.store.duckdb.store import DuckDBStore as Store

simulate_api = pytest.importorskip("reference_pipeline.simulate.api")
loader = pytest.importorskip("ingest.loader")
REQUESTS = 3000


def diagnosed(tmp_path, scenario: str, seed: int, load: float, workers: int, **options):
    out = tmp_path / "run.jsonl"
    simulate_api.simulate_to_file(out, scenario, REQUESTS, seed, load=load, workers=workers, **options)
    loaded = loader.load_paths([out], tmp_path / "store.duckdb", "run")
    assert not loaded.failed, [f.error for f in loaded.failed]
    findings = diagnose(Store(tmp_path / "store.duckdb"), "run").findings
    return {f.pattern: f.confidence for f in reversed(findings)}, findings


def test_a_heavy_tailed_dependency_beside_a_burst(tmp_path) -> None:
    # queueing carries ~72 % of the excess, the dependency ~27 % (was slow_dependency 0.27)
    found, findings = diagnosed(tmp_path, "burst+slow-downstream", 4, 0.5, 3, naming="alt")
    assert found["queueing"] >= 0.5 and found.get("slow_dependency", 0) >= 0.5, findings


def test_reported_gc_pauses_beside_a_slow_dependency(tmp_path) -> None:
    # the runtime reports pauses covering ~20 % of the tail excess (was gc_pause 0.08)
    found, findings = diagnosed(tmp_path, "gc-pressure+slow-downstream", 1, 0.5, 3, naming="alt")
    assert found["slow_dependency"] >= 0.5 and found.get("gc_pause", 0) >= 0.5, findings


def test_pauses_seen_by_timing_alone_beside_a_slow_dependency(tmp_path) -> None:
    # another shape (gateway + model server, host/pid instances), no GC events: the process finished
    # nothing for longer than the median request in stalls carrying ~19 % of the excess; the slow
    # calls raise the arrival rate seen near stalls, which read as a burst (was gc_pause 0.15)
    found, findings = diagnosed(
        tmp_path, "gc-pressure+slow-downstream", 3, 0.4, 2, topology="gateway", gc_events=False
    )
    assert found["slow_dependency"] >= 0.5 and found.get("gc_pause", 0) >= 0.5, findings
    assert not [
        f for f in findings if f.pattern not in ("gc_pause", "slow_dependency") and f.confidence >= 0.5
    ]
