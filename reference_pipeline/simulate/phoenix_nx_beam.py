"""The BEAM-side physics of the blind family `phoenix-nx` (see phoenix_nx.py for the shape and truth).

Every shared thing a request meets is modelled as what it is on the BEAM or beside it, and each is run
over all requests in the order they reach it (the request path is a pipeline, so a stage's arrivals are
known once the stages before it ran): a GenServer is one process with one mailbox, served first come
first served, its own heap and its own GC (`Stalls` of that process only); the Ecto repo is a
DBConnection pool with queue_target / queue_interval dropping; Cachex is a per-node table of expiry
times; Nx.Serving fills row-padded batches and runs them one at a time per partition; the pricing call
is Req over Finch with a receive_timeout and a retry step.
"""

from __future__ import annotations

import heapq
import math
import random
from bisect import bisect_left
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import accumulate

from reference_pipeline.simulate.trace_table import NS_PER_MS, Stalls, lognormal_ms

QUEUE_TARGET_MS, QUEUE_INTERVAL_MS = 50.0, 1000.0


@dataclass
class Request:
    """One `GET /api/recs/:user_id`: the times (ns) each stage produced, filled stage by stage."""

    t0: float
    pod: int
    user: int
    items: int
    root_s: float = 0.0
    rl: tuple[float, float] = (0.0, 0.0)
    flags: tuple[float, float] = (0.0, 0.0)
    ecto: tuple[float, float] = (0.0, 0.0)
    ecto_queue: float = 0.0
    ecto_query: float = 0.0
    ecto_decode: float = 0.0
    ecto_idle: float = 0.0
    dropped: bool = False
    feat: tuple[float, float] = (0.0, 0.0)
    miss: tuple[float, float, float, float] | None = None  # client start, server start, server end, end
    nx: tuple[float, float] = (0.0, 0.0)
    chunks: list[tuple[float, float, int, int]] = field(default_factory=list)  # exec s, e, batch rows, part
    pricing: list[tuple[float, float, float, float, bool]] = field(default_factory=list)
    json: tuple[float, float] = (0.0, 0.0)
    root_e: float = 0.0


def zipf_sampler(users: int, s: float) -> Callable[[random.Random], int]:
    """User ids by popularity rank (weight 1 / rank^s): a few heavy users return often."""
    cumulative = list(accumulate(1.0 / (r + 1) ** s for r in range(users)))
    total = cumulative[-1]
    return lambda rng: bisect_left(cumulative, rng.random() * total)


def arrivals(rng: random.Random, rps: float, n: int, horizon_s: float,
             bursts: tuple[tuple[float, float, float], ...]) -> list[float]:
    """Open-loop Poisson arrivals (ns) whose rate swings +-20 % over the run (a slow daily-traffic
    slope) and is `multiple` times higher inside each burst (start s, length s, multiple)."""
    peak = rps * 1.2 * max([m for _, _, m in bursts] + [1.0])
    out: list[float] = []
    t = 0.0
    while len(out) < n:
        t += rng.expovariate(peak)
        rate = rps * (1.0 + 0.2 * math.sin(2 * math.pi * t / horizon_s - 0.5 * math.pi))
        for start, length, multiple in bursts:
            if start <= t < start + length:
                rate *= multiple
        if rng.random() * peak < rate:
            out.append(t * 1e9)
    return out


def genserver(calls: list[tuple[float, int]], service: Callable[[int], float],
              stalls: Stalls | None = None) -> dict[int, tuple[float, float]]:
    """One process serving its mailbox in arrival order: call (arrival ns, key) -> (service start,
    reply ns). While the process is paused (its own GC: `stalls`) it serves nothing."""
    out: dict[int, tuple[float, float]] = {}
    free = 0.0
    for arrive, key in sorted(calls):
        start = max(arrive, free)
        if stalls is not None:
            start = stalls.settle(start)
            free = stalls.run(start, service(key))
        else:
            free = start + service(key)
        out[key] = (start, free)
    return out


class EctoPool:
    """A DBConnection pool of `size` connections on one node, taken first come first served by the
    node's queries and by background holders (Oban job slots running transactions). Each finished
    `queue_interval` whose shortest wait exceeded `queue_target` makes the next interval drop any
    checkout that would wait more than twice the target (DBConnection.ConnectionError)."""

    def __init__(self, size: int) -> None:
        self.free = [0.0] * size
        self.last_checkin = [0.0] * size
        heapq.heapify(self.free)
        self.min_wait: dict[int, float] = {}

    def _dropping(self, t: float) -> bool:
        interval = int(t // (QUEUE_INTERVAL_MS * NS_PER_MS))
        return self.min_wait.get(interval - 1, 0.0) > QUEUE_TARGET_MS * NS_PER_MS

    def checkout(self, t: float, hold: float) -> tuple[float, bool]:
        """(connection time, dropped) for a checkout asked at t that keeps the connection `hold` ns."""
        got = max(t, self.free[0])
        limit = 2 * QUEUE_TARGET_MS * NS_PER_MS
        if got - t > limit and self._dropping(t):
            return t + limit, True
        heapq.heappop(self.free)
        heapq.heappush(self.free, got + hold)
        interval = int(got // (QUEUE_INTERVAL_MS * NS_PER_MS))
        self.min_wait[interval] = min(self.min_wait.get(interval, float("inf")), got - t)
        return got, False


def run_pool(pool: EctoPool, queries: list[tuple[float, int, float]],
             holders: list[tuple[float, float, float, float]], rng: random.Random,
             horizon: float) -> dict[int, tuple[float, bool]]:
    """Queries (ask ns, key, hold ns) and holder slots (first ask ns, hold median ms, sigma, gap mean
    ms: each slot loops job after job) through one pool in time order -> key: (connection, dropped)."""
    events: list[tuple[float, int, float, int]] = [(t, 0, hold, key) for t, key, hold in queries]
    for slot, (first, _median, _sigma, _gap) in enumerate(holders):
        events.append((first, 1, 0.0, slot))
    heapq.heapify(events)
    out: dict[int, tuple[float, bool]] = {}
    while events:
        t, holder, hold, key = heapq.heappop(events)
        if not holder:
            out[key] = pool.checkout(t, hold)
            continue
        _first, median, sigma, gap = holders[key]
        hold = lognormal_ms(rng, median, sigma)
        got, dropped = pool.checkout(t, hold)
        nxt = (got + hold if not dropped else got + 1000 * NS_PER_MS) + rng.expovariate(1 / gap) * NS_PER_MS
        if nxt < horizon:
            heapq.heappush(events, (nxt, 1, 0.0, key))
    return out


@dataclass
class ServingConfig:
    """One node's Nx.Serving: rows per padded batch, batch_timeout, partitions (one per GPU, else 1),
    the time of one padded batch, and (cold node) a JIT compile on the first batch."""

    batch_size: int
    timeout_ms: float
    partitions: int
    exec_ms: float
    compile_ms: float = 0.0


def run_serving(cfg: ServingConfig, arrivals_: list[tuple[float, int, int]], rng: random.Random
                ) -> dict[int, list[tuple[float, float, int, int]]]:
    """Requests (arrival ns, key, rows) through one node's serving: a request's rows fill the open
    batch; a batch runs when it holds `batch_size` rows or `timeout` after it opened (later if every
    partition is busy: it fills meanwhile), one batch at a time per partition (padded: its time does
    not depend on its fill). A request larger than the room left spills into the next batch.
    -> key: [(exec start, exec end, rows the batch held, partition)]."""
    free = [(0.0, p) for p in range(cfg.partitions)]
    heapq.heapify(free)
    out: dict[int, list[tuple[float, float, int, int]]] = {}
    pending = sorted(arrivals_)
    i, carry, batches, compiled = 0, [], 0, set()
    carry_t = 0.0
    while i < len(pending) or carry:
        members: list[tuple[int, int]] = []
        room = cfg.batch_size
        opened = carry_t if carry else pending[i][0]
        start_free, part = heapq.heappop(free)
        # the open batch takes arrivals until it is full, or until its timeout if a partition is free
        # by then; while every partition is busy it keeps filling
        sealed = max(opened + cfg.timeout_ms * NS_PER_MS, start_free)
        while carry and room:
            key, rows = carry.pop(0)
            take = min(rows, room)
            members.append((key, take))
            room -= take
            if rows > take:
                carry.insert(0, (key, rows - take))
        if not room:
            sealed = opened
        while room and i < len(pending) and pending[i][0] <= sealed:
            t, key, rows = pending[i]
            i += 1
            take = min(rows, room)
            members.append((key, take))
            room -= take
            if rows > take:
                carry.append((key, rows - take))
            if not room:
                sealed = t
        start = max(sealed, start_free)
        work = cfg.exec_ms * rng.lognormvariate(0.0, 0.06)
        if cfg.compile_ms and part not in compiled:  # each partition compiles for its own device
            compiled.add(part)
            work += cfg.compile_ms * rng.uniform(0.85, 1.15)
        elif cfg.compile_ms and batches < 30:
            work *= 1.0 + 0.8 * (1.0 - batches / 30)  # fresh code and allocator: the first runs slower
        end = start + work * NS_PER_MS
        heapq.heappush(free, (end, part))
        batches += 1
        for key, _rows in members:
            out.setdefault(key, []).append((start, end, cfg.batch_size - room, part))
        carry_t = sealed
    return out


def price_attempts(rng: random.Random, t: float, items: int, timeout_ms: float, retries: int,
                   slow: bool) -> list[tuple[float, float, float, float, bool]]:
    """Req's GET /v2/prices over Finch: each attempt (client start, server start, server end, client
    end, timed out). An attempt whose reply is not in by `receive_timeout` ends then in error and the
    retry step waits 50 ms * 2^n before the next; the pricing server finishes the abandoned call."""
    out = []
    for n in range(retries + 1):
        srv_s = t + lognormal_ms(rng, 0.45, 0.3)
        own = lognormal_ms(rng, 38.0 if slow else 8.0, 0.35) + 0.012 * items * NS_PER_MS
        tail = 0.12 if slow else 0.006
        if rng.random() < tail:
            own += (90.0 if slow else 25.0) * NS_PER_MS * rng.paretovariate(1.3 if slow else 1.7)
        srv_e = srv_s + own
        reply = srv_e + lognormal_ms(rng, 0.45, 0.3)
        deadline = t + timeout_ms * NS_PER_MS
        failed = reply > deadline
        end = deadline + lognormal_ms(rng, 0.15, 0.3) if failed else reply
        out.append((t, srv_s, srv_e, end, failed))
        if not failed:
            break
        t = end + 50.0 * 2**n * NS_PER_MS
    return out
