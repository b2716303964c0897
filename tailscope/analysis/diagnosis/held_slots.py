"""Who held the worker slots a queue waited for: a queue that cache misses or a lock make.

Mechanism. Calls wait for a worker slot (accept_queue.py) when every slot is taken. Slots fill either
because more calls arrive (a burst of traffic) or because each call holds its slot longer (slow work
at an ordinary rate). A cache whose keys expire together sends many requests down the miss path at
once; each holds its worker for the store's round trip, and the calls behind them queue although the
arrival rate has not moved; a connection pool that runs dry keeps its waiters on their workers too.
So where the large waits for a slot come at an ordinary arrival rate (under 1.3x the run's mean just
before them) and the slots running when those calls were sent were held (most of them, or >= 30 %
and at least 1.5x their usual share) by requests on a named cache_miss finding's miss path (a span of
its name over 3x its median) or inside a named lock_contention finding's span (waiting for the lock or
the pool's connection), the queue is that finding's consequence: the queueing finding stays, marked
part of it, ranked after it (shares.py), its confidence at most 0.9x that finding's.
"""

from __future__ import annotations

import numpy as np

from tailscope.analysis.diagnosis.model import Context, Finding

ORDINARY_RATE = 1.3
HELD = 0.3
MOST = 0.5  # most of the slots held by the slow path: the queue is its, however usual that is
LIFT = 1.5
SLOW = 3.0  # a span over 3x its name's median is on the slow path (a miss, a wait for the lock)
HOLDERS = ("cache_miss", "lock_contention")


def running(f, spans: np.ndarray, instance: np.ndarray, at: np.ndarray) -> np.ndarray:
    """How many of `spans` were running on `instance` at `at` (per query)."""
    horizon = int(max(f.end.max(), at.max(initial=0))) + 2
    starts = np.sort(f.instance[spans].astype(np.int64) * horizon + f.start[spans])
    ends = np.sort(f.instance[spans].astype(np.int64) * horizon + f.end[spans])
    key = instance.astype(np.int64) * horizon + at
    return (np.searchsorted(starts, key, side="right") - np.searchsorted(ends, key, side="right")).astype(
        np.float64
    )


def settle(ctx: Context, findings: list[Finding]) -> list[Finding]:
    """Mark an accept-queue finding part of the cache_miss or lock_contention finding whose slow spans
    held its slots."""
    queue = ctx.notes.get("accept_queue")
    if queue is None:
        return findings
    cli, srv, big = queue
    f = ctx.frame
    for fd in findings:
        stats = fd.evidence.get("stats", {})
        if fd.pattern != "queueing" or "arrival_rate_at_large_waits" not in stats or stats.get("part_of"):
            continue
        if stats["arrival_rate_at_large_waits"] >= ORDINARY_RATE:
            continue  # more calls came: a burst fills the pool, whatever holds the slots
        busy = running(f, srv, f.instance[srv], f.start[cli])
        for cause in sorted(findings, key=lambda x: -x.confidence):
            if cause.pattern not in HOLDERS or cause.confidence < 0.5 or cause.span_name not in f.names:
                continue
            code = f.names.index(cause.span_name)
            spans = np.nonzero((f.name == code) & (f.request >= 0))[0]
            if len(spans) == 0:
                continue
            slow = spans[f.dur[spans] > SLOW * float(np.median(f.dur[spans]))]
            holders = np.zeros(ctx.n_requests, bool)  # requests that took the slow path hold their slot
            holders[f.request[slow]] = True
            on_slow_path = running(f, f.requests.root[holders], f.instance[srv], f.start[cli])
            in_span = running(f, spans, f.instance[srv], f.start[cli])  # waiting in it (a pool) right then
            held = np.maximum(on_slow_path, in_span) / np.maximum(busy, 1.0)
            at_waits, usual = float(held[big].mean()), float(held.mean())
            if at_waits < MOST and (at_waits < HELD or at_waits < LIFT * usual):
                continue
            stats["part_of"] = cause.pattern
            stats["slots_held_by_" + cause.pattern] = round(at_waits, 3)
            fd.confidence = min(fd.confidence, 0.9 * cause.confidence)
            fd.evidence["summary"] += (
                f" The calls waited at an ordinary arrival rate ({stats['arrival_rate_at_large_waits']:.1f}x "
                f"the mean) while {at_waits:.0%} of the running requests were in a slow '{cause.span_name}' "
                f"({usual:.0%} at other times): those held the slots; part of the {cause.pattern} finding."
            )
            break
    return findings
