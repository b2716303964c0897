"""The compute side of the blind family `pgvector-search` (pgvector_search.py): the Go runtime of one
ask-api pod, and TorchServe's batching on one embedder pod.

- `GoRuntime`: Go's concurrent collector on a pod with GOMAXPROCS 2 (from the CPU limit), GOGC=100 and
  a GOMEMLIMIT. A cycle has a mark phase between two short stop-the-world pauses (sweep termination,
  mark termination). During mark, a dedicated worker takes a quarter of the Ps (goroutines run ~1.3x
  slower) and a goroutine that allocates pays mark assists in proportion to what it allocates. Far
  from the limit a cycle comes every few seconds and marks for ~15 ms. With the live heap near
  GOMEMLIMIT the heap goal is clamped to the limit: cycles run back to back (mark ~0.35 s, a few tens
  of ms apart), the GC CPU limiter gives the collector up to half the CPU (goroutines run ~3x slower,
  waiting for a P) and the assists of an allocating goroutine are heavy (tens of ms for a request that
  parses twenty 384-float vectors). `run(t, work, kb)` is when work started at t is done.
- `TorchServe`: one embedder pod: the frontend's queue and `workers` Python backend workers, each
  taking a batch of up to 8 requests: a free worker takes the oldest waiting request and waits up to
  max_batch_delay (5 ms) for the batch to fill (it starts at once when 8 are waiting). A batch costs
  ~2 ms plus each item's cost (a question: ~0.7 ms; a 256-token passage: ~5.5 ms) on CPU.
"""

from __future__ import annotations

import bisect
import heapq
import random
from dataclasses import dataclass

from reference_pipeline.simulate.trace_table import NS_PER_MS, NS_PER_S, Stalls, lognormal_ms


@dataclass(frozen=True)
class Cycle:
    number: int
    start: float  # the sweep-termination pause begins
    mark_end: float  # the mark-termination pause begins
    end: float  # ... and ends
    stw_ns: float  # both pauses
    slow: float  # how much slower goroutines run during mark
    assist_ms_per_kb: float
    heap_goal_mb: int


class GoRuntime:
    def __init__(self, rng: random.Random, horizon: float, near_limit: bool, first: int) -> None:
        cycles: list[Cycle] = []
        t = rng.uniform(0.0, 0.4 if near_limit else 5.0) * NS_PER_S
        n = first
        while t < horizon:
            if near_limit:
                mark, gap = lognormal_ms(rng, 350.0, 0.3), lognormal_ms(rng, 40.0, 0.5)
                stw = (lognormal_ms(rng, 0.5, 0.5), lognormal_ms(rng, 0.7, 0.5))
                slow = 3.0 * rng.lognormvariate(0.0, 0.15)
                assist, goal = 0.04 * rng.lognormvariate(0.0, 0.4), 921
            else:
                mark, gap = lognormal_ms(rng, 15.0, 0.3), 5.0 * NS_PER_S * rng.lognormvariate(0.0, 0.3)
                stw = (lognormal_ms(rng, 0.08, 0.4), lognormal_ms(rng, 0.15, 0.4))
                slow, assist, goal = 1.3, 0.0015, 2 * (180 + rng.randrange(40))
            mark_end = t + stw[0] + mark
            cycles.append(Cycle(n, t, mark_end, mark_end + stw[1], stw[0] + stw[1], slow, assist, goal))
            n += 1
            t = mark_end + stw[1] + gap
        self.cycles = cycles
        self.starts = [c.start for c in cycles]
        self.stw = Stalls([(c.start, c.start + c.stw_ns - (c.end - c.mark_end)) for c in cycles]
                          + [(c.mark_end, c.end) for c in cycles])

    def run(self, rng: random.Random, t: float, work_ms: float, alloc_kb: float) -> float:
        """When `work_ms` of a goroutine's CPU work allocating `alloc_kb`, started at t, is done."""
        t = self.stw.settle(t)
        work = work_ms * NS_PER_MS * rng.lognormvariate(0.0, 0.2)
        k = bisect.bisect_right(self.starts, t) - 1
        if k >= 0 and t < self.cycles[k].end:
            c = self.cycles[k]
        elif k + 1 < len(self.cycles) and self.cycles[k + 1].start < t + work:
            c = self.cycles[k + 1]
        else:
            return t + work
        overlap = max(0.0, min(t + work * c.slow, c.mark_end) - max(t, c.start)) / (work * c.slow)
        work *= 1.0 + (c.slow - 1.0) * overlap
        work += alloc_kb * c.assist_ms_per_kb * overlap * NS_PER_MS * rng.lognormvariate(0.0, 0.6)
        return self.stw.run(t, work)

    def ended_within(self, a: float, b: float) -> list[Cycle]:
        """The cycles whose mark-termination pause ended in [a, b): what the request's middleware reads
        from debug.ReadGCStats at its end."""
        k = bisect.bisect_left(self.starts, a - 2 * NS_PER_S)
        return [c for c in self.cycles[k:] if a <= c.end < b and c.start < b]


@dataclass(frozen=True)
class Batch:
    start: float
    end: float
    size: int


class TorchServe:
    def __init__(self, workers: int, max_batch: int = 8, delay_ms: float = 5.0) -> None:
        self.workers, self.max_batch, self.delay = workers, max_batch, delay_ms * NS_PER_MS

    def serve(self, rng: random.Random, items: list[tuple[float, float]]) -> list[Batch]:
        """Each item's (arrival ns, cost ns), sorted by arrival -> the batch that ran it."""
        free = [0.0] * self.workers
        out: list[Batch] = []
        i, n = 0, len(items)
        while i < n:
            f = heapq.heappop(free)
            first = max(f, items[i][0])
            last = min(i + self.max_batch, n) - 1
            if last - i == self.max_batch - 1 and items[last][0] <= first + self.delay:
                start = max(first, items[last][0])
            else:
                start = first + self.delay
                while items[last][0] > start:
                    last -= 1
            cost = (2.0 * NS_PER_MS + sum(c for _, c in items[i:last + 1])) * rng.lognormvariate(0.0, 0.08)
            batch = Batch(start, start + cost, last + 1 - i)
            out.extend([batch] * batch.size)
            heapq.heappush(free, batch.end + lognormal_ms(rng, 0.1, 0.3))
            i = last + 1
        return out
