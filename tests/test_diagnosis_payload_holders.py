"""Stalls held by work that grew with its payload are the payload's (payload_holders.settle): a new client
uploads larger images from a quarter of the run; their decode keeps the interpreter lock in turns and
every other thread's spans stretch together, which the stall detectors read as a pause (gpu-torch
image-growth on Zipkin: gc_pause 0.69 above large_payload 0.55). The same stalls held by work that did not
grow, or covered by the runtime's reported collections, keep their reading."""

from __future__ import annotations

from tailscope.analysis.diagnosis import payload_holders
from tailscope.analysis.diagnosis.model import Finding


def _findings(holder: str = "image.decode", reported: float | None = None, changed: bool = True):
    payload = Finding("large_payload", 0.55, "parsing", "image.decode",
                      {"summary": "", "stats": {"size_attribute": "image.bytes", "sizes_changed": changed,
                                                "tail_excess_share": 0.07}}, "")
    lock = Finding("lock_contention", 0.33, None, None,
                   {"summary": "", "stats": {"mechanism": "interpreter_lock", "holder": holder,
                                             "held_share": 0.95, "tail_excess_share": 0.5}}, "")
    stall = Finding("gc_pause", 0.69, None, None,
                    {"summary": "", "stats": {"tail_excess_share": 0.5,
                                              "tail_excess_share_in_reported_gc": reported}}, "")
    return payload_holders.settle([payload, lock, stall])


def test_stalls_held_by_a_decode_that_grew_with_its_images_are_the_payloads() -> None:
    payload, lock, stall = _findings()
    assert stall.confidence < 0.5 and stall.evidence["stats"]["part_of"] == "large_payload"
    assert lock.evidence["stats"]["part_of"] == "large_payload"
    assert payload.confidence == 0.55


def test_stalls_held_by_other_work_or_reported_as_collections_stay() -> None:
    assert _findings(holder="export.render")[2].confidence == 0.69
    assert _findings(reported=0.6)[2].confidence == 0.69
    assert _findings(changed=False)[2].confidence == 0.69
