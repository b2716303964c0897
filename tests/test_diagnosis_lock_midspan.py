"""lock_contention where the lock is taken in the middle of a span, on hand-made traces.

The shape, which the simulator does not produce: a consumer pulls messages in bursts of one to six
(their `Pricer.quote` spans start within microseconds of each other on one instance), each does 1-3 ms
of its own work, then takes a mutex held ~2 ms, then does 0.5-1.5 ms more. The work before the lock
varies by more than a hold, so the order the burst starts in says little about the order it gets the
lock: counted by start order, the requests ahead of a span hardly predict its duration (the detector
said nothing). Under a mutex, the members of a burst still wait for one another on average, and
they complete one hold apart.

The same arrivals with no lock (constant own work, side by side), or with batched work (one interval
per burst that grows with its size) must not read as a lock.
"""

from __future__ import annotations

import numpy as np
from hand_frames import MS, hand_frame

from tailscope.analysis.diagnosis import diagnose_frame
from tailscope.analysis.diagnosis.frame import TraceFrame
from tailscope.analysis.diagnosis.lock_contention import concurrency_at_start
from tailscope.analysis.diagnosis.model import Context

BURSTS = 400


def _bursts(rng: np.random.Generator) -> list[tuple[int, float, int]]:
    """(instance, start ms, size) of every burst: two instances, ~40 ms apart on each."""
    out = []
    for instance in (0, 1):
        at = 0.0
        for _ in range(BURSTS):
            at += rng.exponential(40.0)
            out.append((instance, at, int(rng.integers(1, 7))))
    return out


def _fifo_lock(ready: np.ndarray, hold: np.ndarray) -> np.ndarray:
    """Release times of a FIFO mutex for requests ready to take it at `ready` (one instance)."""
    release = np.empty(len(ready))
    free = -np.inf
    for j in np.argsort(ready, kind="stable"):
        free = max(ready[j], free) + hold[j]
        release[j] = free
    return release


def _durations(
    shape: str, rng: np.random.Generator, start: np.ndarray, instance: np.ndarray, burst: np.ndarray
) -> np.ndarray:
    n = len(start)
    if shape == "constant":
        return 4.0 + rng.normal(0.0, 0.05, n)
    if shape == "batched":  # one interval per burst: 2 ms + 1.5 ms per member, from its last start
        size = np.bincount(burst)[burst]
        last = np.zeros(burst.max() + 1)
        np.maximum.at(last, burst, start)
        return last[burst] + 2.0 + 1.5 * size - start
    before, after = rng.uniform(1.0, 3.0, n), rng.uniform(0.5, 1.5, n)
    hold = rng.lognormal(np.log(2.0), 0.2, n)
    release = np.empty(n)
    for k in (0, 1):
        mine = instance == k
        release[mine] = _fifo_lock(start[mine] + before[mine], hold[mine])
    return release + after - start


def traces(shape: str, seed: int = 7) -> TraceFrame:
    """`shape`: "lock" (mutex mid-span), "constant" (same work, no lock) or "batched" (each burst's
    spans share one interval of 2 ms + 1.5 ms per member)."""
    rng = np.random.default_rng(seed)
    bursts = _bursts(rng)
    size = np.array([b[2] for b in bursts])
    burst = np.repeat(np.arange(len(bursts)), size)
    instance = np.repeat([b[0] for b in bursts], size)
    start = np.repeat([b[1] for b in bursts], size) + 0.2 + rng.uniform(0.0, 0.004, len(burst))
    dur = _durations(shape, rng, start, instance, burst)
    rows: list[tuple] = []
    for t, (s, d, i) in enumerate(zip(start.tolist(), dur.tolist(), instance.tolist(), strict=True)):
        root = len(rows)
        rows += [
            (t, -1, "POST /quote", "Server", i, s - 0.2, d + 0.4),
            (t, root, "Pricer.quote", "Internal", i, s, d),
        ]
    return hand_frame(rows)


def test_a_lock_taken_mid_span_by_bursts_is_found_with_its_hold() -> None:
    found = diagnose_frame(traces("lock")).findings
    top = found[0]
    assert (top.pattern, top.span_name) == ("lock_contention", "Pricer.quote"), [
        (f.pattern, f.span_name, round(f.confidence, 2)) for f in found
    ]
    assert top.confidence >= 0.5, top.evidence["summary"]
    stats = top.evidence["stats"]
    assert 1.2 <= stats["hold_ms"] <= 3.0, stats  # the mutex is held ~2 ms
    assert stats["close_completions"] < 0.05, stats  # one holder out at a time


def test_constant_work_side_by_side_under_the_same_bursts_is_no_lock() -> None:
    found = diagnose_frame(traces("constant")).findings
    assert not [f for f in found if f.pattern == "lock_contention" and f.confidence >= 0.2], found


def test_batched_work_that_grows_with_the_burst_is_no_lock() -> None:
    # a burst's spans all end together: longer for a bigger burst, but nobody waits for anybody
    found = diagnose_frame(traces("batched")).findings
    assert not [f for f in found if f.pattern == "lock_contention" and f.confidence >= 0.2], found


def test_a_cohort_counts_half_of_its_members_ahead_and_by_end_the_order_they_left() -> None:
    # one span running since 0 ms; three start within 2 microseconds at 5 ms and end at 9, 7, 8 ms
    rows = [(0, -1, "work", "Internal", 0, 0.0, 20.0)]
    rows += [
        (1 + k, -1, "work", "Internal", 0, 5.0 + 0.001 * k, end - 5.0) for k, end in enumerate((9, 7, 8))
    ]
    f = hand_frame(rows)
    ctx = Context(f)
    spans = np.arange(4)
    assert concurrency_at_start(ctx, spans).tolist() == [0, 1, 2, 3]  # by start order
    assert concurrency_at_start(ctx, spans, 0.1 * MS).tolist() == [0, 2, 2, 2]  # 1 running + half of 2
    assert concurrency_at_start(ctx, spans, 0.1 * MS, by_end=True).tolist() == [0, 3, 1, 2]
