"""Replay arrivals through a queue in front of c servers that take batches: a model of a run's
queueing, driven by the run's own arrival times and service times.

Each server, when free, takes the oldest waiting request and the ones behind it, up to `max_batch`,
waiting for more no longer than `window` after the oldest arrived (a dynamic batcher; with
max_batch 1 and window 0 it is a plain FIFO queue, M/M/c when arrivals are Poisson and service
times exponential). A batch of k requests costs `cost(k)` × the leader's own residual (its measured
batch's duration over the cost of that batch's size): the run's noise is kept, per request.
"""

from __future__ import annotations

import heapq
import math
from bisect import bisect_right
from dataclasses import dataclass

import numpy as np


@dataclass
class BatchCost:
    """Service time of a batch of k (ns): base + per_item × k, the line fitted over the sizes'
    medians, or the median the run measured for batches of that size where it is higher (between
    sizes measured: interpolated; beyond the largest: continued along the line's slope). A CPU's
    batch cost grows faster than its size (padding to the longest sequence, caches); with the line
    alone, a large batch's requests look slow in themselves (their residual) and a replay that serves
    them in smaller batches keeps that slowness. Below the line a size's median is kept out: few
    batches, or times a lever edited without regard to the batch (a draw, a cut pause)."""

    base: float
    per_item: float
    sizes: tuple[int, ...] = ()  # the sizes measured, ascending
    medians: tuple[float, ...] = ()  # their median duration (ns)

    def __call__(self, k: np.ndarray | int) -> np.ndarray | float:
        k = np.asarray(k, dtype=np.float64)
        line = self.base + self.per_item * k
        if self.sizes:  # where the sizes measured cost more than the line: as measured
            sizes = np.asarray(self.sizes, dtype=np.float64)
            med = np.asarray(self.medians)
            inside = np.interp(k, sizes, med)
            above = med[-1] + self.per_item * (k - sizes[-1])
            line = np.maximum(line, np.where(k < sizes[0], 0.0, np.where(k > sizes[-1], above, inside)))
        return np.maximum(line, 1.0)

    def table(self, max_batch: int) -> list[float]:
        """The cost of each batch size 0..max_batch (a list, for the replay's loop)."""
        return [float(v) for v in self(np.arange(max_batch + 1))]

    @classmethod
    def fit(cls, size: np.ndarray, duration: np.ndarray) -> BatchCost:
        """Each measured size's median duration, and the least-squares line through them weighted by
        how many batches had that size (a size seen once does not tilt the line); one size: a
        constant."""
        size = np.asarray(size, dtype=np.int64)
        duration = np.asarray(duration, dtype=np.float64)
        if len(size) == 0:
            return cls(1.0, 0.0)
        sizes = np.unique(size)
        med = np.array([np.median(duration[size == k]) for k in sizes])
        weight = np.array([(size == k).sum() for k in sizes], dtype=np.float64)
        table = (tuple(int(k) for k in sizes), tuple(float(m) for m in med))
        if len(sizes) == 1:
            return cls(float(med[0]), 0.0, *table)
        w = weight / weight.sum()
        mx, my = (w * sizes).sum(), (w * med).sum()
        var = (w * (sizes - mx) ** 2).sum()
        slope = max(float((w * (sizes - mx) * (med - my)).sum() / var), 0.0) if var > 0 else 0.0
        return cls(float(my - slope * mx), slope, *table)


@dataclass
class Replayed:
    start: np.ndarray  # service start per request (ns, the arrivals' clock)
    end: np.ndarray
    batch_size: np.ndarray


def replay(
    arrival: np.ndarray,
    residual: np.ndarray,
    cost: BatchCost,
    servers: int,
    max_batch: int = 1,
    window: float = 0.0,
    scale: float = 1.0,
) -> Replayed:
    """Serve `arrival` (ns, any order) FIFO with `servers` batch servers (see the module docstring).
    `residual` per request: its service noise (1.0 = exactly `cost`); `scale` multiplies every
    service time (a faster model)."""
    m = len(arrival)
    order = np.argsort(arrival, kind="stable")
    queued = arrival[order].astype(np.float64).tolist()
    res = (residual[order] * scale).tolist()
    start, end = np.empty(m), np.empty(m)
    size = np.empty(m, np.int64)
    costs = cost.table(max(int(max_batch), 1))
    if servers <= 1:  # one server: its next free time is a number, no heap
        _one_server(queued, res, order, start, end, size, costs, max_batch, window)
        return Replayed(start, end, size)
    free = [-math.inf] * int(servers)
    heapq.heapify(free)
    i = 0
    while i < m:
        ready = heapq.heappop(free)
        last = i + max_batch - 1
        full_at = queued[last] if last < m else math.inf
        dispatch = max(ready, min(full_at, queued[i] + window))
        j = max(bisect_right(queued, dispatch, i, min(i + max_batch, m)), i + 1)
        took = costs[j - i] * res[i]
        members = order[i:j]
        start[members], end[members] = dispatch, dispatch + took
        size[members] = j - i
        heapq.heappush(free, dispatch + took)
        i = j
    return Replayed(start, end, size)


def _one_server(queued, res, order, start, end, size, costs, max_batch, window) -> None:
    """`replay` with one server, writing into start/end/size (batch bounds collected, written once)."""
    m = len(queued)
    bounds, begins, dones = [], [], []
    free, i = -math.inf, 0
    while i < m:
        last = i + max_batch - 1
        full_at = queued[last] if last < m else math.inf
        close = min(full_at, queued[i] + window)
        dispatch = free if free > close else close
        j = max(bisect_right(queued, dispatch, i, min(i + max_batch, m)), i + 1)
        free = dispatch + costs[j - i] * res[i]
        bounds.append(j)
        begins.append(dispatch)
        dones.append(free)
        i = j
    counts = np.diff(np.r_[0, bounds])
    start[order] = np.repeat(begins, counts)
    end[order] = np.repeat(dones, counts)
    size[order] = np.repeat(counts, counts)


def fifo_starts(arrive: np.ndarray, service: np.ndarray, servers: int) -> np.ndarray:
    """First come first served through `servers` servers (a pool's connections, a worker's slots), each
    busy for its job's `service`: when each job (in `arrive`'s order) gets one."""
    order = np.argsort(arrive, kind="stable")
    free = [0.0] * servers
    out = np.empty(len(arrive))
    for k in order.tolist():
        got = max(float(arrive[k]), heapq.heappop(free))
        out[k] = got
        heapq.heappush(free, got + float(service[k]))
    return out


def erlang_c_wait(arrival_rate: float, service_rate: float, servers: int) -> float:
    """Mean wait in queue of an M/M/c queue (Erlang C): P(wait) / (c·mu − lambda)."""
    a = arrival_rate / service_rate
    c = servers
    if a >= c:
        return math.inf
    terms = sum(a**k / math.factorial(k) for k in range(c))
    top = a**c / math.factorial(c) * c / (c - a)
    p_wait = top / (terms + top)
    return p_wait / (c * service_rate - arrival_rate)
