"""Waits for a row lock held by other instances' transactions are lock contention (diag20,
django-celery class 2): a request's `SELECT ... FOR UPDATE` on a hot key waits, whatever pod it runs
on, until the transaction holding the row commits, and ends a round trip after that transaction's last
statement ended (transaction_waits.py). No instance has the waiters piling up, so lock_contention.py's
per-instance test misses it; read before as a queue at an untraced callee or a slow dependency. The
same calls waiting for an untraced callee's workers (freed by every call's end, not a transaction's
last) are no lock."""

from __future__ import annotations

import heapq

from tailscope.analysis.diagnosis import diagnose_frame
from tests.mechanism_frames import TraceBuilder, by_pattern, lognormal

INSTANCES = 40  # one per sync worker process: no instance sees the waiters pile up
STATEMENTS = (("SELECT", 2.0), ("UPDATE", 0.6), ("INSERT", 0.5))


def exposure_service(seed: int, row_locks: bool, n: int = 3000, rps: float = 110.0):
    """Forty API worker processes; per request `score` (~10 ms) then a transaction to postgres: `SELECT`
    (FOR UPDATE on the customer's row, or any statement), `SELECT`, `UPDATE`, `INSERT`, then COMMIT
    (~1 ms). A tenth of the arrivals are 4-12 requests at once. With `row_locks`, those are for one
    customer and their FOR UPDATEs wait for the previous holder's commit; otherwise a callee with two
    workers runs every statement in the order they reach it (each waits for a free worker). Statements
    are simulated in time order (an event queue), so the callee's queue is first come, first served."""
    b = TraceBuilder(seed)
    arrivals: list[tuple[float, int]] = []
    for t in b.arrivals(n, rps / 1.8):
        key = int(b.rng.integers(1_000_000))
        for _ in range(int(b.rng.integers(4, 13)) if b.rng.random() < 0.1 else 1):
            mine = key if row_locks else int(b.rng.integers(10**6))
            arrivals.append((t + float(b.rng.uniform(0.0, 4.0)), mine))
    arrivals.sort()
    arrivals = arrivals[:n]
    statements = (("SELECT", 0.3), *STATEMENTS)
    workers = [0.0] * 2
    rtt = 0.4
    events: list[tuple[float, int, int]] = []  # (when the statement is sent, request, statement)
    roots, insts = [], []
    for r, (t, _key) in enumerate(arrivals):
        b.new_trace()
        inst = f"api/{int(b.rng.integers(INSTANCES))}"
        root = b.span(None, "POST /limit", "Server", inst, t, 0.0)
        d = lognormal(b.rng, 10.0, 0.3)
        b.span(root, "score", "Internal", inst, t + 0.1, d)
        roots.append(root)
        insts.append(inst)
        heapq.heappush(events, (t + 0.2 + d, r, 0))
    holder: dict[int, int] = {}  # key -> the request whose transaction holds its row
    queued: dict[int, list[tuple[float, int]]] = {}  # key -> FOR UPDATEs waiting (sent, request)

    def run(sent: float, r: int, k: int, served: float, work: float) -> None:
        end = served + work + rtt / 2
        b.trace = r
        b.span(roots[r], statements[k][0], "Client", insts[r], sent, end - sent, db__system="postgresql",
               server__address="pg.internal")
        if k + 1 < len(statements):
            heapq.heappush(events, (end + 0.05, r, k + 1))
            return
        committed = end + 0.05 + rtt / 2 + lognormal(b.rng, 0.6, 0.3)
        b.set_end(roots[r], committed + rtt / 2 + 0.3)
        key = arrivals[r][1]
        if row_locks and queued.get(key):  # the row goes to the next waiter at the commit
            sent2, r2 = queued[key].pop(0)
            holder[key] = r2
            run(sent2, r2, 0, max(sent2 + rtt / 2, committed), lognormal(b.rng, statements[0][1], 0.3))
        elif row_locks:
            holder.pop(key, None)

    while events:
        sent, r, k = heapq.heappop(events)
        work = lognormal(b.rng, statements[k][1], 0.3)
        at = sent + rtt / 2
        if row_locks and k == 0:
            key = arrivals[r][1]
            if key in holder:
                queued.setdefault(key, []).append((sent, r))
                continue
            holder[key] = r
            run(sent, r, k, at, work)
        elif row_locks:
            run(sent, r, k, at, work)
        else:
            served = max(at, workers[0])
            heapq.heapreplace(workers, served + work)
            run(sent, r, k, served, work)
    return b.frame()


def test_waits_released_by_other_transactions_commits_are_lock_contention() -> None:
    result = diagnose_frame(exposure_service(1, row_locks=True))
    seen = by_pattern(result.findings)
    assert result.findings[0].pattern == "lock_contention" and seen["lock_contention"] >= 0.5, seen
    assert seen.get("slow_dependency", 0.0) < 0.5 and seen.get("queueing", 0.0) < 0.5, seen


def test_waits_for_a_callees_workers_are_no_transaction_lock() -> None:
    result = diagnose_frame(exposure_service(1, row_locks=False))
    waits = [f for f in result.findings if f.evidence.get("stats", {}).get("mechanism")
             == "waits released by other transactions' ends"]
    found = [(f.pattern, round(f.confidence, 2)) for f in result.findings]
    assert not waits or waits[0].confidence < 0.5, found
