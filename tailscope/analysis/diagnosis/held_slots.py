"""Who held the worker slots a queue waited for: a queue that the cache misses make.

Mechanism. Calls wait for a worker slot (accept_queue.py) when every slot is taken. Slots fill either
because more calls arrive (a burst of traffic) or because each call holds its slot longer (slow work
at an ordinary rate). A cache whose keys expire together sends many requests down the miss path at
once; each holds its worker for the store's round trip, and the calls behind them queue although the
arrival rate has not moved. So where the large waits for a slot come at an ordinary arrival rate (under
1.3x the run's mean just before them) and most of the slots running when those calls were sent (>= 40 %,
and at least 1.5x their usual share) were held by requests on a named cache_miss finding's miss path,
the queue is that finding's consequence: the queueing finding stays, marked part of it, and is ranked
after it (shares.py), with its confidence at most the cache finding's.
"""

from __future__ import annotations

import numpy as np

from tailscope.analysis.diagnosis.model import Context, Finding

ORDINARY_RATE = 1.3
HELD = 0.4
LIFT = 1.5


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
    """Mark an accept-queue finding part of the cache_miss finding whose misses held its slots."""
    queue = ctx.notes.get("accept_queue")
    missed = ctx.notes.get("miss_requests", {})
    if queue is None or not missed:
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
        for cache in findings:
            if cache.pattern != "cache_miss" or cache.confidence < 0.5 or cache.span_name not in missed:
                continue
            roots = f.requests.root[missed[cache.span_name]]
            held = running(f, roots, f.instance[srv], f.start[cli]) / np.maximum(busy, 1.0)
            at_waits, usual = float(held[big].mean()), float(held.mean())
            if at_waits < HELD or at_waits < LIFT * usual:
                continue
            stats["part_of"] = "cache_miss"
            stats["slots_held_by_misses"] = round(at_waits, 3)
            fd.confidence = min(fd.confidence, 0.9 * cache.confidence)
            fd.evidence["summary"] += (
                f" The calls waited at an ordinary arrival rate ({stats['arrival_rate_at_large_waits']:.1f}x "
                f"the mean) while {at_waits:.0%} of the running requests were on the miss path of "
                f"'{cache.span_name}' ({usual:.0%} at other times): the misses held the slots; part of "
                "the cache_miss finding."
            )
            break
    return findings
