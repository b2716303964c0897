"""The server side of the blind family `mobile-edge` (mobile_edge.py): a Go pod's CPU under its CFS
quota and its garbage collector, TF Serving's batcher, and the AWS SDK's retries.

- `GoPod.run`: the pod's CPU-bound work (decode + resize of each image) as a processor-sharing
  simulation: GOMAXPROCS Ps run the runnable goroutines (at most one P each); the cgroup's CFS quota
  (limit 2 cores: 200 ms of CPU per 100 ms period) stops every thread of the pod once the period's
  quota is used, until the next period starts. Go's GC starts a cycle when the heap grown since the last
  one reaches the headroom (GOGC=100: the live heap; with GOMEMLIMIT close to the live heap: what is
  left under the limit), with a short stop-the-world at each end of the mark phase (< 1 ms). While it
  marks, a quarter of the Ps run dedicated mark workers, idle Ps run idle mark workers (CPU the quota
  counts), and goroutines that allocate pay assists: a share of their CPU marks instead of doing their
  own work. Decode allocates (YCbCr planes, the resized RGBA), so the heap grows with the work done.
- `Batcher`: one TF Serving replica's server-side batching: a batch closes when it has max_batch_size
  requests or batch_timeout after its first one; batches run one at a time on the GPU (the batch threads
  feed one device), padded to the allowed batch sizes. A model version rollout loads the new version
  while the old one serves (loading competes for the host and PCIe: the old one's batches run slower),
  then switches: the first batch of each padded size on the new version pays its warm-up (kernel
  autotuning, lazily built graphs).
- `aws_call`: one AWS SDK v2 operation under the standard retryer (3 attempts; a throttling error
  (503 SlowDown, ProvisionedThroughputExceeded) or a 5xx is retried after a full-jitter wait of
  uniform(0, 2^attempt) seconds).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from reference_pipeline.simulate.trace_table import NS_PER_MS, NS_PER_S, Stalls, lognormal_ms, merge_intervals

PERIOD_NS = 100 * NS_PER_MS
_EPS = 1.0  # ns


@dataclass
class Job:
    start: float
    decode: float  # CPU ns at one P's full speed
    resize: float
    decoded: float = 0.0  # wall time decode ends (resize starts)
    end: float = 0.0


@dataclass
class GoPod:
    """One tagging-api pod. `procs`: GOMAXPROCS; `quota_ns`: CPU per period (None: no limit)."""

    procs: int
    quota_ns: float | None
    headroom_bytes: float  # heap growth that starts a GC cycle
    mark_ns: float  # CPU to mark the live heap
    alloc_per_ns: float  # bytes allocated per ns of decode/resize work
    assist: float  # share of an allocating goroutine's CPU that assists while a cycle marks
    fanout: float = 1.0  # goroutines a resize runs on
    spin: float = 0.0  # CPU the scheduler's spinning threads burn, per unit of work running
    stw_ns: tuple[float, float] = (0.08 * NS_PER_MS, 0.35 * NS_PER_MS)
    throttled: list[tuple[float, float]] = field(default_factory=list)
    cycles: list[tuple[float, float]] = field(default_factory=list)
    pauses: list[tuple[float, float]] = field(default_factory=list)

    def run(self, rng: random.Random, jobs: list[Job], horizon: float) -> Stalls:
        """Fill each job's `decoded` and `end`; return the pod's stalls (throttled periods, STWs).
        Decode runs on one goroutine; the resize splits the image's rows over GOMAXPROCS goroutines
        (the imaging library's parallel loop), so it can use every P."""
        order = sorted(range(len(jobs)), key=lambda k: jobs[k].start)
        active: dict[int, float] = {}  # job -> CPU left
        t, i, used, grown = 0.0, 0, 0.0, rng.uniform(0.0, self.headroom_bytes)
        period_end = PERIOD_NS
        mark_left = 0.0  # > 0 while a cycle marks
        dedicated = 0.25 * self.procs
        while i < len(order) or active or (mark_left > 0 and t < horizon):
            if not active and mark_left <= 0:
                t = max(t, jobs[order[i]].start)
            if t >= period_end:
                period_end = (t // PERIOD_NS + 1) * PERIOD_NS
                used = 0.0
            while i < len(order) and jobs[order[i]].start <= t + _EPS:
                k = order[i]
                active[k] = jobs[k].decode + jobs[k].resize
                i += 1
            marking = mark_left > 0
            cores = self.procs - (dedicated if marking else 0.0)
            keys = list(active)
            shares = _fill([1.0 if active[k] > jobs[k].resize + _EPS else self.fanout for k in keys], cores)
            running = sum(shares)
            own = 1.0 - self.assist if marking else 1.0
            rates = {k: r * own for k, r in zip(keys, shares, strict=True)}
            mark_rate = dedicated + (cores - running) + running * self.assist if marking else 0.0
            # beyond the quota's cores, idle Ps' threads spin looking for work at every wake-up (the
            # scheduler's spinning Ms, work stealing): CPU the quota counts and nobody's work gets
            burn = float(self.procs) if marking else running * (1.0 + self.spin * (running > 0))
            alloc = running * own * self.alloc_per_ns
            steps = [period_end - t]
            if i < len(order):
                steps.append(max(jobs[order[i]].start - t, 0.0))
            for k, rate in rates.items():
                if rate > 0:
                    steps.append(active[k] / rate)
                    if not jobs[k].decoded and active[k] - jobs[k].resize > _EPS:
                        steps.append((active[k] - jobs[k].resize) / rate)
            if self.quota_ns is not None and burn > 0:
                steps.append(max((self.quota_ns - used) / burn, 0.0))
            if marking:
                steps.append(mark_left / mark_rate)
            elif alloc > 0:
                steps.append(max((self.headroom_bytes - grown) / alloc, 0.0))
            # the heap also grows while a cycle marks: what it allocates then counts toward the next trigger
            dt = max(min(steps), 0.0)
            for k, rate in rates.items():
                before = active[k]
                active[k] = before - rate * dt
                if not jobs[k].decoded and active[k] <= jobs[k].resize + _EPS:
                    jobs[k].decoded = t + (before - jobs[k].resize) / rate if rate > 0 else t
                if active[k] <= _EPS:
                    jobs[k].end = t + dt
                    del active[k]
            used += burn * dt
            grown += alloc * dt
            mark_left -= mark_rate * dt
            t += dt
            if marking and mark_left <= _EPS:  # mark termination: a stop-the-world
                mark_left = 0.0
                t = self._pause(rng, t, 1)
                self.cycles[-1] = (self.cycles[-1][0], t)
                marking = False
            if not marking and grown >= self.headroom_bytes - 1.0:  # a cycle starts: a stop-the-world
                grown = max(grown - self.headroom_bytes, 0.0)
                start = t
                t = self._pause(rng, t, 0)
                self.cycles.append((start, t))
                mark_left = self.mark_ns * rng.lognormvariate(0.0, 0.15)
            if self.quota_ns is not None and used >= self.quota_ns - 1000.0:
                if period_end - t > 1000.0:
                    self.throttled.append((t, period_end))  # every thread waits for the next period
                t = max(t, period_end)
        return Stalls(merge_intervals(self.throttled + self.pauses))

    def _pause(self, rng: random.Random, t: float, phase: int) -> float:
        length = self.stw_ns[phase] * rng.lognormvariate(0.0, 0.4)
        self.pauses.append((t, t + length))
        return t + length


def _fill(caps: list[float], cores: float) -> list[float]:
    """Cores shared out among runnable jobs, each taking at most its cap (water-filling)."""
    out = [0.0] * len(caps)
    left = cores
    for n, k in enumerate(sorted(range(len(caps)), key=lambda j: caps[j])):
        out[k] = min(caps[k], left / (len(caps) - n))
        left -= out[k]
    return out


# --- TF Serving ------------------------------------------------------------------------------------

ALLOWED_BATCH_SIZES = (1, 2, 4, 8, 16, 32)


def padded(size: int) -> int:
    return next(b for b in ALLOWED_BATCH_SIZES if b >= size)


@dataclass
class Batcher:
    """One TF Serving replica. `submit` takes requests in arrival order and returns each one's
    (batch start, batch end, batch size, model version)."""

    timeout_ns: float
    max_batch: int = 32
    rollout: tuple[float, float] | None = None  # (load starts, switch to the new version)
    gpu_free: float = 0.0
    warmed: set[int] = field(default_factory=set)

    def run(self, rng: random.Random, arrivals: list[float]) -> list[tuple[float, float, int, int]]:
        out: list[tuple[float, float, int, int]] = [(0.0, 0.0, 0, 0)] * len(arrivals)
        order = sorted(range(len(arrivals)), key=lambda k: arrivals[k])
        i = 0
        while i < len(order):
            first = arrivals[order[i]]
            close = first + self.timeout_ns
            j = i + 1
            while j < len(order) and j - i < self.max_batch and arrivals[order[j]] <= close:
                j += 1
            if j - i == self.max_batch:
                close = arrivals[order[j - 1]]
            start = max(close, self.gpu_free)
            while j < len(order) and j - i < self.max_batch and arrivals[order[j]] <= start:
                j += 1  # the GPU was busy: the open batch kept filling
            size = j - i
            exec_ns = (5.5 + 0.32 * padded(size)) * NS_PER_MS * rng.lognormvariate(0.0, 0.08)
            version = 1
            if self.rollout is not None:
                load, switch = self.rollout
                if load <= start < switch:
                    exec_ns *= 1.35  # the new version loads beside the serving one
                elif start >= switch:
                    version = 2
                    if padded(size) not in self.warmed:
                        self.warmed.add(padded(size))
                        exec_ns += lognormal_ms(rng, 420.0, 0.35)
            if rng.random() < 0.004:  # the odd slow batch: a host-side hiccup feeding the GPU
                exec_ns += lognormal_ms(rng, 25.0, 0.5)
            end = start + exec_ns
            self.gpu_free = end
            for k in order[i:j]:
                out[k] = (start, end, size, version)
            i = j
        return out


# --- the AWS SDK's standard retryer ----------------------------------------------------------------

@dataclass(frozen=True)
class Attempt:
    start: float
    end: float
    status: int  # HTTP status of the attempt


def aws_call(rng: random.Random, start: float, service_ms: float, fail: float, fail_ms: float,
             stalls: Stalls, codes: tuple[int, int]) -> list[Attempt]:
    """The attempts of one operation: each fails with probability `fail` (returning after
    `fail_ms`), otherwise succeeds after `service_ms`; up to 3 attempts, full-jitter back-off between.
    `codes`: the HTTP status of a success and of a failure.
    Each attempt's start and end are read by a goroutine: they wait out the pod's stalls."""
    out: list[Attempt] = []
    t = start
    for attempt in range(1, 4):
        failed = rng.random() < fail
        took = (fail_ms if failed else service_ms) * NS_PER_MS * rng.lognormvariate(0.0, 0.25)
        end = stalls.settle(t + took)
        out.append(Attempt(t, end, codes[1] if failed else codes[0]))
        if not failed:
            break
        if attempt < 3:
            t = stalls.settle(end + rng.random() * 2 ** attempt * NS_PER_S)
    return out
