"""Requests that grew make the model's forward grow (s10 class B): where the sizes a call carries
changed during the run and its whole time, the forward inside included, follows them, the cause is
the payload (large_payload, the busy model part of it); where more requests arrive at the same sizes,
the model running out of time stays compute_bound and the payload is no cause.
"""

from __future__ import annotations

from tailscope.analysis.diagnosis import diagnose_frame
from tailscope.analysis.diagnosis.model import Finding
from tailscope.analysis.diagnosis.runner import arbitrate
from tests.grown_request_services import ranking_service


def _found(result) -> list:
    return [
        (f.pattern, round(f.confidence, 2), f.span_name, f.evidence.get("stats", {}).get("part_of"))
        for f in result.findings
    ]


def _conf(result, pattern: str) -> float:
    return max((f.confidence for f in result.findings if f.pattern == pattern), default=0.0)


def test_larger_requests_from_a_rollout_are_a_large_payload_not_a_busy_model() -> None:
    result = diagnose_frame(ranking_service(1, larger_requests=True))
    assert result.findings[0].pattern == "large_payload" and result.findings[0].confidence >= 0.5, _found(
        result
    )
    assert "forward_inside" in result.findings[0].evidence["stats"], _found(result)


def test_more_requests_of_the_same_size_are_no_large_payload() -> None:
    """The forward follows the items here too (rho ~0.7), but the sizes never changed: the model's
    time per item is its normal cost, not a payload that grew."""
    result = diagnose_frame(ranking_service(1, larger_requests=False, more=1.4))
    assert _conf(result, "large_payload") < 0.5, _found(result)
    grown = [f for f in result.findings if "forward_inside" in f.evidence.get("stats", {})]
    assert not grown, _found(result)


def _finding(pattern: str, confidence: float, span: str, **stats) -> Finding:
    return Finding(pattern, confidence, None, span, {"summary": "", "stats": stats}, "")


def test_a_busy_model_inside_grown_requests_is_part_of_the_payload() -> None:
    payload = _finding(
        "large_payload", 0.6, "Rank", size_attribute="request.items", forward_inside=["model.forward"]
    )
    model = _finding("compute_bound", 0.95, "model.forward")
    other = _finding("compute_bound", 0.95, "embed")  # a forward outside the grown call: not its part
    arbitrate([model, payload, other])
    assert model.confidence < payload.confidence and model.evidence["stats"]["part_of"] == "large_payload"
    assert other.confidence == 0.95 and "part_of" not in other.evidence["stats"]
