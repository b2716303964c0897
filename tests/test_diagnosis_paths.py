"""Path rules on traces built from the mechanism (tests/path_services.py): a cache stampede behind a
worker pool, a connection pool that runs dry behind one, a service of its own that calls two traced
services, and a saturated model server. Each plants one cause and checks what is named on top, and
what the side effects are judged part of."""

from __future__ import annotations

from tailscope.analysis.diagnosis import diagnose_frame
from tests.mechanism_frames import diagnosed
from tests.path_services import (
    batched_model_service,
    cached_service,
    decoding_service,
    embedding_caller,
    lossy_node_service,
    paused_jvm_service,
    pooled_service,
    sharded_fan_out,
    two_callee_service,
)


def _found(result) -> list:
    return [(f.pattern, round(f.confidence, 2), f.evidence.get("stats", {}).get("part_of"))
            for f in result.findings]


def _conf(result, pattern: str) -> float:
    return max((f.confidence for f in result.findings if f.pattern == pattern), default=0.0)


def test_keys_expiring_together_are_a_cache_miss_though_the_misses_crowd() -> None:
    """A stampede's misses overlap (they come together and each holds its span for the store's round
    trip): the crowd is what the misses make; the extra time is in the store call made on misses only."""
    result = diagnosed(cached_service, 1, workers=3, rate=400.0)
    assert result.findings[0].pattern == "cache_miss" and result.findings[0].confidence >= 0.8, _found(result)
    assert result.findings[0].evidence["stats"]["synchronised_expiry"], _found(result)


def test_a_queue_behind_a_stampede_is_part_of_the_cache_miss() -> None:
    """The calls wait for a worker slot at an ordinary arrival rate while the slots are held by
    requests on the miss path: the queue is the misses' consequence, ranked after them."""
    result = diagnosed(cached_service, 1, workers=3, rate=400.0)
    queue = [f for f in result.findings if f.pattern == "queueing"]
    assert queue and queue[0].evidence["stats"]["part_of"] == "cache_miss", _found(result)
    assert queue[0].confidence <= 0.9 * result.findings[0].confidence


def test_a_burst_of_traffic_keeps_its_queue_beside_steady_misses() -> None:
    """Calls that wait because more of them came (a burst) wait whatever holds the slots."""
    result = diagnose_frame(cached_service(2, expiry=False, bursts=True, miss_rate=0.15, workers=3,
                                           rate=400.0))
    queue = [f for f in result.findings if f.pattern == "queueing"]
    assert queue and queue[0].confidence >= 0.5, _found(result)
    assert not queue[0].evidence["stats"].get("part_of"), _found(result)


def test_a_connection_pool_run_dry_is_lock_contention_and_its_queue_part_of_it() -> None:
    result = diagnose_frame(pooled_service(3))
    assert result.findings[0].pattern == "lock_contention", _found(result)
    assert result.findings[0].span_name == "findRecent"
    for fd in result.findings:
        if fd.pattern == "queueing" and fd.confidence >= 0.5:
            assert fd.evidence["stats"].get("part_of") == "lock_contention", _found(result)


def test_a_service_calling_two_services_is_not_a_proxy_of_the_one_owning_its_tail() -> None:
    """A service that works between two traced calls stays the request, though the rare slow reads of
    one callee own its p99 (a proxy's forwarded call covers most of it)."""
    frame = two_callee_service(4)
    assert {frame.names[c] for c in frame.name[frame.requests.root]} == {"GET /recs"}


def test_a_saturated_model_whose_forward_is_most_of_a_request_is_compute_bound() -> None:
    """A model busy nearly all the time: every request pays for the long forward and waits for the
    batch in progress; that wait is the forward's cost."""
    result = diagnose_frame(batched_model_service(5, per_batch_ms=22.0))
    top = result.findings[0]
    assert top.pattern == "compute_bound" and top.confidence >= 0.5, _found(result)
    assert result.findings[0].evidence["stats"]["model_busy"] >= 0.85


def test_a_light_model_with_spare_time_is_not_compute_bound() -> None:
    result = diagnose_frame(batched_model_service(6, per_batch_ms=2.0))
    assert _conf(result, "compute_bound") < 0.5, _found(result)


def test_a_payload_beside_rarer_slow_reads_owning_the_p99_is_still_named() -> None:
    """The slow reads own most of the p99; decoding grows with the message for many requests and adds a
    fifth of the median latency to the mean request: large_payload, named."""
    result = diagnose_frame(decoding_service(7, as_queue_stage=False))
    payload = [f for f in result.findings if f.pattern == "large_payload"]
    assert payload and payload[0].confidence >= 0.5 and payload[0].span_name == "decode", _found(result)
    assert payload[0].evidence["stats"]["tail_excess_share"] < 0.2


def test_decoding_mapped_to_the_queue_stage_is_still_work_on_the_payload() -> None:
    """A leaf span doing in-process work on a message (mapped to the queue stage by its messaging.*
    attribute) grows with the message's size: not a wait in a queue."""
    result = diagnose_frame(decoding_service(7, as_queue_stage=True))
    assert _conf(result, "large_payload") >= 0.5, _found(result)


def test_a_steady_trickle_of_cheap_misses_is_not_a_named_cause() -> None:
    """0.6 % of lookups miss, at random, each costing ~3 ms: a working cache. The misses make a few of
    the slowest requests but add next to nothing to the mean request: possible, not named."""
    result = diagnose_frame(cached_service(8, expiry=False, miss_rate=0.006, workers=8, rate=200.0,
                                           miss_ms=3.0))
    cache = [f for f in result.findings if f.pattern == "cache_miss"]
    assert cache and cache[0].confidence < 0.5, _found(result)
    assert cache[0].evidence["stats"]["steady_trickle"]


def test_slow_calls_from_one_callers_node_are_not_a_slow_dependency() -> None:
    result = diagnose_frame(lossy_node_service(11, lossy=True))
    dep = [f for f in result.findings if f.pattern == "slow_dependency"]
    assert dep and dep[0].confidence < 0.5, _found(result)
    assert dep[0].evidence["stats"]["slow_calls_from_callers"] == ["api/0"]


def test_a_dependency_slow_for_every_caller_stays_named() -> None:
    result = diagnose_frame(lossy_node_service(12, lossy=False))
    assert result.findings[0].pattern == "slow_dependency" and result.findings[0].confidence >= 0.5, (
        _found(result))


def test_deadline_retries_inside_a_fan_out_are_timeout_retry() -> None:
    """One call per shard side by side; a hung attempt is cut at the deadline and made again on another
    replica of its shard: the retry follows the attempt it replaces, not the other shards' calls."""
    result = diagnose_frame(sharded_fan_out(13))
    top = result.findings[0]
    assert top.pattern == "timeout_retry" and top.confidence >= 0.5, _found(result)
    assert abs(top.evidence["stats"]["timeout_ms"] - 30.0) < 1.0


def test_a_bounded_fan_out_with_slow_shards_is_not_a_timeout() -> None:
    """At most four shard calls at once, no deadline: later calls start as earlier ones end, and the
    slow ones run long: nothing ends at one duration."""
    result = diagnose_frame(sharded_fan_out(14, deadline=None, limit=4))
    assert _conf(result, "timeout_retry") < 0.5, _found(result)


def test_a_callee_waiting_in_its_batcher_is_not_a_slow_dependency() -> None:
    """A model server shared with an untraced co-tenant whose bursts fill its batches: the callee's time
    is a wait before its execute child (no queue span), not its work."""
    result = diagnose_frame(batched_model_service(15, 6.0, rate=200, max_batch=4, bursts=True,
                                                  client_name="POST /v2/models/rank/infer",
                                                  queue_span=False, cotenant_rate=160))
    dep = [f for f in result.findings if f.pattern == "slow_dependency"]
    assert not dep or dep[0].confidence < 0.5, _found(result)


def test_a_gap_outside_a_traced_callee_is_not_a_slow_dependency() -> None:
    """The callee's SERVER span is not slower; the time outside it is (one caller's lossy node)."""
    result = diagnose_frame(lossy_node_service(16, lossy=True, traced_callee=True))
    assert _conf(result, "slow_dependency") < 0.5, _found(result)
    assert result.findings[0].pattern == "network", _found(result)


def test_one_slow_replica_of_a_shard_is_a_slow_dependency_named_by_instance() -> None:
    """One replica of one shard answers ~25 ms slower on every call; client and server spans share the
    call's name (as gRPC instrumentations name them): still a call, and the straggler is named."""
    result = diagnose_frame(sharded_fan_out(20, deadline=None, straggler=True))
    top = result.findings[0]
    assert top.pattern == "slow_dependency" and top.confidence >= 0.5, _found(result)
    assert top.evidence["stats"]["straggler_instance"] == "shard/3-0"


def test_a_callee_whose_time_is_its_model_forward_is_not_a_slow_dependency() -> None:
    """The embedder's tail is its forward pass (longer inputs): compute, not a slow dependency."""
    result = diagnose_frame(embedding_caller(21))
    assert _conf(result, "slow_dependency") < 0.5, _found(result)


def test_gaps_waiting_while_the_server_reports_gc_time_are_stalls_not_the_wire() -> None:
    """A JVM reporting GC only as per-request time deltas: calls sent during a pause wait to be
    accepted, and those waits overlap requests that report GC time far more often than calls at
    random do; the network finding reads that share as stalls."""
    import numpy as np

    from tailscope.analysis.diagnosis.model import Context
    from tailscope.analysis.diagnosis.network import gc_reported_lift, large_gaps
    from tailscope.analysis.diagnosis.payload_wire import call_pairs

    frame = paused_jvm_service(22, stages=(6.0,))
    ctx = Context(frame)
    srv = np.nonzero((frame.kind == 2) & (frame.parent >= 0))[0]
    cli = frame.parent[srv]
    gap = (frame.dur[cli] - frame.dur[srv]).astype(float)
    big = large_gaps(gap, float(np.median(gap)))
    assert big.sum() >= 20 and gc_reported_lift(ctx, cli, srv, big) >= 0.5
    assert len(call_pairs(ctx)[0]) == 0  # the calls wrap the request roots: measured at the root
    result = diagnose_frame(frame)
    net = [f for f in result.findings if f.pattern == "network"]
    assert not net or net[0].confidence < 0.5, _found(result)
