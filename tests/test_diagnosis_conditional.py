"""Conditional paths on traces built from the mechanism (tests/conditional_services.py): a normal rate
of cache misses and a model that sends some requests to a vendor are how a healthy service runs; an
eviction wave's store queries (extra copies of a call every request makes) are the cache's; a vendor
cut by a deadline and retried is a timeout and a retry, not a cache nor a lock."""

from __future__ import annotations

import numpy as np

from tailscope.analysis.diagnosis import diagnose_frame
from tailscope.analysis.diagnosis import network as nw
from tailscope.analysis.diagnosis.extra_calls import beyond_usual
from tailscope.analysis.diagnosis.model import Context
from tests.conditional_services import (
    batch_worker,
    paused_caller,
    paused_worker_behind_callers,
    profile_scorer,
)
from tests.path_services import sharded_fan_out


def _found(result) -> list:
    return [(f.pattern, round(f.confidence, 2), f.span_name) for f in result.findings]


def test_extra_copies_are_those_beyond_what_nearly_every_parent_makes() -> None:
    """Parents make one call as a rule, up to four on some; most may take the extra path."""
    parent = np.array([0, 0, 0, 1, 2, 2, 3, 3, 3, 3])
    start = np.array([5, 1, 9, 1, 1, 2, 4, 3, 2, 1])
    extra = beyond_usual(parent, start, np.arange(10))
    assert extra.tolist() == [True, False, True, False, False, True, True, True, True, False]
    assert not beyond_usual(np.array([0, 0, 1, 1]), np.array([1, 2, 1, 2]), np.arange(4)).any()
    # a fan-out's calls (3 under each parent of group 7) beside each call's SERVER span of the same
    # name (1 under each CLIENT span, group 9): each group has its own usual number
    parent = np.array([0, 0, 0, 1, 1, 1, 2, 3, 4, 5, 6, 7])
    group = np.array([7] * 6 + [9] * 6)
    assert not beyond_usual(parent, np.arange(12), np.arange(12), group).any()
    assert beyond_usual(parent, np.arange(12), np.arange(12)).sum() == 4


def test_a_healthy_scorer_raises_nothing() -> None:
    """2 % of profile reads miss at random, and the model sends a fifth of the requests to a vendor
    with a heavy tail: the tail is made of those requests, but nothing is wrong."""
    result = diagnose_frame(profile_scorer(1))
    named = [f for f in result.findings if f.confidence >= 0.5 and f.pattern != "compute_bound"]
    assert not named, _found(result)


def test_an_eviction_wave_is_a_cache_miss_and_its_store_queries_are_part_of_it() -> None:
    """The queries per missing key share the span name of the query every request makes: their extra
    copies are the miss path (cache_miss), not a slow database, and the crowd they make is no lock."""
    result = diagnose_frame(profile_scorer(2, wave=True))
    top = result.findings[0]
    assert top.pattern == "cache_miss" and top.confidence >= 0.8, _found(result)
    assert "extra 'SELECT fraud'" in top.evidence["summary"], top.evidence["summary"]
    wrong = [f for f in result.findings if f.confidence >= 0.5 and f.pattern in ("slow_dependency",
                                                                                 "lock_contention")]
    assert not wrong, _found(result)


def test_a_vendor_cut_by_its_deadline_and_retried_is_a_timeout_not_a_cache_or_a_lock() -> None:
    """The retry is a copy of the call made after the first attempt failed: no store behind a cache;
    and the slow checks overlap because they last long, not because they wait for each other."""
    result = diagnose_frame(profile_scorer(3, vendor_slow=True))
    top = result.findings[0]
    assert top.pattern == "timeout_retry" and top.confidence >= 0.8, _found(result)
    assert top.evidence["stats"]["peer"] == "api.vendor.example"
    wrong = [f for f in result.findings if f.confidence >= 0.5 and f.pattern in ("cache_miss",
                                                                                 "lock_contention")]
    assert not wrong, _found(result)


def test_calls_held_by_a_paused_server_are_no_network_delay() -> None:
    """A process that stops reads the calls sent meanwhile one after the other once it runs again:
    their starts bunch although their sends were apart. Without GC events nothing else says it."""
    frame = paused_worker_behind_callers(4)
    result = diagnose_frame(frame)
    network = [f for f in result.findings if f.pattern == "network"]
    assert not network or network[0].confidence < 0.5, _found(result)
    alone = nw.detect(Context(frame))  # what the gaps say, before the confidence floor
    assert alone[0].evidence["stats"]["large_gaps_drained_together"] > 0.8, alone[0].evidence["summary"]


def test_a_lossy_node_in_front_of_a_server_stays_a_network_delay() -> None:
    """The wire delays each call on its own: starts as spread as the sends."""
    result = diagnose_frame(paused_worker_behind_callers(5, pause=False))
    assert result.findings[0].pattern == "network" and result.findings[0].confidence >= 0.5, _found(result)


def test_stall_time_counts_overlapping_episodes_from_two_detectors_once() -> None:
    """gc_pause's and cpu_throttling's episodes of one instance come appended, unsorted, and may
    overlap: the time inside them is counted once, never negative."""
    from tailscope.analysis.diagnosis.long_stalls import stall_overlap

    ep_inst, ep_t0, ep_t1 = np.zeros(4, np.int64), np.array([50, 0, 10, 100]), np.array([60, 20, 30, 110])
    got = stall_overlap(np.zeros(3, np.int64), np.array([0, 0, 55]), np.array([200, 25, 105]), ep_inst, ep_t0,
                        ep_t1)
    assert got.tolist() == [50.0, 25.0, 10.0]


def test_calls_that_a_paused_caller_reads_late_are_no_slow_dependency() -> None:
    """The store answers in ~15 ms every time; the calls in flight during a stop of the caller's
    process end when it runs again: the pause's time, not the dependency's."""
    result = diagnose_frame(paused_caller(6))
    assert result.findings[0].pattern == "gc_pause", _found(result)
    dep = [f for f in result.findings if f.pattern == "slow_dependency"]
    assert not dep or dep[0].confidence < 0.5, _found(result)


def test_a_deadline_cutting_a_straggler_replicas_calls_is_the_straggler() -> None:
    """Replica 0 of shard 3 is slow on every call; the deadline cuts its slowest and a retry goes to
    another replica: the timeouts are the straggler's symptom, named as slow_dependency."""
    result = diagnose_frame(sharded_fan_out(22, deadline=30.0, straggler=True))
    top = result.findings[0]
    assert top.pattern == "slow_dependency" and top.confidence >= 0.5, _found(result)
    retry = [f for f in result.findings if f.pattern == "timeout_retry"]
    assert retry and retry[0].confidence < 0.5, _found(result)
    assert retry[0].evidence["stats"]["cut_calls_to_straggler"] == "shard/3-0"


def test_a_connection_opened_before_the_usual_query_is_no_cache_fallback() -> None:
    """A new process opens its database connection at its first query: `connect` runs after the
    cache lookup in a few requests, clustered in time, and is followed at once by the query every
    request makes to the same database: the setup of that call, not a store read on a miss."""
    result = diagnose_frame(profile_scorer(8, recycle=True))
    cache = [f for f in result.findings if f.pattern == "cache_miss" and f.confidence >= 0.5]
    assert not cache, _found(result)


def test_more_copies_of_in_process_work_are_a_bigger_batch_not_a_miss() -> None:
    """Polls of two events run `handle_event` twice: extra copies of work inside the process are more
    items, not a store queried on a miss (extra copies count as a miss path only for calls out)."""
    result = diagnose_frame(batch_worker(9))
    cache = [f for f in result.findings if f.pattern == "cache_miss" and f.confidence >= 0.5]
    assert not cache, _found(result)
