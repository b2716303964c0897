"""Issue 25's mechanism rules on traces built from the mechanism (tests/mechanism_frames.py): each
test plants one physical cause and checks the diagnosis names it, and does not name another."""

from __future__ import annotations

from tailscope.analysis.diagnosis import diagnose_frame
from tests.mechanism_frames import TraceBuilder, diagnosed, lognormal
from tests.mechanism_services import (
    BASE,
    autoscaled_service,
    burst_replicas,
    calling_service,
    gateway_service,
    payload_service,
    planted_pauses,
    stalled_service,
    two_mode_service,
    worker_pool_service,
)


def _conf(result, pattern: str) -> float:
    return max((f.confidence for f in result.findings if f.pattern == pattern), default=0.0)


def test_two_modes_without_a_cache_are_not_a_cache_miss() -> None:
    result = diagnose_frame(two_mode_service(1))
    assert _conf(result, "cache_miss") < 0.5, [(f.pattern, round(f.confidence, 2)) for f in result.findings]


def test_two_modes_with_a_store_call_on_the_slow_path_are_a_cache_miss() -> None:
    result = diagnosed(two_mode_service, 2, child_on_slow=True)
    assert result.findings[0].pattern == "cache_miss"
    assert result.findings[0].confidence >= 0.5
    assert "slow path" in result.findings[0].evidence["stats"]["cache_evidence"]


def test_two_modes_with_a_hit_attribute_are_a_cache_miss() -> None:
    result = diagnose_frame(two_mode_service(3, hit_attribute=True))
    assert result.findings[0].pattern == "cache_miss" and result.findings[0].confidence >= 0.5


def test_pauses_beside_a_heavy_tailed_dependency_are_named() -> None:
    """Stop-the-world pauses on both instances and a dependency whose rare slow calls own the p99:
    the pauses are the rare slow mode of whatever span they hit, named gc_pause, not cache_miss."""
    b = TraceBuilder(7)
    pauses = planted_pauses(b, ["api/0", "api/1"], 5000.0, (80.0, 150.0), 45_000.0)
    for t in b.arrivals(4000, 100):
        b.new_trace()
        inst = f"api/{int(b.rng.integers(2))}"
        root = b.span(None, "POST /rank", "Server", inst, t, 0.0)
        cur = t + 0.05
        for name, kind, median, sigma in [*BASE[:2], ("GET ranker", "Client", 2.5, 0.3), BASE[2]]:
            work = lognormal(b.rng, median, sigma)
            if kind == "Client" and b.rng.random() < 0.08:
                work += 40.0 * b.rng.pareto(1.3)
            end = pauses.run(inst, cur, work)
            b.span(root, name, kind, inst, cur, end - cur)
            cur = end + 0.02
        b.set_end(root, cur + 0.05)
    result = diagnose_frame(b.frame())
    found = [(f.pattern, round(f.confidence, 2)) for f in result.findings]
    assert _conf(result, "slow_dependency") >= 0.5, found
    assert _conf(result, "gc_pause") >= 0.5, found
    assert _conf(result, "cache_miss") < 0.5, found


def test_a_deadline_and_a_retry_are_named_timeout_retry() -> None:
    result = diagnose_frame(calling_service(11, deadline_ms=50.0))
    top = result.findings[0]
    assert top.pattern == "timeout_retry" and top.confidence >= 0.5, [
        (f.pattern, round(f.confidence, 2)) for f in result.findings
    ]
    stats = top.evidence["stats"]
    assert 49.0 <= stats["timeout_ms"] <= 51.0
    assert 0.02 <= stats["retry_rate"] <= 0.06
    assert stats["first_attempt_error_rate"] > 0.9 and stats["peer"] == "ranker"
    assert stats["service"] == "api" and stats["instances"]
    assert "deadline" in top.advice and "retry budget" in top.advice and "Hedge" in top.advice
    assert _conf(result, "cache_miss") < 0.5
    assert _conf(result, "slow_dependency") < top.confidence


def test_repeated_calls_without_a_deadline_are_not_a_timeout() -> None:
    for frame in (calling_service(12, deadline_ms=None), calling_service(13, None, fan_out=True)):
        result = diagnose_frame(frame)
        found = [(f.pattern, round(f.confidence, 2)) for f in result.findings]
        assert _conf(result, "timeout_retry") < 0.5, found


def test_time_that_grows_with_the_payload_is_large_payload() -> None:
    result = diagnosed(payload_service, 21, grows=True)
    top = result.findings[0]
    assert top.pattern == "large_payload" and top.confidence >= 0.5, [
        (f.pattern, round(f.confidence, 2)) for f in result.findings
    ]
    stats = top.evidence["stats"]
    assert top.span_name == "render" and stats["size_attribute"] == "http.response.body.size"
    assert stats["size_on"] == "request root"
    assert 15.0 <= stats["ms_per_mb"] <= 35.0 and stats["service"] == "api"
    assert "compress" in top.advice and "paginate" in top.advice
    assert _conf(result, "cache_miss") < 0.5 and _conf(result, "compute_bound") < 0.5


def test_sizes_that_do_not_drive_the_tail_are_not_large_payload() -> None:
    result = diagnose_frame(payload_service(22, grows=False))
    found = [(f.pattern, round(f.confidence, 2)) for f in result.findings]
    assert _conf(result, "large_payload") < 0.5, found


def test_stalls_ending_on_quota_periods_are_cpu_throttling() -> None:
    result = diagnose_frame(stalled_service(31, throttled=True))
    found = [(f.pattern, round(f.confidence, 2)) for f in result.findings]
    top = result.findings[0]
    assert top.pattern == "cpu_throttling" and top.confidence >= 0.5, found
    assert _conf(result, "gc_pause") < 0.5, found
    assert top.evidence["stats"]["stall_end_phase_z"] > 4 and "CPU limit" in top.advice
    assert "GC" in top.advice  # advice for both


def test_a_quota_running_out_at_one_point_of_each_busy_period_is_cpu_throttling() -> None:
    """At a sustained peak the quota runs out at about the same point of each throttled period (stalls
    of 25-40 ms): the starts keep a loose phase as well, so the Rayleigh end-vs-start order cannot tell
    them apart (before: gc_pause 0.9x); the ends sit on the boundary, the starts spread over 15 ms."""
    result = diagnose_frame(stalled_service(34, throttled=True, lengths=(25.0, 40.0)))
    found = [(f.pattern, round(f.confidence, 2)) for f in result.findings]
    top = result.findings[0]
    assert top.pattern == "cpu_throttling" and top.confidence >= 0.5, found
    assert _conf(result, "gc_pause") < 0.5, found
    stats = top.evidence["stats"]
    assert stats["stall_ends_within_2ms_share"] > 2 * stats["stall_starts_within_2ms_share"], stats


def test_pauses_at_random_moments_stay_gc_pause() -> None:
    result = diagnose_frame(stalled_service(32, throttled=False))
    found = [(f.pattern, round(f.confidence, 2)) for f in result.findings]
    assert result.findings[0].pattern == "gc_pause" and result.findings[0].confidence >= 0.5, found
    assert _conf(result, "cpu_throttling") < 0.5, found
    assert "cpu.stat" in result.findings[0].evidence["summary"]  # no GC events: both were considered


def test_reported_gc_pauses_outweigh_period_alignment() -> None:
    result = diagnose_frame(stalled_service(33, throttled=True, gc_events=True))
    found = [(f.pattern, round(f.confidence, 2)) for f in result.findings]
    assert result.findings[0].pattern == "gc_pause", found
    assert _conf(result, "cpu_throttling") < 0.5, found


def test_a_wait_for_a_worker_slot_is_queueing_not_network() -> None:
    result = diagnosed(worker_pool_service, 41, workers=3)
    found = [(f.pattern, round(f.confidence, 2)) for f in result.findings]
    assert _conf(result, "queueing") >= 0.5, found
    assert _conf(result, "network") < 0.5, found
    queue = next(f for f in result.findings if f.pattern == "queueing")
    assert queue.evidence["stats"].get("service", "model") == "model"


def test_an_occasional_wait_for_a_free_slot_is_not_network() -> None:
    """At ordinary load a pool's calls rarely wait, too rarely to move the rank correlation with the
    running calls; but each large gap is sent while every slot of the instance is taken."""
    result = diagnose_frame(worker_pool_service(42, workers=3, bursts=False, rate=280.0))
    found = [(f.pattern, round(f.confidence, 2)) for f in result.findings]
    assert _conf(result, "network") < 0.5, found
    assert _conf(result, "queueing") < 0.5, found


def test_slow_wire_beside_a_worker_pool_stays_network() -> None:
    """Retransmits delay calls whatever the instance is running: the large gaps are sent at any load."""
    result = diagnose_frame(worker_pool_service(43, workers=3, bursts=False, rate=280.0, slow_wire=0.03))
    found = [(f.pattern, round(f.confidence, 2)) for f in result.findings]
    assert _conf(result, "network") >= 0.5, found


def test_instances_started_cold_in_a_burst_are_cold_start_not_gc() -> None:
    result = diagnosed(autoscaled_service, 51)
    found = [(f.pattern, round(f.confidence, 2)) for f in result.findings]
    assert result.findings[0].pattern == "cold_start" and result.findings[0].confidence >= 0.5, found
    assert _conf(result, "gc_pause") < 0.5 and _conf(result, "cpu_throttling") < 0.5, found


def test_pauses_of_a_gateway_that_only_forwards_are_named_on_its_instances() -> None:
    result = diagnose_frame(gateway_service(61, gateway_pauses=True))
    found = [(f.pattern, round(f.confidence, 2)) for f in result.findings]
    gc = [f for f in result.findings if f.pattern == "gc_pause" and f.confidence >= 0.5]
    assert gc, found
    assert gc[0].evidence["stats"]["service"] == "gw" and gc[0].evidence["stats"]["instances"]
    assert _conf(result, "network") < 0.5, found


def test_a_healthy_gateway_raises_no_pause() -> None:
    result = diagnose_frame(gateway_service(62, gateway_pauses=False))
    found = [(f.pattern, round(f.confidence, 2)) for f in result.findings]
    assert _conf(result, "gc_pause") < 0.5 and _conf(result, "network") < 0.5, found


def test_every_finding_names_its_service_and_instances() -> None:
    for result in (
        diagnosed(two_mode_service, 2, child_on_slow=True),
        diagnosed(worker_pool_service, 41, workers=3),
        diagnosed(autoscaled_service, 51),
        diagnosed(payload_service, 21, grows=True),
    ):
        for finding in result.findings:
            if finding.pattern == "unexplained_tail":
                continue
            stats = finding.evidence["stats"]
            assert stats.get("service") or stats.get("services"), (finding.pattern, stats)
            assert stats.get("instances"), (finding.pattern, stats)


def test_replicas_started_cold_for_a_burst_are_not_pauses() -> None:
    """Co-slow spans on a replica's first requests are its warm-up: the stall time sits in the
    first third of its life, where a pause would recur all its life long."""
    result = diagnose_frame(burst_replicas(71))
    found = [(f.pattern, round(f.confidence, 2)) for f in result.findings]
    assert result.findings[0].pattern == "cold_start", found
    assert _conf(result, "gc_pause") < 0.45, found


def test_a_callee_span_outlasting_the_deadline_does_not_hide_it() -> None:
    """gRPC names the client and the server span alike; the callee's span of a timed-out attempt
    runs on after the caller gave up. The deadline caps the caller's attempts only."""
    frame = calling_service(14, deadline_ms=50.0, hang_rate=0.08, callee_spans=True)
    result = diagnose_frame(frame)
    found = [(f.pattern, round(f.confidence, 2)) for f in result.findings]
    assert _conf(result, "timeout_retry") >= 0.5, found


def test_a_forward_the_caller_gave_up_on_is_the_timeout_not_compute() -> None:
    """The callee's forward hangs past the caller's deadline; the caller abandons the attempt and
    retries. The request waited for the deadline and the retry, not for that forward's work."""
    result = diagnose_frame(calling_service(15, deadline_ms=50.0, hang_rate=0.06, callee_forward=True))
    found = [(f.pattern, round(f.confidence, 2)) for f in result.findings]
    assert result.findings[0].pattern == "timeout_retry", found
    assert _conf(result, "compute_bound") < 0.5, found


def test_pauses_of_a_quiet_gateway_release_few_requests_at_once() -> None:
    """At a low rate a pause holds one or two requests per instance: released in pairs, not crowds."""
    result = diagnose_frame(gateway_service(64, gateway_pauses=True, rps=20.0))
    found = [(f.pattern, round(f.confidence, 2), f.evidence["stats"].get("service")) for f in result.findings]
    assert any(
        f.pattern == "gc_pause" and f.confidence >= 0.5 and f.evidence["stats"].get("service") == "gw"
        for f in result.findings
    ), found
