"""network: large client-server gaps that a server's start makes (an environment's init before its first
invoke) are not the wire; a wire that loses packets on any call still is."""

from __future__ import annotations

from tailscope.analysis.diagnosis import diagnose_frame
from tests.mechanism_frames import by_pattern
from tests.mechanism_paths import environments_service


def test_inits_before_each_environments_first_invoke_are_not_network() -> None:
    found = by_pattern(diagnose_frame(environments_service(61, cold_inits=True)).findings)
    assert found.get("network", 0.0) < 0.5, found


def test_inits_marked_by_a_coldstart_attribute_are_not_network_without_instance_names() -> None:
    frame = environments_service(62, cold_inits=True, one_identity=True, coldstart_attribute=True)
    found = by_pattern(diagnose_frame(frame).findings)
    assert found.get("network", 0.0) < 0.5, found


def test_lost_packets_on_any_call_stay_network_beside_inits() -> None:
    found = by_pattern(diagnose_frame(environments_service(63, cold_inits=True, lossy_wire=0.03)).findings)
    assert found.get("network", 0.0) >= 0.5, found


def test_lost_packets_on_any_call_are_network() -> None:
    found = by_pattern(diagnose_frame(environments_service(64, cold_inits=False, lossy_wire=0.03)).findings)
    assert found.get("network", 0.0) >= 0.5, found
