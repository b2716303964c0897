"""A thread pool starved by a burst (burst_waits.py): requests block a pool thread through a synchronous
call, so while a burst lasts every work item (a request's start, each awaited call's continuation)
waits in the pool's FIFO queue. Every span that ends on a continuation waits, the repository span a lock
detector reads as contended among them: the cause is the burst outrunning the threads (queueing), and
no lock guards the other calls that wait as long. Its negative, a pool of connections run dry by a
burst while the rest of the work runs on, is tests/test_diagnosis_bursts.py (the lock stays named)."""

from __future__ import annotations

import heapq
from collections import deque

from tailscope.analysis.diagnosis import burst_waits, diagnose_frame, network, queueing
from tailscope.analysis.diagnosis.model import Context, Finding
from tests.mechanism_frames import TraceBuilder, lognormal

THREADS = 4


def _starved_service(seed: int = 5, n: int = 4000, rps: float = 150.0):
    b = TraceBuilder(seed)
    seconds = n / rps
    times, t = [], 0.0
    while len(times) < n:  # Poisson, 3.5x for 8 % of the run from 40 %
        burst = 0.40 * seconds * 1000 <= t <= 0.48 * seconds * 1000
        t += b.rng.exponential(1000.0 / (rps * (3.5 if burst else 1.0)))
        times.append(t)
    procs = 3
    # per request: (process, its marks); work items: 0 start, 1 connection open, 2 query answered, 3 written
    reqs = [(int(b.rng.integers(procs)), {}) for _ in times]
    events: list = []
    for k, at in enumerate(times):
        heapq.heappush(events, (at + 0.3, k, 0))
    free = [THREADS] * procs
    ready: list[deque] = [deque() for _ in range(procs)]
    seq = len(times)

    def run(now: float, k: int, step: int) -> None:
        nonlocal seq
        p, m = reqs[k]
        if step == 0:  # the handler starts; the repository opens a pooled connection (an await)
            m["server"] = now
            m["get"] = now + lognormal(b.rng, 0.2, 0.2)
            end = m["get"]
            heapq.heappush(events, (end + lognormal(b.rng, 0.3, 0.3), k, 1))
        elif step == 1:  # the connection is open: the query
            m["sql"] = now
            end = now + 0.05
            heapq.heappush(events, (end + lognormal(b.rng, 4.0, 0.3), k, 2))
        elif step == 2:  # the query's answer: the quote is written
            m["get_end"] = now
            m["cosmos"] = now + lognormal(b.rng, 0.3, 0.2)
            end = m["cosmos"]
            heapq.heappush(events, (end + lognormal(b.rng, 6.0, 0.3), k, 3))
        else:  # written: the bureau, called synchronously, holds the thread through its answer
            m["cosmos_end"] = now
            m["bureau"] = now + 0.05
            m["bureau_end"] = m["bureau"] + lognormal(b.rng, 25.0, 0.3)
            end = m["bureau_end"] + lognormal(b.rng, 0.2, 0.2)
            m["server_end"] = end
        seq += 1
        heapq.heappush(events, (end, -1 - p, seq))  # the thread is free again

    while events:
        now, k, step = heapq.heappop(events)
        if k < 0:  # a thread comes back: run the next queued item
            p = -1 - k
            free[p] += 1
        else:
            ready[reqs[k][0]].append((k, step))
            p = reqs[k][0]
        while free[p] and ready[p]:
            free[p] -= 1
            item, s = ready[p].popleft()
            run(now, item, s)
    for at, (p, m) in zip(times, reqs, strict=True):
        b.new_trace()
        caller = f"gateway/{int(b.rng.integers(2))}"
        root = b.span(None, "POST /quote", "Server", caller, at - 0.2, m["server_end"] - at + 0.6)
        call = b.span(root, "POST /api/quote", "Client", caller, at, m["server_end"] - at + 0.3)
        inst = f"pricing/{p}"
        srv = b.span(call, "POST /api/quote", "Server", inst, m["server"], m["server_end"] - m["server"])
        repo = b.span(srv, "ApplicantRepository.GetApplicant", "Internal", inst, m["get"],
                      m["get_end"] - m["get"])
        b.span(repo, "EXECUTE usp_GetApplicant", "Client", inst, m["sql"], m["get_end"] - m["sql"])
        b.span(srv, "create_item quotes", "Client", inst, m["cosmos"], m["cosmos_end"] - m["cosmos"])
        b.span(srv, "POST bureau", "Client", inst, m["bureau"], m["bureau_end"] - m["bureau"])
    return b.frame()


def test_a_starved_thread_pool_is_queueing_not_a_lock() -> None:
    result = diagnose_frame(_starved_service())
    found = [(f.pattern, round(f.confidence, 2), f.span_name) for f in result.findings]
    assert any(f.pattern == "queueing" and f.confidence >= 0.5 for f in result.findings), found
    assert all(f.confidence < 0.5 for f in result.findings if f.pattern == "lock_contention"), found


def test_a_lock_read_on_a_starved_pool_is_held_below_named() -> None:
    """The lock detector's reading of the repository span (its time rises with the requests in it)
    handed to the burst rule: other work that takes no lock (the Cosmos write) waits with the bursts
    too, so the lock is held below 0.5, part of the queueing finding."""
    frame = _starved_service()
    ctx = Context(frame)
    found = queueing.detect(ctx) + network.detect(ctx)  # network's: the wait for a worker (accept_queue.py)
    queue = [fd for fd in found if fd.pattern == "queueing" and fd.confidence >= 0.5]
    assert queue, "the burst's queue before the handler"
    lock = Finding("lock_contention", 0.85, "feature_hydration", "ApplicantRepository.GetApplicant",
                   {"summary": "", "stats": {}}, "")
    burst_waits.settle(ctx, [*queue, lock])
    assert lock.evidence["stats"].get("part_of") == "queueing", lock.evidence
    assert lock.confidence < 0.5, (lock.confidence, lock.evidence)
    assert "create_item quotes" in lock.evidence["stats"]["unrelated_waits"]
