"""An untraced model server's queue during bursts, its wait inside the caller's call and the sidecar
span a stage rule reads as the model's forward, is queueing; compute_bound and slow_dependency on the
sidecar's span are part of it. Without bursts, a model whose own time has a heavy tail stays
compute_bound / slow_dependency (tests/mechanism_mesh_calls.py)."""

from __future__ import annotations

from conftest import seed_variants

from tailscope.analysis.diagnosis import diagnose_frame
from tests.mechanism_frames import by_pattern
from tests.mechanism_mesh_calls import queued_model


def _found(result) -> list:
    return [(f.pattern, round(f.confidence, 2), f.span_name) for f in result.findings]


@seed_variants(2, 1)  # seed 2's figure lies nearer its bound (bench/RESULTS.md, suite17)
def test_a_queue_inside_the_call_is_not_the_models_compute(seed: int) -> None:
    result = diagnose_frame(queued_model(seed, bursts=True))
    found = by_pattern(result.findings)
    assert result.findings[0].pattern == "queueing" and found["queueing"] >= 0.8, _found(result)
    assert found.get("compute_bound", 0.0) < 0.5 and found.get("slow_dependency", 0.0) < 0.5, _found(result)
    parts = [f for f in result.findings if f.pattern == "compute_bound"]
    assert parts and parts[0].evidence["stats"]["part_of"] == "queueing"


@seed_variants(1, 2)
def test_a_model_slow_on_its_own_under_steady_load_stays_compute_bound(seed: int) -> None:
    found = by_pattern(diagnose_frame(queued_model(seed, bursts=False)).findings)
    assert found.get("compute_bound", 0.0) >= 0.8 and found.get("queueing", 0.0) < 0.5, found
