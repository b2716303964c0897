"""lock_contention where a lock in the database releases its waiters all at once and the calls queued for
the connections they held start as each is given back (lock_contention.py with pool_release.py): the
completions come in clumps, which alone would read as batched work, but the clumped waiters hand pooled
connections on. Twin: a database that is slow for the same seconds without a lock or a pool (every call
takes longer while it lasts) names no lock."""

from __future__ import annotations

import heapq

from tailscope.analysis.diagnosis import diagnose_frame
from tests.mechanism_frames import TraceBuilder, by_pattern, lognormal

N, RPS, PROCESSES, POOL = 3000, 90.0, 3, 100
LOCK = (8_000.0, 13_000.0)  # ms: a job holds a table lock the writes need


def _service(seed: int, locked: bool) -> TraceBuilder:
    """An API (3 processes, a pool of POOL connections each) scores a request and writes the decision
    to a database. `locked`: a job's table lock holds every write for LOCK; a write takes a connection
    first, waiting (in the handler's `save` span, before the call) while POOL others hold one. Else:
    the database answers every write ~200 ms slower for the same seconds, with connections to spare."""
    b = TraceBuilder(seed)
    free: dict[str, list[float]] = {f"api/{k}": [0.0] * POOL for k in range(PROCESSES)}  # when each frees
    for t in b.arrivals(N, RPS):
        b.new_trace()
        inst = f"api/{int(b.rng.integers(PROCESSES))}"
        root = b.span(None, "POST /score", "Server", inst, float(t), 0.0)
        cur = float(t) + lognormal(b.rng, 4.0, 0.2)
        b.span(root, "score", "Internal", inst, float(t) + 0.1, cur - float(t) - 0.1)
        save = b.span(root, "save", "Internal", inst, cur, 0.0)
        run = lognormal(b.rng, 2.0, 0.3)
        if locked:
            got = max(cur, heapq.heappop(free[inst]))  # the first connection given back
            end = got + run
            if LOCK[0] <= got < LOCK[1] or (got < LOCK[0] < end):
                end = LOCK[1] + run  # waits on the table lock, holding its connection
            heapq.heappush(free[inst], end)
        else:
            got = cur
            end = got + run + (lognormal(b.rng, 200.0, 0.3) if LOCK[0] <= got < LOCK[1] else 0.0)
        b.span(save, "INSERT decisions", "Client", inst, got, end - got, server__address="sql.internal")
        b.set_end(save, end + 0.05)
        b.set_end(root, end + 0.2)
    return b


def test_a_lock_that_releases_its_waiters_at_once_is_lock_contention():
    """Before: the clumped completions read as batched work, the lock never tested for its release:
    slow_dependency on the write."""
    findings = diagnose_frame(_service(5, locked=True).frame()).findings
    seen = by_pattern(findings)
    assert findings[0].pattern == "lock_contention", [(f.pattern, round(f.confidence, 2)) for f in findings]
    assert seen["lock_contention"] >= 0.5, seen


def test_a_database_slow_for_the_same_seconds_names_no_lock():
    seen = by_pattern(diagnose_frame(_service(5, locked=False).frame()).findings)
    assert seen.get("lock_contention", 0.0) < 0.5, seen
