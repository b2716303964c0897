"""Stalls of some threads, not of the whole process: a lock that pins the threads everything runs on,
held longer on one instance (host_levers.lock_as_peers); allocation stalls that stop only the
allocating code (stall_levers.py); one process's heap near its limit (host_levers.stalls_as_peers)."""

from __future__ import annotations

import numpy as np

from tailscope.analysis.whatif.engine import evaluate
from tests.hand_frames import hand_frame

INSTANCES = ("a", "b", "c", "d")


def _request(rows: list[tuple], trace: int, inst: int, t: float, wait: float, fetch: float, parse: float,
             score: float) -> None:
    """A request: `wait` before a 5 ms call (`fetch`: its extra end), `parse` of code, the scoring."""
    root = len(rows)
    call = 5.0 + fetch
    rows.append((trace, -1, "GET /search", "Server", inst, t, 0.5 + wait + call + parse + score + 1.0))
    rows.append((trace, root, "fetch", "Client", inst, t + 0.5 + wait, call))
    rows.append((trace, root, "rerank", "Internal", inst, t + 0.5 + wait + call + parse, score))


def _outcome(rows: list[tuple], finding: dict, key: str, instances=INSTANCES) -> tuple[float, float | None]:
    result = evaluate(hand_frame(rows, instances), [finding])
    hits = [o.p99_ms for o in result.outcomes if o.key == key]
    return result.measured.p99_ms, (hits[0] if hits else None)


def _pinned_run() -> list[tuple]:
    """800 requests over 4 instances; on `a` the lock's section is twice as long and the waits for it
    and for a thread to run on (the gap before the call, the code before the section) grow."""
    rng = np.random.default_rng(3)
    rows: list[tuple] = []
    for k in range(800):
        inst = k % 4
        slow = inst == 0
        _request(rows, k, inst, 5.0 * k, wait=float(rng.uniform(0, 12)) if slow else 0.2, fetch=0.0,
                 parse=1.0 + (float(rng.uniform(0, 30)) if slow else 0.0), score=20.0 if slow else 10.0)
    return rows


def _lock(instances: list[str]) -> dict:
    return {"pattern": "lock_contention", "confidence": 0.9, "span_name": "rerank",
            "evidence": {"stats": {"instances": instances}}}


def test_a_lock_held_longer_on_one_instance_takes_the_peers_times_for_everything_there() -> None:
    before, after = _outcome(_pinned_run(), _lock(["a"]), "no_lock_wait_as_peers:rerank")
    assert before > 50
    assert after is not None and after < 19.0, after  # the peers' 17.7 ms


def test_a_lock_named_on_every_instance_has_no_peers_to_take() -> None:
    _, after = _outcome(_pinned_run(), _lock(list(INSTANCES)), "no_lock_wait_as_peers:rerank")
    assert after is None


def _stalled_run() -> list[tuple]:
    """600 requests on two instances; from 40 % to 70 % of the run the heap is outrun: a third of the
    requests stall 30 ms in the code between the call and the scoring, a fifth read the call's answer
    20 ms late; the call's callee and the other stretches are calm."""
    rng = np.random.default_rng(5)
    rows: list[tuple] = []
    for k in range(600):
        stalled = 240 <= k < 420
        parse = 2.0 + (30.0 if stalled and rng.random() < 0.33 else 0.0)
        fetch = 20.0 if stalled and rng.random() < 0.2 else 0.0
        _request(rows, k, k % 2, 10.0 * k, wait=0.2, fetch=fetch, parse=parse, score=3.0)
    return rows


def _gc(instances: list[str]) -> dict:
    return {"pattern": "gc_pause", "confidence": 1.0, "span_name": "GET /search",
            "evidence": {"stats": {"instances": instances}}}


def test_allocation_stalls_come_out_of_the_code_between_calls_and_the_late_reads() -> None:
    before, after = _outcome(_stalled_run(), _gc(["a", "b"]), "no_gc_stalls_own_time", ("a", "b"))
    assert before > 40
    assert after is not None and after < 12.5, after  # 0.5 + 0.2 + 5 + 2 + 3 + 1


def test_a_process_near_its_heap_limit_takes_its_peers_times() -> None:
    rng = np.random.default_rng(7)
    rows: list[tuple] = []
    for k in range(600):
        slow = k % 2 == 0  # `a`'s threads stall all run long
        _request(rows, k, k % 2, 10.0 * k, wait=0.2, fetch=float(rng.uniform(0, 15)) if slow else 0.0,
                 parse=2.0 + (float(rng.uniform(0, 25)) if slow else 0.0), score=3.0)
    before, after = _outcome(rows, _gc(["a"]), "no_gc_stalls_host_as_peers", ("a", "b"))
    assert before > 35
    assert after is not None and after < 12.5, after


def test_no_allocation_stall_lever_where_the_timing_shows_the_whole_process_paused() -> None:
    """Go's collector near its memory limit: the spans' timing shows process-wide pauses on the named
    instances (every span in flight stretched at once, no runtime report): `no_gc_stalls` removes
    them; redrawing every step's own time from calm stretches beside it would take the process's
    ordinary spread too (go-ray heap-growth-gc: 38 ms predicted vs 89 ms measured)."""
    from tailscope.analysis.whatif.stall_levers import stalled_own_time_as_calm
    from tests.hand_frames import MS, lever_inputs

    f = hand_frame(_stalled_run(), ("a", "b"))
    x = lever_inputs(f)
    assert stalled_own_time_as_calm(x, _gc(["a", "b"])) is not None  # no pause seen: the threads' stalls
    x.stalls = (np.array([0, 1], np.int64), np.array([2400 * MS, 3000 * MS], np.int64),
                np.array([2430 * MS, 3030 * MS], np.int64))
    assert stalled_own_time_as_calm(x, _gc(["a", "b"])) is None
