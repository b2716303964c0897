"""Slots are not a lock (diag22, session 13): CPU-bound jobs sharing a pod's cores take their own time
while fewer jobs than cores run and stretch only beyond (a hinge at the core count), where a mutex makes
the second request wait already. The first is no lock_contention >= 0.5; the mutex stays named."""

from __future__ import annotations

import numpy as np

from tailscope.analysis.diagnosis import diagnose_frame
from tailscope.analysis.diagnosis.slots import slot_count
from tests.mechanism_frames import TraceBuilder, by_pattern, lognormal


def _service(seed: int, section) -> object:
    """Requests on 3 instances: parse, then `section(instance, t, work)` -> (start, end) of the span
    named 'rerank', then a short respond step."""
    b = TraceBuilder(seed)
    for t in b.arrivals(4000, 900):
        b.new_trace()
        inst = f"api/{int(b.rng.integers(3))}"
        root = b.span(None, "POST /rerank", "Server", inst, t, 0.0)
        cur = t + 0.05
        parse = lognormal(b.rng, 0.5, 0.2)
        b.span(root, "parse", "Internal", inst, cur, parse)
        cur += parse + 0.02
        a, e = section(b, inst, cur)
        b.span(root, "rerank", "Internal", inst, a, e - a)
        cur = e + 0.02
        out = lognormal(b.rng, 0.3, 0.2)
        b.span(root, "respond", "Internal", inst, cur, out)
        b.set_end(root, cur + out + 0.05)
    return b.frame()


def shared_cores(seed: int, cores: int = 4):
    """Each job's CPU shares the instance's cores with the jobs running when it starts."""
    running: dict[str, list[float]] = {}

    def section(b: TraceBuilder, inst: str, t: float) -> tuple[float, float]:
        jobs = [e for e in running.get(inst, []) if e > t]
        work = lognormal(b.rng, 10.0, 0.1)
        end = t + work * max(1.0, (len(jobs) + 1) / cores)
        running[inst] = [*jobs, end]
        return t, end

    return _service(seed, section)


def one_mutex(seed: int):
    """Each request holds one lock for its work; the others wait in the span (FIFO)."""
    free: dict[str, float] = {}

    def section(b: TraceBuilder, inst: str, t: float) -> tuple[float, float]:
        hold = lognormal(b.rng, 0.9, 0.1)
        start = max(t, free.get(inst, 0.0))
        free[inst] = start + hold
        return t, start + hold

    return _service(seed, section)


def test_work_sharing_cores_is_not_a_lock() -> None:
    found = by_pattern(diagnose_frame(shared_cores(1)).findings)
    assert found.get("lock_contention", 0.0) < 0.5, found


def test_one_mutex_stays_a_lock() -> None:
    found = by_pattern(diagnose_frame(one_mutex(2)).findings)
    assert found.get("lock_contention", 0.0) >= 0.5, found


def test_slot_count_reads_the_hinge() -> None:
    rng = np.random.default_rng(3)
    ahead = rng.integers(0, 12, 6000)
    work = np.exp(rng.normal(np.log(10.0), 0.1, len(ahead)))
    assert slot_count(ahead, work * np.maximum(1.0, (ahead + 1) / 4)) == 4  # 4 cores
    assert slot_count(ahead, work + 3.0 * ahead) == 1  # a lock: each request ahead adds a hold
