"""Attempts a proxy cuts at its per-try timeout and sends again, seen only as two SERVER spans of the
callee under one CLIENT span (s10 class D), are timeout_retry, the slow call part of it; a hedge (a
second copy after a delay, the first answer taken) is not; nor is a straggler replica whose calls the
timeout rarely cuts. The client's time over one attempt's is then not the wire's (network)."""

from __future__ import annotations

from tailscope.analysis.diagnosis import diagnose_frame
from tests.proxy_retry_services import proxied_caller


def _found(result) -> list:
    return [
        (f.pattern, round(f.confidence, 2), f.span_name, f.evidence.get("stats", {}).get("part_of"))
        for f in result.findings
    ]


def _conf(result, pattern: str) -> float:
    return max((f.confidence for f in result.findings if f.pattern == pattern), default=0.0)


def test_attempts_cut_by_a_proxys_per_try_timeout_are_timeout_retry() -> None:
    result = diagnose_frame(proxied_caller(1, "retry"))
    top = result.findings[0]
    assert top.pattern == "timeout_retry" and top.confidence >= 0.5, _found(result)
    assert top.evidence["stats"]["attempts_below_one_call"], _found(result)
    assert _conf(result, "slow_dependency") < top.confidence, _found(result)
    assert _conf(result, "network") < 0.5, _found(result)  # the time between attempts is no wire


def test_a_hedged_call_taking_the_first_answer_is_not_a_timeout_retry() -> None:
    result = diagnose_frame(proxied_caller(1, "hedge", slow_ms=200.0))
    assert _conf(result, "timeout_retry") < 0.5, _found(result)
    assert _conf(result, "network") < 0.5, _found(result)


def test_a_straggler_answering_most_calls_under_the_timeout_is_not_a_timeout_retry() -> None:
    result = diagnose_frame(proxied_caller(1, "retry", slow_ms=60.0))
    assert _conf(result, "timeout_retry") < 0.5, _found(result)
