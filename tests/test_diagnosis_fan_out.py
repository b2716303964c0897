"""Issue 25: an aggregator that calls several services side by side (tests/mechanism_services.py's
fan_out_service). Its latency is the slowest branch, so the request stays the aggregator's (it is not a
proxy tier forwarding to one callee); calls of one name to several peers (HTTP clients name a span by
its method) are told apart by the peer that answered."""

from __future__ import annotations

from tailscope.analysis.diagnosis import diagnose_frame
from tests.mechanism_calls import fan_out_service


def _conf(result, pattern: str) -> float:
    return max((f.confidence for f in result.findings if f.pattern == pattern), default=0.0)


def _found(result) -> list:
    return [(f.pattern, round(f.confidence, 2), f.span_name) for f in result.findings]


def test_a_fan_out_stays_the_aggregators_request() -> None:
    frame = fan_out_service(3)
    roots = {frame.names[frame.name[r]] for r in frame.requests.root}
    assert roots == {"GET /home"}


def test_the_slow_branch_of_a_fan_out_is_a_slow_dependency_not_a_cache() -> None:
    """The hanging inventory calls share the CLIENT name 'GET' with the profile calls: the callee's
    SERVER span under the slow ones says which peer answered, not that a store was called on a miss."""
    result = diagnose_frame(fan_out_service(3))
    assert result.findings[0].pattern == "slow_dependency", _found(result)
    assert result.findings[0].confidence >= 0.8, _found(result)
    assert _conf(result, "cache_miss") < 0.5, _found(result)
    # where it acts: the peer whose calls carry the tail, not the aggregator
    assert result.findings[0].evidence["stats"]["callee_service"] == "inventory"


def test_a_healthy_fan_out_raises_nothing() -> None:
    result = diagnose_frame(fan_out_service(3, slow_branch=False))
    assert all(f.confidence < 0.5 for f in result.findings if f.pattern != "compute_bound"), _found(result)


def test_a_retried_branch_beside_calls_of_its_name_to_other_peers_is_timeout_retry() -> None:
    """Three 'GET'/'POST' calls side by side; the inventory one is cut at 30 ms and made again. Grouped
    by parent alone the calls are side by side (a fan-out, no retry); by parent and peer they are a
    retry. The call's own tail is then the retry's, not a slow dependency of its own."""
    result = diagnose_frame(fan_out_service(4, deadline_ms=30.0))
    assert result.findings[0].pattern == "timeout_retry", _found(result)
    assert result.findings[0].confidence >= 0.8
    assert abs(result.findings[0].evidence["stats"]["timeout_ms"] - 30.1) < 1.0
    assert _conf(result, "slow_dependency") < 0.5, _found(result)


def test_a_call_slowed_by_a_payload_step_inside_the_callee_is_part_of_large_payload() -> None:
    """The call's tail is the callee's encoding of large answers: large_payload names the step, and
    the call is not a slow dependency of its own (what is left of its tail once the payload's share is
    taken out is small)."""
    from tests.mechanism_calls import payload_callee_service

    result = diagnose_frame(payload_callee_service(5))
    assert result.findings[0].pattern == "large_payload", _found(result)
    assert _conf(result, "slow_dependency") < 0.5, _found(result)


def test_a_service_calling_two_services_in_turn_stays_the_request() -> None:
    """The longest of the two calls changes from request to request: no single callee is forwarded
    to, so the request is the search API's (before: split between the embedder's and the index's
    spans, request by request)."""
    from tests.mechanism_calls import two_call_service

    frame = two_call_service(6)
    assert {frame.names[frame.name[r]] for r in frame.requests.root} == {"GET /v1/search"}
    result = diagnose_frame(frame)
    assert all(f.confidence < 0.5 for f in result.findings if f.pattern != "compute_bound"), _found(result)


def test_transfer_time_that_follows_the_response_size_is_large_payload_not_network() -> None:
    """The embedder's large answers take 15 ms per MB to come back after its span has ended: the
    client - server gap grows with rpc.response.size (sizes in two modes: 3 KB and 0.2-4 MB)."""
    from tests.mechanism_calls import two_call_service

    result = diagnose_frame(two_call_service(6, transfer_ms_per_mb=15.0))
    top = result.findings[0]
    assert top.pattern == "large_payload" and top.confidence >= 0.8, _found(result)
    assert top.evidence["stats"]["size_attribute"] == "rpc.response.size"
    assert top.evidence["stats"]["callee_service"] == "embedder"
    assert _conf(result, "network") < 0.5, _found(result)
