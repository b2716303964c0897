"""The Go runtime and the cgroup under `ad-auction`'s pods (blind family `ads-auction`, ads_auction.py).

A pod's goroutines do not always run at full speed: during a GC mark phase an allocating goroutine
is charged mark assists (it runs at 1/f of its speed, f growing with the allocation rate), two short
stop-the-world phases (sweep termination, mark termination) stop every goroutine, and a pod whose
CFS quota is spent runs nothing until the next 100 ms period. `PodClock` holds those windows as a
piecewise progress rate and answers when `work` ns of CPU started at t is done (`run`) and when a
goroutine woken at t (a reply arrived, a timer fired) can run (`settle`).
"""

from __future__ import annotations

import bisect
import itertools
import random
from dataclasses import dataclass

from reference_pipeline.simulate.trace_table import NS_PER_MS, NS_PER_S

PERIOD = 100 * NS_PER_MS  # CFS period
GC_CORES = 4.0  # GOMAXPROCS 16 (the node's cores: no automaxprocs) x 25 % background mark workers
_STEP = 5 * NS_PER_MS


@dataclass(frozen=True)
class GcCycle:
    """One Go GC cycle on one pod: the concurrent mark [mark_start, mark_end), its assist factor, the
    two stop-the-world phases at its edges, the heap goal it ran for."""

    number: int
    mark_start: float
    mark_end: float
    assist: float
    stw_start: float
    stw_end: float
    heap_goal_mb: float


class PodClock:
    """Progress rate of a pod's goroutines over wall time: 1 outside every window, 0 inside a stop
    (STW, throttled), 1/f inside a mark phase (f: the assist factor); overlapping windows take the
    lowest rate."""

    def __init__(self, windows: list[tuple[float, float, float]]) -> None:
        points = sorted({a for a, _, _ in windows} | {b for _, b, _ in windows})
        ordered = sorted(windows)
        active: list[tuple[float, float, float]] = []
        k = 0
        self.starts: list[float] = []
        self.ends: list[float] = []
        self.rates: list[float] = []
        for a, b in itertools.pairwise(points):
            while k < len(ordered) and ordered[k][0] <= a:
                active.append(ordered[k])
                k += 1
            active = [w for w in active if w[1] > a]
            if active:
                rate = min(w[2] for w in active)
                if self.rates and self.ends[-1] == a and self.rates[-1] == rate:
                    self.ends[-1] = b
                else:
                    self.starts.append(a)
                    self.ends.append(b)
                    self.rates.append(rate)

    def settle(self, t: float) -> float:
        """When a goroutine that wants to run at t can run: t, or the end of the stop holding it."""
        k = bisect.bisect_right(self.starts, t) - 1
        while 0 <= k < len(self.starts) and t < self.ends[k] and self.rates[k] == 0.0:
            t = self.ends[k]
            k += 1
            if k >= len(self.starts) or self.starts[k] > t:
                break
        return t

    def run(self, t: float, work: float) -> float:
        """Wall time at which `work` ns of CPU started at t is done."""
        k = bisect.bisect_right(self.starts, t) - 1
        if k >= 0 and t >= self.ends[k]:
            k += 1
        k = max(k, 0)
        while True:
            if k < len(self.starts) and self.starts[k] <= t < self.ends[k]:
                rate = self.rates[k]
                room = (self.ends[k] - t) * rate
                if rate > 0.0 and work <= room:
                    return t + work / rate
                work -= room
                t = self.ends[k]
                k += 1
                continue
            nxt = self.starts[k] if k < len(self.starts) else float("inf")
            if t + work <= nxt:
                return t + work
            work -= nxt - t
            t = nxt


def gc_cycles(rng: random.Random, horizon: float, alloc_mb_s: list[float], live_mb: list[float],
              gogc: float, mark_mb_s: float, stw_ms: tuple[float, float]) -> list[GcCycle]:
    """The pod's GC cycles: allocation (MB/s per 5 ms step) fills the heap from its live size to
    the trigger (~0.9 of GOGC's growth); then the mark runs for live / mark rate, with assists that
    grow with the allocation rate (1 + (rate / 400 MB/s)^2, at most 8: the pacer's assist ratio);
    the allocation count restarts at the mark's end."""
    out: list[GcCycle] = []
    t, allocated = rng.uniform(0.0, 0.6) * NS_PER_S, rng.uniform(0.0, 0.8)
    while t < horizon:
        step = min(int(t // _STEP), len(alloc_mb_s) - 1)
        rate, live = alloc_mb_s[step], live_mb[step]
        allocated += rate * _STEP / NS_PER_S / (live * gogc / 100.0 * 0.9)
        t += _STEP
        if allocated < 1.0:
            continue
        mark = live / mark_mb_s * rng.lognormvariate(0.0, 0.15) * NS_PER_S
        stw_a, stw_b = (rng.uniform(*stw_ms) * NS_PER_MS for _ in range(2))
        out.append(GcCycle(len(out) + 1, t, t + mark, min(8.0, 1.0 + (rate / 400.0) ** 2), stw_a, stw_b,
                           live * (1.0 + gogc / 100.0)))
        t += mark + stw_b
        allocated = 0.0
    return out


def gc_windows(cycles: list[GcCycle]) -> list[tuple[float, float, float]]:
    """Rate windows of the cycles: STW (rate 0) at both edges of the mark, 1/assist inside it."""
    out = []
    for c in cycles:
        out.append((c.mark_start - c.stw_start, c.mark_start, 0.0))
        out.append((c.mark_start, c.mark_end, 1.0 / c.assist))
        out.append((c.mark_end, c.mark_end + c.stw_end, 0.0))
    return out


def throttle_windows(demand_ms: list[float], cycles: list[GcCycle], quota_ms: float, phase: float
                     ) -> list[tuple[float, float, float]]:
    """CFS throttling: per 100 ms period the pod may use `quota_ms` of CPU; its demand (the requests'
    CPU that arrived in the period, the GC's mark workers, and what the last period left over) is
    burnt at the rate it arrives, so a period whose demand D exceeds the quota runs until Q/D of the
    period and is stopped until the period's end; the rest carries into the next period. Period k
    is [phase + k P, phase + (k + 1) P): the cgroup's own timer."""
    gc = [0.0] * len(demand_ms)
    for c in cycles:
        a, b = c.mark_start, c.mark_end
        while a < b:
            k = int((a - phase) // PERIOD)
            end = min(b, phase + (k + 1) * PERIOD)
            if 0 <= k < len(gc):
                gc[k] += GC_CORES * (end - a) / NS_PER_MS
            a = end
    out = []
    carry = 0.0
    for k, d in enumerate(demand_ms):
        total = carry + d + gc[k]
        if total > quota_ms:
            start = phase + k * PERIOD + PERIOD * quota_ms / total
            out.append((start, phase + (k + 1) * PERIOD, 0.0))
        carry = max(0.0, total - quota_ms)
    return out
