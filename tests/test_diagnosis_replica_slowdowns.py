"""Replicas that joined cold slow their own work as a whole, as a concurrent collector's marks do;
the warm-up settles as the replica ages, the marks recur: the first is cold_start with no gc_pause
beside it, the second keeps its gc_pause (tests/mechanism_replica_slowdowns.py)."""

from __future__ import annotations

from conftest import seed_variants

from tailscope.analysis.diagnosis import diagnose_frame
from tailscope.analysis.diagnosis.gc_assists import finding
from tailscope.analysis.diagnosis.long_stalls import warm_up_mask
from tailscope.analysis.diagnosis.model import Context
from tests.mechanism_frames import by_pattern
from tests.mechanism_replica_slowdowns import model_replicas


def _found(result) -> list:
    return [(f.pattern, round(f.confidence, 2), f.span_name) for f in result.findings]


@seed_variants(1, 2)
def test_replicas_warming_up_are_a_cold_start_not_a_collectors_marks(seed: int) -> None:
    result = diagnose_frame(model_replicas(seed, cause="cold"))
    found = by_pattern(result.findings)
    assert result.findings[0].pattern == "cold_start" and found["cold_start"] >= 0.8, _found(result)
    assert found.get("gc_pause", 0.0) < 0.3, _found(result)


@seed_variants(2, 1)  # seed 2's figure lies nearer its bound (bench/RESULTS.md, suite17)
def test_marks_that_recur_all_run_long_keep_their_gc_pause(seed: int) -> None:
    frame = model_replicas(seed, cause="marks")
    ctx = Context(frame)
    marks = finding(ctx, warm_up_mask(ctx))
    assert marks is not None and marks.confidence >= 0.35, marks and marks.evidence["stats"]
    assert marks.evidence["stats"]["settles_with_age"] < 0.1, marks.evidence["stats"]
    assert by_pattern(diagnose_frame(frame).findings).get("cold_start", 0.0) < 0.5
