"""The Go runtime of the blind family `go-ray`'s gateway (go_ray.py): per pod, the GC cycles its
allocation drives (a live heap, GOGC=100 and a GOMEMLIMIT; mark phases whose assists slow the goroutines
that allocate) and the CFS quota (200 ms of CPU per 100 ms period) that GOMAXPROCS=32 burns through
whenever a period's demand (requests' CPU, the 8 dedicated mark workers, a backlog carried over from a
throttled period) exceeds it. Also the network path of a pod (RTT, retransmits). Times are ns from
the run's start.
"""

from __future__ import annotations

import bisect
import math
import random
from dataclasses import dataclass, field

from reference_pipeline.simulate.trace_table import NS_PER_MS, Stalls, merge_intervals

PERIOD_MS = 100.0  # cfs_period_us
QUOTA_MS = 200.0  # cfs_quota_us: a 2-core limit
GOMAXPROCS = 32
MARK_WORKERS = GOMAXPROCS // 4  # the pacer's 25 % background utilisation, as dedicated workers
MARK_BUSY = 0.6  # the share of a mark phase the dedicated workers find work (they idle on an empty queue)
GOMEMLIMIT_MB = 640.0
BASE_CPU_MS = 4.2  # a request's CPU on the gateway: TLS, HTTP/2, protobuf + JSON, otel, business rules
ALLOC_MB = 0.9  # allocated per request at top_k 50 (grows with the ranker's response)


@dataclass
class Cycle:
    """One GC cycle: its concurrent mark phase [start, end) and how hard goroutines that allocate
    during it are drafted into assists (a stretch factor on their allocating work)."""

    start: float
    end: float
    assist: float
    live_mb: float


@dataclass
class GatewayRuntime:
    """One gateway pod: the throttled periods (Stalls: nothing of the process runs inside them) and the
    GC cycles (assists: allocating work overlapping a mark phase is stretched)."""

    stalls: Stalls
    cycles: list[Cycle]
    starts: list[float] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.starts = [c.start for c in self.cycles]

    def cycle_at(self, t: float) -> Cycle | None:
        k = bisect.bisect_right(self.starts, t) - 1
        return self.cycles[k] if k >= 0 and t < self.cycles[k].end else None

    def work(self, t: float, cpu_ns: float, allocating: bool) -> float:
        """When `cpu_ns` of a goroutine's work started at t is done: throttled periods stall it; when
        it allocates, a mark phase it meets drafts it into assists (stretched by the cycle's factor),
        and a goroutine deep in assist debt parks until the background workers catch up."""
        t = self.stalls.settle(t)
        if allocating:
            k = bisect.bisect_right(self.starts, t + cpu_ns) - 1
            if k >= 0 and self.cycles[k].end > t:
                c = self.cycles[k]
                inside = min(t + cpu_ns, c.end) - max(t, c.start)
                cpu_ns += inside * (c.assist - 1.0)
                if c.assist > 2.0:  # parked on the assist queue: waits for background credit
                    cpu_ns += (c.end - max(t, c.start)) * min(0.6, (c.assist - 2.0) / 3.0)
        return self.stalls.run(t, cpu_ns)


def live_heap(t: float, run_ns: float, growth: bool, rng: random.Random) -> float:
    """The live heap (MB): a steady 70 MB (+ noise), or with `growth` an unbounded result cache
    filling from 15 % of the run to just under GOMEMLIMIT at 55 %, where it stays (entries never expire)."""
    base = 70.0 + rng.uniform(-4.0, 4.0)
    if not growth or t < 0.15 * run_ns:
        return base
    return base + (GOMEMLIMIT_MB - 40.0 - base) * min(1.0, (t - 0.15 * run_ns) / (0.4 * run_ns))


def gc_cycles(rng: random.Random, arrivals: list[float], alloc_mb: list[float], run_ns: float,
              growth: bool) -> list[Cycle]:
    """Cycles as the pacer starts them: when the heap allocated since the last cycle reaches the
    runway to the goal (GOGC=100: live x 2, capped by GOMEMLIMIT: the runway shrinks as the live heap
    nears the limit, so cycles come more often); marking takes longer the more live heap there is."""
    out: list[Cycle] = []
    allocated = rng.uniform(0.0, 60.0)
    for t, mb in zip(arrivals, alloc_mb, strict=True):
        if out and t < out[-1].end:
            allocated += mb
            continue
        allocated += mb
        live = live_heap(t, run_ns, growth, rng)
        runway = max(min(2.0 * live, GOMEMLIMIT_MB) - live, 24.0)
        if allocated >= runway:
            mark_ms = (2.5 + 0.09 * live) * rng.lognormvariate(0.0, 0.15)
            pressure = live / GOMEMLIMIT_MB
            assist = 1.25 + 3.2 * pressure ** 2
            out.append(Cycle(t, t + mark_ms * NS_PER_MS, assist, live))
            allocated = 0.0
    return out


def throttled_periods(rng: random.Random, arrivals: list[float], cpu_ms: list[float],
                      cycles: list[Cycle], horizon: float, offset: float) -> list[tuple[float, float]]:
    """The CFS fluid model: per period, demand = the CPU of the requests arriving in it + the mark
    workers' CPU during mark phases + a runtime/otel-exporter floor + what a throttled period left
    over; over the quota, the pod's 32 threads burn the quota early and every thread waits for the
    next period's refill (the stall ends on a period boundary)."""
    period = PERIOD_MS * NS_PER_MS
    n = math.ceil((horizon - offset) / period) + 1
    demand = [3.0 + rng.uniform(0.0, 2.0) for _ in range(n)]
    for t, ms in zip(arrivals, cpu_ms, strict=True):
        demand[min(n - 1, max(0, int((t - offset) // period)))] += ms
    for c in cycles:
        k = int((c.start - offset) // period)
        while k < n and offset + k * period < c.end:
            a, b = offset + k * period, offset + (k + 1) * period
            demand[max(k, 0)] += MARK_WORKERS * MARK_BUSY * (min(b, c.end) - max(a, c.start)) / NS_PER_MS
            k += 1
    out = []
    backlog = 0.0
    for k in range(n):
        work = demand[k] + backlog
        if work <= QUOTA_MS:
            backlog = 0.0
            continue
        backlog = work - QUOTA_MS
        # runnable work spread over the period, up to 32 threads at once: the quota lasts this long
        burn = max(QUOTA_MS / GOMAXPROCS, PERIOD_MS * QUOTA_MS / work * 0.8)
        a = offset + k * period + burn * NS_PER_MS
        out.append((a, offset + (k + 1) * period))
    return merge_intervals(out)


def gateway_runtime(rng: random.Random, arrivals: list[float], cpu_ms: list[float], alloc_mb: list[float],
                    run_ns: float, horizon: float, growth: bool) -> GatewayRuntime:
    cycles = gc_cycles(rng, arrivals, alloc_mb, run_ns, growth)
    offset = -rng.uniform(0.0, PERIOD_MS) * NS_PER_MS  # the periods' phase against the run
    stalls = Stalls(throttled_periods(rng, arrivals, cpu_ms, cycles, horizon, offset))
    for c in cycles:  # the mark workers are throttled with everything else: marking lasts longer
        c.end = stalls.run(c.start, c.end - c.start)
    return GatewayRuntime(stalls, cycles)


@dataclass(frozen=True)
class Path:
    """A pod's network path to the backends: one-way latency (ms) and the chance a segment is lost."""

    one_way_ms: float
    loss: float

    def transfer(self, rng: random.Random, kb: float) -> float:
        """ns for a response of `kb` to reach the caller: latency, serialisation at ~1.2 GB/s, and per
        lost segment either a fast retransmit (one more RTT) or, for a lost tail, the 200 ms RTO."""
        t = self.one_way_ms * rng.lognormvariate(0.0, 0.2) + kb / 1200.0
        segments = max(1, int(kb / 1.4))
        for _ in range(_losses(rng, segments, self.loss)):
            t += 200.0 + rng.uniform(0.0, 30.0) if rng.random() < 0.6 else 2 * self.one_way_ms
        return t * NS_PER_MS


def _losses(rng: random.Random, segments: int, loss: float) -> int:
    if loss <= 0.0:
        return 0
    p_any = 1.0 - (1.0 - loss) ** segments
    return 1 if rng.random() < p_any else 0
