"""Issue 25: who is stalled, and by what (tests/stall_services.py). A send blocked on a full producer
buffer waits on its broker (a call out), not on a lock or a stop of its process; one instance whose
collector runs back to back slows its allocating steps and not its calls: gc_pause where its runtime's
reported cycles say so, a possible cause only where nothing is reported, none where its cycles are no
more frequent than its peers'."""

from __future__ import annotations

from tailscope.analysis.diagnosis import diagnose_frame
from tests.stall_services import dispatcher_service, memlimit_service, producer_service


def _found(result) -> list:
    return [(f.pattern, round(f.confidence, 2), f.span_name) for f in result.findings]


def _straggler(result):
    mine = "collector back to back on one instance"
    return next((f for f in result.findings if f.evidence.get("stats", {}).get("mechanism") == mine), None)


def test_a_send_blocked_on_a_full_producer_buffer_is_the_brokers_latency() -> None:
    """The PRODUCER span the request waited for is a call out to the broker: judged as a dependency
    (before: unexplained_tail 0.45 on top; on spring-loom lock_contention 0.90 on the handler, its send
    below it not counted as a call out)."""
    result = diagnose_frame(producer_service(1))
    top = result.findings[0]
    assert top.pattern == "slow_dependency" and top.span_name == "impressions send", _found(result)
    assert all(f.confidence < 0.5 for f in result.findings
               if f.pattern in ("lock_contention", "gc_pause")), _found(result)


def test_the_same_wait_inside_the_process_stays_a_lock() -> None:
    """The twin: the same waits on an INTERNAL span (a wait inside the process, no call out): released
    together while the process runs on, a resource held in it: lock_contention."""
    result = diagnose_frame(producer_service(1, kind="Internal"))
    assert result.findings[0].pattern == "lock_contention", _found(result)
    assert result.findings[0].confidence >= 0.5, _found(result)


def test_one_instance_whose_collector_runs_back_to_back_is_gc_pause() -> None:
    """api/3's allocating steps ~8x slower all along, its 16 ms query not, its runtime reporting ~25x its
    peers' GC cycles (before: slow_dependency 0.45 on sql.rows on top, nothing named)."""
    result = diagnose_frame(memlimit_service(1))
    top = result.findings[0]
    assert top.pattern == "gc_pause" and top.confidence >= 0.7, _found(result)
    assert top.evidence["stats"]["instances"] == ["api/3"], top.evidence["stats"]


def test_the_same_slowdown_with_no_more_gc_cycles_there_is_no_gc_pause() -> None:
    """The twin: every pod reports its cycles alike: the collector is not what slows api/3 (a CPU shared
    with a neighbour): no finding from this mechanism, nothing at >= 0.5 named gc_pause."""
    result = diagnose_frame(memlimit_service(1, gc="even"))
    assert _straggler(result) is None, _found(result)
    assert all(f.confidence < 0.5 for f in result.findings if f.pattern == "gc_pause"), _found(result)


def test_the_same_slowdown_with_no_gc_reported_stays_a_possible_cause() -> None:
    """No cycles reported anywhere: a collector's assists and a CPU shared with a neighbour read alike:
    under 0.5, and the evidence says how to tell them apart."""
    result = diagnose_frame(memlimit_service(1, gc="none"))
    found = _straggler(result)
    assert found is not None and found.confidence < 0.5, _found(result)
    assert "GC CPU fraction" in found.evidence["summary"]


def test_continuations_waiting_for_a_dispatcher_thread_are_queueing() -> None:
    """api/1's blocking queries hold its dispatcher's threads: every continuation there waits between the
    steps, which run no slower: queueing on that instance; at one join, a possible cause only (a lock
    taken there reads alike) (before: unexplained_tail on top, no queueing)."""
    result = diagnose_frame(dispatcher_service(1))
    top = result.findings[0]
    assert top.pattern == "queueing" and 0.3 <= top.confidence < 0.5, _found(result)
    assert top.evidence["stats"]["mechanism"] == "starved executor"
    assert top.evidence["stats"]["instances"] == ["api/1"], top.evidence["stats"]


def test_a_process_that_stops_stretches_its_steps_and_is_no_starved_executor() -> None:
    """The twin: api/1 stops for ~40 ms every 400 ms: the steps in flight stretch with the gaps, so the
    wait is the stop's, not an executor's."""
    result = diagnose_frame(dispatcher_service(1, starved=False))
    assert all(f.evidence.get("stats", {}).get("mechanism") != "starved executor" for f in result.findings), \
        _found(result)


def _family_run(family: str, scenario: str):
    from bench.run_cache import loaded_run
    from tailscope.analysis.diagnosis import diagnose
    from tailscope.store.duckdb.store import DuckDBStore as Store

    with loaded_run(family, scenario, 2000, 0, None) as (db, _summary):
        return diagnose(Store(db), "run")


def test_a_pooler_every_caller_shares_run_dry_by_a_burst_is_queueing() -> None:
    """pgvector-search (its own file, loader and all): PgBouncer's pool of server connections, shared by
    every ask-api pod, runs dry under a 10x burst while a cold replica's walks hold connections: BEGIN's
    waits end as the other pods' transactions give a connection back (not their own pod's) and follow the
    arrivals: a queue for N servers, not a lock in the caller (before: lock_contention 0.94 on top)."""
    result = _family_run("pgvector-search", "replica-restart+pgbouncer-burst")
    top = result.findings[0]
    assert top.pattern == "queueing" and top.confidence >= 0.8, _found(result)
    assert top.evidence["stats"].get("server_queue_from") == "a pool shared by every caller", top.evidence
    assert all(f.confidence < 0.5 for f in result.findings if f.pattern == "lock_contention"), _found(result)


def test_a_pooler_every_caller_shares_held_by_slow_commits_stays_lock_contention() -> None:
    """The twin, vision-moderation: its PgBouncer pool runs dry because commits slow to ~85 ms (the
    holders hold longer) at an ordinary arrival rate: the held resource's finding, lock_contention."""
    result = _family_run("vision-moderation", "pgbouncer-exhaustion")
    assert result.findings[0].pattern == "lock_contention" and result.findings[0].confidence >= 0.8, \
        _found(result)


def test_requests_without_child_spans_give_no_starved_executor() -> None:
    """Roots with no children at all (a service traced as one span per request): no gaps to read, no
    finding and no error."""
    from tailscope.analysis.diagnosis import starved_executor
    from tailscope.analysis.diagnosis.model import Context
    from tests.mechanism_frames import TraceBuilder

    b = TraceBuilder(2)
    for i, t in enumerate(b.arrivals(300, 50.0)):
        b.new_trace()
        b.span(None, "GET /", "Server", f"api/{i % 2}", t, 5.0)
    assert starved_executor.detect(Context(b.frame())) == []
