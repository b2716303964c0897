"""The physics of the blind family `django-celery` (django_celery.py): the network between two zones
(round trips, TCP retransmission timeouts on a lossy link), gunicorn sync workers (one request per
process, a shared backlog per pod, CPython's generation-2 collections over a heap that a leak grows,
`--max-requests` recycling), PgBouncer in transaction pooling (a fixed server pool), PostgreSQL row
locks, the Redis feature cache (TTL expiry), the Celery prefork pool behind RabbitMQ (per-process
prefetch: head-of-line blocking; a cold process loads the model) and the bureau's HTTPS API (a
keep-alive connection per worker, TCP + TLS when it has to connect). Times are ns from the run's start.
"""

from __future__ import annotations

import bisect
import heapq
import itertools
import random
from dataclasses import dataclass, field

from reference_pipeline.simulate.trace_table import NS_PER_MS, lognormal_ms

RTO_MS = 200.0  # Linux's minimum retransmission timeout: a lost segment on a sub-ms path costs >= 200 ms
GC_MS_PER_MOBJ = 65.0  # a full collection traverses ~15 M container objects/s
CUSTOMERS = 200_000
WARM_RANKS = 190_000  # the nightly job caches the features of the customers seen in the last 90 days


@dataclass
class Net:
    """Round trips from a pod's zone to the stateful tier (PostgreSQL, PgBouncer, Redis, RabbitMQ: all in
    zone a). `loss` is the per-round-trip chance that a segment crossing zones is lost."""

    same_ms: float = 0.22
    cross_ms: float = 0.85
    loss: float = 0.0

    def rtt(self, rng: random.Random, zone: int) -> float:
        """One round trip in ns; across zones a lost segment waits for the RTO (doubling)."""
        base = (self.same_ms if zone == 0 else self.cross_ms) * rng.lognormvariate(0.0, 0.25)
        extra = 0.0
        if zone == 1 and self.loss and rng.random() < self.loss:
            extra = RTO_MS * (3.0 if rng.random() < self.loss * 4 else 1.0)  # a second loss: 200 + 400
        return (base + extra) * NS_PER_MS


def zipf_weights(n: int, s: float) -> list[float]:
    return list(itertools.accumulate(1.0 / (k + 1) ** s for k in range(n)))


def history_of(customer: int) -> int:
    """A customer's transaction count (the same every run): heavier for long-standing customers."""
    r = random.Random(customer * 2_654_435_761 % 2**32)
    return int(min(20_000, max(5, 280 * r.lognormvariate(0.0, 0.9))))


# --- gunicorn ---------------------------------------------------------------------------------------

@dataclass
class Worker:
    """One gunicorn sync worker process: requests served since its fork, its heap (million objects)
    and the objects allocated since the last full collection, its bureau connection's last use."""

    pid: int
    served: int
    heap: float
    pending: float
    born: float = 0.0
    fresh: bool = False
    bureau_used: float = -1.0  # -1: no connection yet

    def allocate(self, rng: random.Random, leak: float) -> float:
        """Objects one request leaves behind; returns the gen-2 pause (ns) it sets off, or 0. CPython
        runs a full collection when the objects promoted since the last one exceed 25 % of the
        long-lived ones: a growing heap is collected less often, each time for longer."""
        survivors = 0.0008 * rng.lognormvariate(0.0, 0.5) + leak
        self.heap += leak
        self.pending += survivors
        if self.pending <= 0.25 * self.heap:
            return 0.0
        self.pending = 0.0
        return GC_MS_PER_MOBJ * self.heap * rng.lognormvariate(0.0, 0.12) * NS_PER_MS


@dataclass
class Pod:
    """A gunicorn pod: workers sharing one listen backlog (the first worker free takes the next)."""

    index: int
    zone: int
    workers: list[Worker]
    free: list[tuple[float, int]]
    next_pid: int


# --- PostgreSQL through PgBouncer ---------------------------------------------------------------------

class ServerPool:
    """PgBouncer's server connections for one database/user pair (transaction pooling): a client
    transaction gets one at its first statement and gives it back at COMMIT (autocommit: per statement).
    `batch` = (from, to, left): a job's back-to-back transactions hold all but `left` connections
    meanwhile (a client slips in between two of its transactions too seldom to count)."""

    def __init__(self, size: int, batch: tuple[float, float, int] | None = None) -> None:
        self.free = [0.0] * size
        self.batch = batch
        self.narrow = [0.0] * (batch[2] if batch else 0)

    def take(self, t: float) -> tuple[float, list[float]]:
        """(when the transaction gets a server connection, the connections it came from)."""
        if self.batch and self.batch[0] <= t < self.batch[1]:
            got = max(t, self.narrow[0])
            if got < self.batch[1]:
                heapq.heappop(self.narrow)
                return got, self.narrow
        return max(t, heapq.heappop(self.free)), self.free

    @staticmethod
    def give(heap: list[float], t: float) -> None:
        heapq.heappush(heap, t)


def statement_ms(rng: random.Random, exec_ms: float) -> float:
    """A statement's execution: jitter, and 0.8 % that hit a cold page or an autovacuum's I/O."""
    t = exec_ms * rng.lognormvariate(0.0, 0.3)
    if rng.random() < 0.008:
        t += min(60.0, 4.0 * rng.paretovariate(1.5))
    return t * NS_PER_MS


@dataclass
class Cache:
    """The features cache (django-redis): key -> expiry (ns). Warm customers were written by the
    nightly job with spread expiries; `wave` expires a share of them together."""

    ttl_ns: float
    expiry: dict[int, float] = field(default_factory=dict)
    wave: tuple[float, float, float] | None = None  # (start, spread, share of the warm keys)

    def hit(self, customer: int, t: float) -> bool:
        exp = self.expiry.get(customer)
        if exp is None:
            if customer >= WARM_RANKS:
                return False
            r = random.Random(customer * 40_503 + 7)
            exp = r.uniform(0.02, 1.0) * self.ttl_ns
            if self.wave is not None and r.random() < self.wave[2]:
                exp = self.wave[0] + r.random() * self.wave[1]
            self.expiry[customer] = exp
        return t < exp

    def store(self, customer: int, t: float) -> None:
        self.expiry[customer] = t + self.ttl_ns


# --- Celery ---------------------------------------------------------------------------------------------

@dataclass
class Proc:
    """One prefork child: the pool writes reserved tasks to its pipe ahead (up to `prefetch`
    waiting), so a task waits behind whatever the child is running; it loads the model on its first
    task."""

    pod: int
    pid: int
    born: float
    retire: float
    loaded: bool
    gen: int = 0  # 0: the pods from before the run's deploy, 1: their replacements
    starts: list[float] = field(default_factory=list)
    ends: list[float] = field(default_factory=list)

    def waiting(self, t: float) -> int:
        return len(self.starts) - bisect.bisect_right(self.starts, t)

    def place(self, t: float, length: float) -> float:
        """When a task delivered at t and running `length` ns starts: the first idle gap from t
        (requests are modelled one at a time, so deliveries are not made in time order)."""
        k = bisect.bisect_right(self.ends, t)
        start = t
        while k < len(self.starts) and self.starts[k] < start + length:
            start = max(start, self.ends[k])
            k += 1
        self.starts.insert(k, start)
        self.ends.insert(k, start + length)
        return start


@dataclass
class Run:
    proc: Proc
    delivered: float
    start: float
    load_end: float  # == start unless the model was loaded first
    end: float


class Celery:
    """RabbitMQ delivering to the children round-robin while they have prefetch room; a message waits
    in the queue when none has."""

    def __init__(self, procs: list[Proc], prefetch: int) -> None:
        self.procs = procs
        self.prefetch = prefetch
        self.turn = 0

    def execute(self, rng: random.Random, t: float, work_ns: float) -> Run:
        n = len(self.procs)
        chosen, at = None, t
        for k in range(n):
            p = self.procs[(self.turn + k) % n]
            if p.born <= t < p.retire and p.waiting(t) < self.prefetch:
                chosen, self.turn = p, (self.turn + k + 1) % n
                break
        if chosen is None:  # every child's prefetch is full: the message waits in the queue
            options = [(p.starts[-self.prefetch], i) for i, p in enumerate(self.procs)
                       if p.born <= t < p.retire and len(p.starts) >= self.prefetch]
            options += [(p.born, i) for i, p in enumerate(self.procs) if t < p.born < p.retire]
            at, i = min(options)
            chosen = self.procs[i]
        delivered = at + lognormal_ms(rng, 0.4, 0.3)
        load = 0.0
        if not chosen.loaded:  # import xgboost, unpickle the booster, a warm-up predict
            load = lognormal_ms(rng, 2600.0, 0.2)
            chosen.loaded = True
        pickup = lognormal_ms(rng, 0.15, 0.3)
        start = chosen.place(delivered, pickup + load + work_ns + 0.5 * NS_PER_MS) + pickup
        return Run(chosen, delivered, start, start + load, start + load + work_ns)


def task_work_ms(rng: random.Random, payload_kb: float) -> tuple[float, float]:
    """(feature frame build, XGBoost predict) of one score task: decoding the message and building
    the frame grows with the payload; 400 trees of depth 6 cost the same for any customer."""
    build = (0.6 + 0.12 * payload_kb) * rng.lognormvariate(0.0, 0.15)
    predict = 3.2 * rng.lognormvariate(0.0, 0.2)
    if rng.random() < 0.005:  # a minor page-fault burst / a noisy neighbour
        predict += 10.0 * rng.lognormvariate(0.0, 0.5)
    return build * NS_PER_MS, predict * NS_PER_MS


# --- the bureau ---------------------------------------------------------------------------------------

BUREAU_RTT_MS = 7.0
IDLE_CLOSE_S = 4.0  # the bureau's gateway closes idle keep-alive connections


def handshake_ns(rng: random.Random) -> float:
    """A new HTTPS connection: a resolver lookup, TCP (1 RTT), TLS 1.2 (2 RTT + the server's ECDHE
    signature and our verification)."""
    rtts = sum(BUREAU_RTT_MS * rng.lognormvariate(0.0, 0.15) for _ in range(3))
    return (lognormal_ms(rng, 0.8, 0.4) + rtts * NS_PER_MS + lognormal_ms(rng, 2.2, 0.3))


def bureau_ms(rng: random.Random, slow: bool) -> float:
    """The bureau's time to answer (server + the transfer), ns."""
    if slow:
        t = 55.0 * rng.lognormvariate(0.0, 0.5)
        if rng.random() < 0.05:
            t += 250.0 * rng.paretovariate(1.5)
    else:
        t = 24.0 * rng.lognormvariate(0.0, 0.35)
        if rng.random() < 0.004:
            t += 120.0 * rng.paretovariate(1.4)
    return (BUREAU_RTT_MS * rng.lognormvariate(0.0, 0.15) + t) * NS_PER_MS
