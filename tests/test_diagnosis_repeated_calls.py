"""Calls repeated once per item (N+1 queries, s10 class C) are large_payload: the request's time in
them grows with its item count. A parallel fan-out per item (its calls overlap) and store reads made
only for a cache's missing keys (fewer calls than items) are not N+1."""

from __future__ import annotations

from tailscope.analysis.diagnosis import diagnose_frame
from tests.repeated_call_services import listing_service


def _found(result) -> list:
    return [(f.pattern, round(f.confidence, 2), f.span_name) for f in result.findings]


def _per_item(result) -> list:
    return [f for f in result.findings if f.evidence.get("stats", {}).get("repeated_calls")]


def test_a_query_per_item_is_a_large_payload_named_n_plus_one() -> None:
    result = diagnose_frame(listing_service(1, "per_item"))
    top = result.findings[0]
    assert top.pattern == "large_payload" and top.confidence >= 0.5, _found(result)
    assert top.span_name == "SELECT prices" and "N+1" in top.evidence["summary"], _found(result)
    assert top.evidence["stats"]["size_attribute"] == "list.items"


def test_a_parallel_fan_out_per_item_is_not_n_plus_one() -> None:
    result = diagnose_frame(listing_service(1, "fan_out"))
    assert not _per_item(result), _found(result)


def test_store_reads_for_missing_keys_only_are_not_n_plus_one() -> None:
    result = diagnose_frame(listing_service(1, "cache_misses"))
    assert not _per_item(result), _found(result)
