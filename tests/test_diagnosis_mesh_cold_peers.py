"""A replica that joins mid-run cold, seen through a sidecar's outbound span between the caller's call
and the replica's SERVER span, is cold_start on the call, and slow_dependency on the sidecar's span
is part of it; a replica joining warm while every replica is slow for a while is not a cold start
(tests/mechanism_mesh_calls.py)."""

from __future__ import annotations

from conftest import seed_variants

from tailscope.analysis.diagnosis import diagnose_frame
from tests.mechanism_frames import by_pattern
from tests.mechanism_mesh_calls import mesh_scorer


def _found(result) -> list:
    return [(f.pattern, round(f.confidence, 2), f.span_name) for f in result.findings]


@seed_variants(1, 2)
def test_a_cold_replica_behind_a_sidecar_is_a_cold_start(seed: int) -> None:
    result = diagnose_frame(mesh_scorer(seed, joins="cold"))
    top = result.findings[0]
    assert top.pattern == "cold_start" and top.confidence >= 0.8, _found(result)
    stats = top.evidence["stats"]
    assert stats["peer"] == "ranker/2" and "ranker:8001/*" in stats["call_names"], stats
    assert by_pattern(result.findings).get("slow_dependency", 0.0) < 0.5, _found(result)


@seed_variants(1, 2)
def test_a_replica_joining_warm_while_all_are_slow_is_no_cold_start(seed: int) -> None:
    result = diagnose_frame(mesh_scorer(seed, joins="warm"))
    assert by_pattern(result.findings).get("cold_start", 0.0) < 0.5, _found(result)
