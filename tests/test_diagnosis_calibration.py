"""The calibration gate (calibration.py): a finding whose mechanism's own signature is absent is capped
under 0.5 and says so; one whose signature is there is kept; a finding judged part of another, or
already under the cap, is left alone. Hand-built findings for each signature test; the traces from the
mechanism are in test_diagnosis_dependency_tail.py (a ceiling-less tail alone, capped; an episode,
kept)."""

from __future__ import annotations

import pytest

from tailscope.analysis.diagnosis import calibration
from tailscope.analysis.diagnosis.dependency_tail import COSTLY, EPISODE, STRAGGLER, UNBOUNDED
from tailscope.analysis.diagnosis.model import Finding


def _finding(pattern: str, confidence: float, **stats) -> Finding:
    evidence = {"summary": "A tail.", "stats": stats}
    return Finding(pattern, confidence, "downstream", "GET profile", evidence, "")


@pytest.mark.parametrize("kind", [EPISODE, STRAGGLER, COSTLY])
def test_a_dependency_slower_than_its_normal_is_kept(kind: str) -> None:
    fd = calibration.gate([_finding("slow_dependency", 0.93, unusual_kind=kind)])[0]
    assert fd.confidence == 0.93
    assert "signature_absent" not in fd.evidence["stats"]
    assert fd.evidence["summary"] == "A tail."


def test_a_dependency_whose_only_trait_is_a_ceiling_less_tail_is_capped() -> None:
    fd = calibration.gate([_finding("slow_dependency", 0.88, unusual_kind=UNBOUNDED)])[0]
    assert fd.confidence == calibration.CAP < 0.5
    assert fd.evidence["stats"]["confidence_before_gate"] == 0.88
    assert "ceiling-less" in fd.evidence["stats"]["signature_absent"]
    assert "signature is absent" in fd.evidence["summary"]


def test_the_gate_leaves_part_of_findings_and_possible_causes_alone() -> None:
    part = _finding("slow_dependency", 0.8, unusual_kind=UNBOUNDED, part_of="timeout_retry")
    low = _finding("slow_dependency", 0.3, unusual_kind=UNBOUNDED)
    other = _finding("gc_pause", 0.9)
    out = calibration.gate([part, low, other])
    assert [f.confidence for f in out] == [0.8, 0.3, 0.9]
    assert all("signature_absent" not in f.evidence["stats"] for f in out)


def test_signature_tests_are_pure() -> None:
    stats = {"unusual_kind": UNBOUNDED}
    assert calibration.slow_dependency_absent(stats) is not None
    assert stats == {"unusual_kind": UNBOUNDED}
    assert calibration.slow_dependency_absent({"unusual_kind": EPISODE}) is None
    assert calibration.slow_dependency_absent({}) is None


def test_network_findings_are_not_gated() -> None:
    """No network signature test is kept (see calibration.py): a gap finding passes unchanged, whether a
    lossy wire's gaps fall in a planted pause's stalls or a long path's jitter is a spread."""
    stalled = _finding("network", 0.63, large_gaps_in_server_stalls=0.365, shifted_fraction=0.35)
    spread = _finding("network", 0.99, large_gaps_in_server_stalls=0.0, shifted_fraction=0.0005)
    assert [f.confidence for f in calibration.gate([stalled, spread])] == [0.63, 0.99]
