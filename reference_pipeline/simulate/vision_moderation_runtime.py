"""The physics under `vision-moderation` (vision_moderation.py): the Go runtime of the gateway pods
(GC cycles paced by allocation, mark assists, short stop-the-world phases, CFS throttling when
GOMAXPROCS is the node's core count and the quota is smaller), Triton's dynamic batcher, PgBouncer's
fixed set of server connections and TCP loss recovery.

Times are float ns from the start of the run, like trace_table's.
"""

from __future__ import annotations

import bisect
import math
import random
from dataclasses import dataclass, field

from reference_pipeline.simulate.trace_table import NS_PER_MS, NS_PER_S, Stalls

PERIOD_NS = 100 * NS_PER_MS  # the CFS period (cpu.cfs_period_us = 100000)
MARK_MB_PER_CORE_S = 600.0  # heap a mark worker scans per CPU-second


@dataclass(frozen=True)
class GcCycle:
    """One Go GC cycle: sweep termination (STW) at `start`, concurrent mark until `mark_end`, mark
    termination (STW) after it; `assist` is how many times longer allocating work takes during the
    mark (the pacer makes allocating goroutines scan in proportion to what they allocate)."""

    number: int
    start: float
    sweep_term_ns: float
    mark_end: float
    mark_term_ns: float
    assist: float
    heap_goal_mb: float
    background_cpu_ms: float
    assist_cpu_ms: float


@dataclass
class GoRuntime:
    """One gateway pod's process: its GC cycles and the stalls (STW phases and throttled time)."""

    cycles: list[GcCycle]
    stalls: Stalls
    throttled: list[tuple[float, float]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._starts = [c.start + c.sweep_term_ns for c in self.cycles]

    def cpu(self, t: float, work: float, allocating: bool) -> float:
        """Wall time at which `work` ns of CPU started at t is done: allocating work runs `assist`
        times slower while a mark is on; every thread stops during the stalls."""
        t = self.stalls.settle(t)
        if allocating:
            wall, left, now = 0.0, work, t
            k = max(bisect.bisect_right(self._starts, now) - 1, 0)
            while left > 0:
                cycle = self.cycles[k] if k < len(self.cycles) else None
                if cycle is None or now < self._starts[k]:
                    nxt = self._starts[k] if cycle is not None else math.inf
                    step = min(left, nxt - now)
                    wall, left, now = wall + step, left - step, now + step
                    continue
                if now < cycle.mark_end:
                    step = min(left * cycle.assist, cycle.mark_end - now)
                    wall, left, now = wall + step, left - step / cycle.assist, now + step
                k += 1
            work = wall
        return self.stalls.run(t, work)

    def cycles_in(self, a: float, b: float) -> list[GcCycle]:
        lo = bisect.bisect_left(self._starts, a)
        hi = bisect.bisect_left(self._starts, b)
        return self.cycles[lo:hi]


def gc_cycles(rng: random.Random, allocs: list[tuple[float, float]], scan_mb: list[float], heap_mb: float,
              gogc: float, gomaxprocs: int, busy_cores: float) -> list[GcCycle]:
    """The pod's GC cycles from its allocations (time, MB; sorted): a cycle starts when the heap
    allocated since the last one reaches the pacer's trigger (the goal is the live heap times
    1 + GOGC/100); the mark scans the pointerful heap (`scan_mb[k]` at allocation k: image buffers are
    noscan) with the dedicated workers (GOMAXPROCS/4) and idle ones; the faster the pod allocates
    against that scan rate (r), the more allocating goroutines assist (CPU: 1.5 r) and, once they
    outrun the background workers, park in the assist queue waiting for credit (r squared)."""
    out: list[GcCycle] = []
    times = [t for t, _ in allocs]
    prefix = [0.0]
    for _, mb in allocs:
        prefix.append(prefix[-1] + mb)
    k, last = 0, 0.0
    while True:
        runway = heap_mb * gogc / 100.0 * 0.93
        base = prefix[k]
        j = bisect.bisect_left(prefix, base + runway, lo=k + 1)
        if j > len(allocs):
            break
        t = times[j - 1]
        start = max(t, last)
        lo = bisect.bisect_left(times, start - 0.5 * NS_PER_S)
        hi = bisect.bisect_right(times, start)
        rate_mb_s = (prefix[hi] - prefix[lo]) / 0.5
        dedicated = gomaxprocs / 4.0
        idle = max(gomaxprocs - dedicated - busy_cores, 0.0) * 0.1  # idle workers, within the quota
        mark_rate = MARK_MB_PER_CORE_S * (dedicated + idle)
        r = rate_mb_s / mark_rate * rng.uniform(0.85, 1.15)
        assist = 1.0 + 1.5 * r + r * r
        scan = scan_mb[j - 1]
        mark_s = scan / mark_rate * rng.uniform(0.85, 1.2) / (1.0 + 0.3 * r)
        sweep = rng.uniform(20, 90) * 1000.0 * (1 + scan / 1500.0)
        term = rng.uniform(40, 260) * 1000.0 * (1 + scan / 1000.0)
        mark_end = start + sweep + mark_s * NS_PER_S
        out.append(GcCycle(len(out) + 1, start, sweep, mark_end, term, assist, heap_mb * (1 + gogc / 100.0),
                           mark_s * 1000 * dedicated, busy_cores * 1.5 * r * mark_s * 1000))
        last = mark_end + term
        k = j
    return out


def throttle_stalls(rng: random.Random, demand: list[float], quota_cores: float, gomaxprocs: int,
                    offset: float) -> list[tuple[float, float]]:
    """CFS throttling: `demand[i]` is the CPU (ns) the pod's threads want in period i. With up to
    GOMAXPROCS threads running at once the quota is spent early in a busy period; the cgroup is then
    throttled until the period ends (the pod's periods start at `offset`); what was not done carries
    into the next period."""
    quota = quota_cores * PERIOD_NS
    out: list[tuple[float, float]] = []
    carry = 0.0
    for i, want in enumerate(demand):
        total = want + carry
        if total <= quota:
            carry = 0.0
            continue
        parallel = min(gomaxprocs, max(quota_cores, total / PERIOD_NS * rng.uniform(2.0, 4.0)))
        spent_at = quota / parallel
        start = offset + i * PERIOD_NS
        out.append((start + spent_at, start + PERIOD_NS))
        carry = min(total - quota, 3 * quota)
    return out



@dataclass(frozen=True)
class Batch:
    dispatch: float
    size: int
    input_end: float
    infer_end: float
    end: float


def dynamic_batcher(rng: random.Random, arrivals: list[float], max_batch: int, delay_ns: float,
                    base_ms: float, per_item_ms: float, cold_from: float | None = None) -> list[Batch]:
    """Triton's dynamic batcher over one model instance: requests queue; when the instance is free, a
    batch goes as soon as the largest preferred size (`max_batch`) is pending, else when the oldest
    request has waited `max_queue_delay`. Compute: input copy, the model, output copy, growing with
    the batch size. A cold instance (`cold_from` = the time it came up) runs its first batches slowly
    (CUDA context, lazy module loading, TensorRT's first executions: ~350 ms more on the first batch,
    halving about every batch).
    Returns the batch each arrival (sorted) rode in."""
    out: list[Batch] = []
    i, free, done = 0, 0.0, 0
    n = len(arrivals)
    while i < n:
        t = max(free, arrivals[i])
        pending = bisect.bisect_right(arrivals, t) - i
        if pending >= max_batch:
            dispatch, size = t, max_batch
        else:
            deadline = max(t, arrivals[i] + delay_ns)
            full = arrivals[i + max_batch - 1] if i + max_batch - 1 < n else math.inf
            if full <= deadline:
                dispatch, size = full, max_batch
            else:
                dispatch = deadline
                size = min(bisect.bisect_right(arrivals, deadline) - i, max_batch)
        size = max(size, 1)
        warmup = 350.0 * math.exp(-done / 1.5) * rng.uniform(0.8, 1.2) if cold_from is not None else 0.0
        copy_in = (0.08 + 0.04 * size) * NS_PER_MS * rng.uniform(0.9, 1.2)
        infer = ((base_ms + per_item_ms * size) * rng.lognormvariate(0.0, 0.06) + warmup) * NS_PER_MS
        copy_out = (0.03 + 0.005 * size) * NS_PER_MS * rng.uniform(0.9, 1.2)
        batch = Batch(dispatch, size, dispatch + copy_in, dispatch + copy_in + infer,
                      dispatch + copy_in + infer + copy_out)
        out.extend([batch] * size)
        free = batch.end
        done += 1
        i += size
    return out


def tcp_loss(rng: random.Random, p_rto: float) -> float:
    """Extra ns a call spends on a lost segment that only a retransmission timeout recovers (Linux's
    minimum RTO is 200 ms; a second loss of the same segment doubles it)."""
    if rng.random() >= p_rto:
        return 0.0
    extra = rng.uniform(200.0, 215.0)
    if rng.random() < p_rto:
        extra += rng.uniform(400.0, 415.0)
    return extra * NS_PER_MS
