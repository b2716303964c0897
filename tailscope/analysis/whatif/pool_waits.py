"""The wait for a pooled connection before a call, re-timed when a lever shortens the calls that hold
the pool.

A client pool of N connections (HikariCP, a database/sql pool, PgBouncer's client side) is N servers:
a call gets a connection when one is free, and its span starts once it has one, so its wait shows as
a gap before the span, and the wait comes from the holders' durations: with the holders slow (a query
whose plan flipped), the pool runs out on bursts; with them fast again, the wait goes too. A fix of
the calls that only sets their durations would leave those gaps in place.

What identifies such a pool in a trace (per instance and call name, a model): the calls that start
after a wait (a gap before them over WAIT_NS) start when another call of the name on that instance
ends (within HANDOVER_NS: the connection handed over), at least HANDED_SHARE of them, with the same
number of the others still in flight each time (N - 1: the pool was full), and never more than N in
flight at once. The fix: the run's requests ask for a connection when they did (the span's start less
its wait, the calm gap before the call kept), hold it for the call's new duration plus the measured
hand-over delay, and are replayed first come first served through N connections; the gap before each
call is cut to the replayed wait. Assumptions: one pool per instance for the name (calls of other names
on the same pool are not counted as holders), no hold outside the span but the hand-over delay, and
arrivals as in the run (a faster request does not come back sooner)."""

from __future__ import annotations

import numpy as np

from tailscope.analysis.whatif.levers import Inputs, Lever
from tailscope.analysis.whatif.replay import fifo_starts
from tailscope.analysis.whatif.retime import Edit

WAIT_NS = 1_000_000  # a gap before a call over this is a wait
HANDOVER_NS = 1_000_000  # a call starting within this of another's end took its connection
HANDED_SHARE = 0.8  # of the waited calls, at least this share handed over
MIN_WAITS = 5  # waited calls an instance needs


def pool_size(start: np.ndarray, end: np.ndarray, waited: np.ndarray) -> tuple[int, float] | None:
    """(N, the hand-over delay in ns) of the pool the calls (one instance's, one name) wait for, read
    from the waited ones' starts; None where their waits are not a full pool's."""
    if waited.sum() < MIN_WAITS:
        return None
    ends = np.sort(end)
    starts = np.sort(start)
    t = start[waited]
    i = np.searchsorted(ends, t, side="right") - 1
    dist = t - ends[np.maximum(i, 0)]
    handed = (i >= 0) & (dist < HANDOVER_NS)
    if handed.mean() < HANDED_SHARE:
        return None
    # in flight just before each hand-over: started before it and not yet ended (the one handing
    # over has ended)
    inflight = np.searchsorted(starts, t, side="left") - np.searchsorted(ends, t, side="right")
    counts = np.bincount(np.maximum(inflight[handed], 0))
    n = int(np.argmax(counts)) + 1
    if counts[n - 1] < HANDED_SHARE * handed.sum():
        return None
    # never more than N in flight
    every = np.searchsorted(starts, start, side="right") - np.searchsorted(ends, start, side="right")
    if every.max() > n:
        return None
    return n, float(np.median(dist[handed]))


def requeued(x: Inputs, edit: Edit, calls: np.ndarray) -> int:
    """Cut the gaps before `calls` (one name, their new durations set in `edit`) to the waits a pool
    of their instance would give with those durations (module docstring), where their waits are a
    pool's. Returns how many gaps shrank."""
    f, lay = x.frame, x.lay
    new = np.where(np.isnan(edit.dur[calls]), f.dur[calls], edit.dur[calls])
    if not (new < f.dur[calls]).any():
        return 0
    shrank = 0
    for inst in np.unique(f.instance[calls]).tolist():
        on = f.instance[calls] == inst
        m = calls[on]
        start = f.start[m].astype(np.float64)
        end = start + f.dur[m]
        gap = lay.gap[m].astype(np.float64)
        waited = gap > WAIT_NS
        pool = pool_size(start, end, waited)
        if pool is None or waited.all():
            continue
        cut = _replayed_cuts(start, gap, waited, new[on], pool)
        edit.cut_before[m] += cut
        shrank += int((cut > 0).sum())
    return shrank


def requeued_lever(x: Inputs, lever: Lever | None) -> Lever | None:
    """`lever` (a dependency's calls made shorter) with the waits for a pooled connection before the
    calls re-timed through the pool (`requeued`)."""
    if lever is None:
        return None
    calls = np.nonzero(~np.isnan(lever.edit.dur))[0]
    if not len(calls):
        return lever
    shrank = 0
    for code in np.unique(x.frame.name[calls]).tolist():
        shrank += requeued(x, lever.edit, calls[x.frame.name[calls] == code])
    if shrank:
        lever.model += ("; the waits for a pooled connection before the calls replayed through the pool "
                        "(N connections read from the hand-overs) with the new hold times")
        lever.params["pool_waits_retimed"] = shrank
    return lever



def _pools_of(x: Inputs, every: np.ndarray, edit: Edit) -> tuple[int, float] | None:
    """`pool_size` of one instance's calls, read from the waits before first attempts only (a retry's
    gap is its back-off, no hand-over); where the hand-overs show but no one N (an instance holding
    several pools, one per worker process), the most calls ever in flight, as one pool (a model:
    pools shared are a little faster than the same connections split)."""
    f, lay = x.frame, x.lay
    every = every[np.lexsort((f.start[every], f.parent[every]))]
    start = f.start[every].astype(np.float64)
    end = start + f.dur[every]
    waited = (lay.gap[every] > WAIT_NS) & ~(np.r_[False, f.parent[every][1:] == f.parent[every][:-1]])
    pool = pool_size(start, end, waited)
    if pool is not None or waited.sum() < MIN_WAITS:
        return pool
    ends, t = np.sort(end), start[waited]
    i = np.searchsorted(ends, t, side="right") - 1
    dist = t - ends[np.maximum(i, 0)]
    handed = (i >= 0) & (dist < HANDOVER_NS)
    if handed.mean() < HANDED_SHARE:
        return None
    starts = np.sort(start)
    inflight = np.searchsorted(starts, start, side="right") - np.searchsorted(ends, start, side="right")
    return int(inflight.max()), float(np.median(dist[handed]))


def requeued_name(x: Inputs, edit: Edit, calls: np.ndarray) -> int:
    """`requeued` over every call of one name (`calls`, edited or not: all of them hold the pool; the
    pool read from all of them), the ones the edit removes (duration 0: an attempt no longer made, a
    retry answered by its first attempt) left out of the replay. Returns how many gaps shrank."""
    f, lay = x.frame, x.lay
    kept = calls[edit.dur[calls] != 0]
    new = np.where(np.isnan(edit.dur[kept]), f.dur[kept], edit.dur[kept])
    shrank = 0
    for inst in np.unique(f.instance[kept]).tolist():
        m = kept[f.instance[kept] == inst]
        every = calls[f.instance[calls] == inst]
        start = f.start[m].astype(np.float64)
        gap = lay.gap[m].astype(np.float64)
        waited = gap > WAIT_NS
        pool = _pools_of(x, every, edit)
        if pool is None or waited.all():
            continue
        cut = _replayed_cuts(start, gap, waited, new[f.instance[kept] == inst], pool)
        edit.cut_before[m] = np.maximum(edit.cut_before[m], cut)
        shrank += int((cut > 0).sum())
    return shrank


def _replayed_cuts(start: np.ndarray, gap: np.ndarray, waited: np.ndarray, durations: np.ndarray,
                   pool: tuple[int, float]) -> np.ndarray:
    """How much of each call's wait before its span goes when the calls, each ready after a calm gap, are
    replayed first come first served through the pool's `n` connections with their new `durations` (+ the
    pool's hand-over `delay`): never more than the wait beyond the calm gap."""
    n, delay = pool
    calm_gap = float(np.median(gap[~waited]))
    ready = start - gap + np.minimum(gap, calm_gap)
    got = fifo_starts(ready, durations + delay, n)
    return np.clip(start - got, 0.0, gap - np.minimum(gap, calm_gap))
