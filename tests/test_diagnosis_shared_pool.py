"""A worker pool that a client with no trace fills: the traced calls' wait before the handler is a queue,
not the wire (tests/shared_pool_services.py)."""

from __future__ import annotations

from conftest import seed_variants

from tailscope.analysis.diagnosis import diagnose_frame
from tests.shared_pool_services import shared_pool_service


def _found(result) -> list:
    return [(f.pattern, round(f.confidence, 2)) for f in result.findings]


@seed_variants(3, 4)
def test_calls_waiting_for_workers_an_untraced_client_holds_are_queueing(seed: int) -> None:
    """The untraced client's SERVER spans (no parent) hold the pod's workers too: counted with the
    traced calls, the wait before the handler grows with the calls running (before: network 0.74)."""
    result = diagnose_frame(shared_pool_service(seed, saturated=True))
    assert result.findings[0].pattern == "queueing" and result.findings[0].confidence >= 0.8, _found(result)
    assert all(f.confidence < 0.5 for f in result.findings if f.pattern == "network"), _found(result)


@seed_variants(3, 4)
def test_late_packets_beside_the_same_untraced_client_stay_network(seed: int) -> None:
    """The twin: a few calls lose a packet on the way whatever the pool is doing; the untraced client's
    light load is counted the same way and explains none of it."""
    result = diagnose_frame(shared_pool_service(seed, saturated=False))
    assert result.findings[0].pattern == "network" and result.findings[0].confidence >= 0.8, _found(result)
    assert all(f.confidence < 0.5 for f in result.findings if f.pattern == "queueing"), _found(result)
