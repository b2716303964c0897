"""The physics of the blind family `edge-worker` (edge_worker.py): points of presence and the long-haul
network between them, V8 isolates (a script compile on start, one event loop, an HTTP/2 connection of
their own to the ranker), the edge KV store (a per-PoP cache in front of one central store), the
per-user session objects (single-threaded actors in one location worldwide) and the ranker's regions
and hosts. Times are ns from the run's start.
"""

from __future__ import annotations

import bisect
import random
from dataclasses import dataclass, field

from reference_pipeline.simulate.trace_table import NS_PER_MS, NS_PER_S, lognormal_ms


@dataclass(frozen=True)
class Pop:
    """One point of presence: its code, continent, share of the traffic, the round trip (ms) to the
    two ranker regions (the central KV store and the `enam` object location sit beside `us-east4`),
    to the nearest object location, and to its users' browsers."""

    code: str
    continent: str
    weight: float
    rtt_us: float
    rtt_eu: float
    rtt_do: float
    rtt_user: float


POPS = (
    Pop("iad", "na", 0.17, 2.0, 80.0, 4.0, 14.0),
    Pop("ord", "na", 0.12, 18.0, 96.0, 6.0, 16.0),
    Pop("dfw", "na", 0.09, 30.0, 110.0, 8.0, 18.0),
    Pop("sjc", "na", 0.11, 64.0, 146.0, 5.0, 15.0),
    Pop("lhr", "eu", 0.12, 76.0, 8.0, 5.0, 14.0),
    Pop("fra", "eu", 0.10, 88.0, 10.0, 4.0, 15.0),
    Pop("cdg", "eu", 0.07, 82.0, 9.0, 6.0, 16.0),
    Pop("gru", "sa", 0.02, 118.0, 190.0, 9.0, 24.0),
    Pop("nrt", "as", 0.025, 148.0, 228.0, 6.0, 18.0),
    Pop("sin", "as", 0.006, 218.0, 158.0, 7.0, 22.0),
    Pop("syd", "oc", 0.015, 198.0, 268.0, 8.0, 20.0),
    Pop("bom", "as", 0.004, 188.0, 114.0, 10.0, 30.0),
)
REGIONS = ("us-east4", "europe-west4")
KV_READ_MS = 52.0  # the central store's own read, queue-free


def nearest_region(pop: Pop) -> int:
    return 0 if pop.rtt_us <= pop.rtt_eu else 1


def region_rtt(pop: Pop, region: int) -> float:
    return pop.rtt_us if region == 0 else pop.rtt_eu


def net_ms(rng: random.Random, rtt_ms: float) -> float:
    """One round trip (ns): propagation plus a little queueing jitter."""
    return rtt_ms * NS_PER_MS * (1.0 + 0.06 * rng.lognormvariate(0.0, 0.8))


class Loop:
    """An isolate's one JavaScript thread: a piece of synchronous work (a callback) runs to the end
    once started; a callback that is ready waits while another runs. Requests are modelled one at
    a time, so callbacks are not asked for in time order: each is placed in the first idle gap from
    when it is ready that holds it."""

    def __init__(self) -> None:
        self.starts: list[float] = []
        self.ends: list[float] = []

    def fit(self, t: float, work: float) -> tuple[int, float]:
        """(where, when) `work` ns ready at t would start: the first idle gap from t that holds it."""
        k = bisect.bisect_right(self.ends, t)
        start = t
        while k < len(self.starts) and self.starts[k] < start + work:
            start = max(start, self.ends[k])
            k += 1
        return k, start

    def run(self, t: float, work: float) -> float:
        """When `work` ns of synchronous JavaScript ready at t has run."""
        k, start = self.fit(t, work)
        self.starts.insert(k, start)
        self.ends.insert(k, start + work)
        return start + work


class Servers:
    """`n` servers of one queue (a host's worker processes, the central store's read slots), each
    booked like a Loop: a job goes to the server where it starts first."""

    def __init__(self, n: int) -> None:
        self.loops = [Loop() for _ in range(n)]

    def start(self, t: float, work: float) -> float:
        """When a job of `work` ns arriving at t starts (it is booked)."""
        best, where, start = 0, 0, float("inf")
        for i, loop in enumerate(self.loops):
            k, s = loop.fit(t, work)
            if s < start:
                best, where, start = i, k, s
                if s <= t:
                    break
        loop = self.loops[best]
        loop.starts.insert(where, start)
        loop.ends.insert(where, start + work)
        return start


@dataclass
class Isolate:
    """One V8 isolate running the worker's script at a PoP: usable from `ready` (the script's parse
    and compile after its creation), with an HTTP/2 connection to the ranker's load balancer once a
    call opened one (usable from `conn_ready`; None: none open)."""

    serial: int
    born: float
    ready: float
    compile_ns: float
    bundle: str
    last_used: float
    loop: Loop = field(default_factory=Loop)
    evict_at: float = float("inf")  # evicted under memory pressure from then on
    conn_ready: float | None = None  # the HTTP/2 connection to the ranker: usable from
    conn_opened: float = 0.0
    conn_until: float = float("inf")  # closed by the load balancer (idle timeout, a GOAWAY)
    served: int = 0


@dataclass
class Kv:
    """The edge KV store: a per-PoP cache (an entry lives `ttl` from when its miss filled it, however
    often it is read) in front of one central store in us-east reached over the long-haul network;
    concurrent misses of one key are not coalesced. The central store serves reads from a pool of
    slots; `backlog(t)` is extra wait behind queued writes (ns)."""

    ttl_ns: float
    slots: int
    cached: dict[tuple[int, str], float] = field(default_factory=dict)
    pool: Servers = field(init=False)
    backlog_window: tuple[float, float] | None = None

    def __post_init__(self) -> None:
        self.pool = Servers(self.slots)

    def backlog(self, t: float) -> float:
        if self.backlog_window is None:
            return 0.0
        a, b = self.backlog_window
        if t < a:
            return 0.0
        if t < b:  # writes arrive faster than the store commits them: the queue ahead of a read grows
            return min(1200.0, 100.0 + 900.0 * (t - a) / NS_PER_S) * NS_PER_MS
        return max(0.0, 1200.0 * NS_PER_MS - 2.5 * (t - b))  # drains at 2.5x the rate it grew

    def get(self, rng: random.Random, pop: int, key: str, t: float) -> tuple[float, bool, float]:
        """(when the value is back in the worker, whether the PoP's cache had it, central wait ns)."""
        until = self.cached.get((pop, key))
        if until is not None and t < until:
            return t + lognormal_ms(rng, 0.9, 0.45), True, 0.0
        half = net_ms(rng, POPS[pop].rtt_us) / 2
        arrive = t + lognormal_ms(rng, 1.5, 0.3) + half
        wait_behind = self.backlog(arrive) * rng.lognormvariate(0.0, 0.35)
        work = KV_READ_MS * NS_PER_MS * rng.lognormvariate(0.0, 0.25)
        if rng.random() < 0.01:  # a read that lands on a compacting storage node
            work += lognormal_ms(rng, 70.0, 0.5)
        slot = self.pool.start(arrive + wait_behind, work)
        back = slot + work + net_ms(rng, POPS[pop].rtt_us) / 2
        self.cached[(pop, key)] = back + self.ttl_ns
        return back, False, slot - arrive


@dataclass
class SessionObject:
    """One user's session object: one instance in one location worldwide; it runs one request's
    handler at a time (its input gate stays closed across the storage read and the write of the page
    view, whose commit the reply waits for), so a user's concurrent requests queue behind each other."""

    location: str
    history: int = 0  # page views stored: a write rewrites the session's recent-history value
    gate: Loop = field(default_factory=Loop)

    def call(self, rng: random.Random, t: float, rtt_ms: float, writes: bool) -> tuple[float, float]:
        """(when the reply is back at the worker, how long the request waited for the object)."""
        arrive = t + net_ms(rng, rtt_ms) / 2 + lognormal_ms(rng, 0.6, 0.3)
        work = (1.0 + 0.002 * min(self.history, 3000)) * NS_PER_MS * rng.lognormvariate(0.0, 0.35)
        if writes:
            work += (2.4 + 0.003 * min(self.history, 3000)) * NS_PER_MS * rng.lognormvariate(0.0, 0.3)
            self.history += 1
        if rng.random() < 0.004:  # a storage read that misses the object's in-memory cache
            work += lognormal_ms(rng, 18.0, 0.4)
        done = self.gate.run(arrive, work)
        return done + net_ms(rng, rtt_ms) / 2, done - work - arrive


@dataclass
class RankerHost:
    """One ranker host: a Python server with a few worker processes running an ONNX gradient-boosted
    model (time per candidate scored)."""

    region: int
    index: int
    workers: Servers
    per_candidate_ms: float
    model: str


def ranker_hosts(per_region: int, workers: int) -> list[RankerHost]:
    """Host i is host i // 2 of region i % 2."""
    return [RankerHost(i % len(REGIONS), i // len(REGIONS), Servers(workers), 0.022, "gbdt-ranker-v12")
            for i in range(per_region * len(REGIONS))]


@dataclass
class Served:
    """What a ranker host did with one call: when it took the request (SERVER span start), when the
    model ran, when it replied; whether it failed (a 5xx)."""

    host: int
    start: float
    infer_start: float
    infer_end: float
    end: float
    failed: bool


def rank(rng: random.Random, host: RankerHost, hid: int, arrive: float, candidates: int) -> Served:
    decode = lognormal_ms(rng, 0.6, 0.3) + 0.004 * candidates * NS_PER_MS  # the JSON body
    per = host.per_candidate_ms * rng.lognormvariate(0.0, 0.15)
    infer = (0.8 + per * candidates) * NS_PER_MS
    if rng.random() < 0.005:  # a request that meets the host's Python collector
        infer += lognormal_ms(rng, 25.0, 0.4)
    reply = lognormal_ms(rng, 0.3, 0.3)
    start = host.workers.start(arrive, decode + infer + reply)
    return Served(hid, start, start + decode, start + decode + infer, start + decode + infer + reply,
                  rng.random() < 0.001)
