"""Issue 25: what stretches a model server's spans, by mechanism (tests/mechanism_stalls.py): a long
input on a single worker is compute and a queue behind it, not a pause; a CPU quota's stalls on a
called embedder end on 100 ms boundaries even where one request is in flight at a time; a pause on a
callee's instance holds the caller's request; the forward's share of a tail the client sees."""

from __future__ import annotations

from tailscope.analysis.diagnosis import diagnose_frame
from tests.mechanism_services import gateway_service
from tests.mechanism_stalls import embedder_service


def _conf(result, pattern: str) -> float:
    return max((f.confidence for f in result.findings if f.pattern == pattern), default=0.0)


def _found(result) -> list:
    return [(f.pattern, round(f.confidence, 2), f.span_name) for f in result.findings]


def test_a_long_input_on_a_single_worker_is_not_a_pause() -> None:
    """The longest inputs hold the worker for 20-40 ms while the next requests wait: spans of several
    names slow at once, nothing finishing, yet the encode's time is what its token count predicts (no
    stretch): no gc_pause (before: 0.99) and no cpu_throttling."""
    result = diagnose_frame(embedder_service(2, behind_api=False))
    assert _conf(result, "gc_pause") < 0.5, _found(result)
    assert _conf(result, "cpu_throttling") < 0.5, _found(result)


def test_an_input_that_drives_the_forward_is_not_a_large_payload() -> None:
    """The embedder's span grows with embedder.tokens only through the forward pass inside it: that
    is compute, not a payload's handling (before: large_payload 0.90 on 'Embed')."""
    result = diagnose_frame(embedder_service(2, behind_api=True))
    assert _conf(result, "large_payload") < 0.5, _found(result)
    assert all(f.confidence < 0.5 for f in result.findings if f.pattern != "compute_bound"), _found(result)


def test_quota_stalls_on_a_called_embedder_are_cpu_throttling() -> None:
    """One request at a time on each embedder: a quota stall stretches one span and ends on the
    period boundary. Named on the embedder's instances though the request is the search API's
    (before: large_payload 0.68 only)."""
    result = diagnose_frame(embedder_service(2, behind_api=True, throttled=True))
    top = result.findings[0]
    assert top.pattern == "cpu_throttling" and top.confidence >= 0.8, _found(result)
    assert all(i.startswith("embedder/") for i in top.evidence["stats"]["instances"]), top.evidence["stats"]
    assert _conf(result, "gc_pause") < 0.5 and _conf(result, "large_payload") < 0.5, _found(result)


def test_the_forward_is_weighed_against_the_tail_the_client_sees() -> None:
    """A paused gateway makes the tail its clients see; the model's forward behind it varies by a few
    ms. compute_bound is not a cause of that tail (before: 0.95 beside gc_pause 1.00); without the
    pauses the forward is the client's tail too and compute_bound stays."""
    paused = diagnose_frame(gateway_service(11, True, forward_stage=True))
    assert paused.findings[0].pattern == "gc_pause", _found(paused)
    assert _conf(paused, "compute_bound") < 0.5, _found(paused)
    calm = diagnose_frame(gateway_service(11, False, forward_stage=True))
    assert _conf(calm, "compute_bound") >= 0.8, _found(calm)


def test_replicas_joining_beside_warm_instances_are_a_cold_start() -> None:
    """Three instances warm all run long, two replicas join mid-run: the first requests of the
    warm three (not their first ever) fill the early buckets and hid the new ones' warm-up (before:
    unexplained_tail only). The warm-up is measured on the instances that appear mid-run too."""
    from tests.mechanism_stalls import replicas_added

    result = diagnose_frame(replicas_added(4))
    top = result.findings[0]
    assert top.pattern == "cold_start" and top.confidence >= 0.8, _found(result)
    assert top.evidence["stats"]["warmup_requests_per_instance"] >= 30, top.evidence["stats"]
