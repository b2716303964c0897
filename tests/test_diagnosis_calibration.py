"""The calibration gate (calibration.py) applies what a detector's own signature test found: a finding
whose detector recorded its mechanism's signature absent (`stats.signature_absent`) is held under 0.5
wherever a later step (a merge, an arbitration) lifted it, and says so; the gate tests no signature
itself (each is tested once, in its mechanism's module: dependency_tail.signature_absent for
slow_dependency). A finding judged part of another, or under the cap, is left alone. The traces from
the mechanism are in test_diagnosis_dependency_tail.py (a ceiling-less tail alone, capped by the
detector; an episode, kept)."""

from __future__ import annotations

import pytest

from tailscope.analysis.diagnosis import calibration
from tailscope.analysis.diagnosis.dependency_tail import (
    COSTLY,
    EPISODE,
    STRAGGLER,
    UNBOUNDED,
    signature_absent,
)
from tailscope.analysis.diagnosis.model import Finding


def _finding(pattern: str, confidence: float, **stats) -> Finding:
    evidence = {"summary": "A tail.", "stats": stats}
    return Finding(pattern, confidence, "downstream", "GET profile", evidence, "")


@pytest.mark.parametrize("kind", [EPISODE, STRAGGLER, COSTLY])
def test_a_dependency_slower_than_its_normal_has_its_signature(kind: str) -> None:
    assert signature_absent(kind) is None


@pytest.mark.parametrize("kind", [UNBOUNDED, None])
def test_a_ceiling_less_or_usual_tail_lacks_it(kind: str | None) -> None:
    assert signature_absent(kind)


def test_the_gate_tests_no_signature_itself() -> None:
    """A ceiling-less tail the detector kept (no verdict recorded) passes: the one test is the
    detector's, with its one threshold."""
    fd = calibration.gate([_finding("slow_dependency", 0.88, unusual_kind=UNBOUNDED)])[0]
    assert fd.confidence == 0.88
    assert fd.evidence["summary"] == "A tail."


def test_a_finding_lifted_over_its_detectors_verdict_is_held() -> None:
    """A detector capped a finding (signature absent) and a merge lifted it (merge_nested takes the
    larger of two nested findings): the gate holds it at the cap and says why."""
    why = "its only unusual trait is a ceiling-less top 1 %"
    fd = calibration.gate([_finding("slow_dependency", 0.88, signature_absent=why)])[0]
    assert fd.confidence == calibration.CAP < 0.5
    assert fd.evidence["stats"]["confidence_before_cap"] == 0.88
    assert "signature is absent" in fd.evidence["summary"]
    kept = calibration.gate([_finding("gc_pause", 0.45, signature_absent="no stop")])[0]
    assert kept.confidence == 0.45 and kept.evidence["summary"] == "A tail."


def test_the_gate_leaves_part_of_findings_and_possible_causes_alone() -> None:
    why = "no episode"
    part = _finding("slow_dependency", 0.8, signature_absent=why, part_of="timeout_retry")
    low = _finding("slow_dependency", 0.3, signature_absent=why)
    other = _finding("gc_pause", 0.9)
    out = calibration.gate([part, low, other])
    assert [f.confidence for f in out] == [0.8, 0.3, 0.9]
    assert all("confidence_before_cap" not in f.evidence["stats"] for f in out)


def test_network_findings_are_not_gated() -> None:
    """No network signature test is kept (see calibration.py): a gap finding passes unchanged, whether a
    lossy wire's gaps fall in a planted pause's stalls or a long path's jitter is a spread."""
    stalled = _finding("network", 0.63, large_gaps_in_server_stalls=0.365, shifted_fraction=0.35)
    spread = _finding("network", 0.99, large_gaps_in_server_stalls=0.0, shifted_fraction=0.0005)
    assert [f.confidence for f in calibration.gate([stalled, spread])] == [0.63, 0.99]
