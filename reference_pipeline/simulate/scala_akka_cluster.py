"""The physics of the blind family `scala-akka` (scala_akka.py): cluster nodes (a default fork-join
dispatcher with one thread per core, XGBoost4J's native pool, G1 pauses and CFS-throttled periods as
process-wide stalls, a tiered JIT warming with the requests a JVM has served), sharded entities (one
mailbox each, recovered from the Cassandra journal on their first message after a start or a shard
move), Artery remoting between nodes, the Redis geo search whose radius grows, the traffic service's
circuit breaker and the Kafka producer (linger, acks=all, a leader move).
"""

from __future__ import annotations

import bisect
import random
from dataclasses import dataclass, field

from reference_pipeline.simulate.trace_table import NS_PER_MS, NS_PER_S, Stalls, lognormal_ms

PERIOD_NS = 100 * NS_PER_MS  # the CFS period


class Pool:
    """Threads that run one task at a time; a task takes the earliest gap, on any thread, that starts
    at or after it is ready (requests are modelled in arrival order, so a thread's busy intervals are
    kept, not just its last end: a later request's step may fit before an earlier one's later step).
    A blocking call holds its thread for its whole length: such holds are kept apart and taken by the
    earliest thread not already held (the short tasks around them wait for a thread that is not)."""

    def __init__(self, threads: int) -> None:
        self.busy: list[tuple[list[float], list[float]]] = [([], []) for _ in range(threads)]
        self.held: list[tuple[list[float], list[float]]] = [([], []) for _ in range(threads)]

    @staticmethod
    def _clear(lists: tuple[list[float], list[float]], t: float, length: float) -> float:
        """The first t' >= t such that [t', t' + length) overlaps none of these intervals."""
        starts, ends = lists
        i = bisect.bisect_right(starts, t) - 1
        if i >= 0 and ends[i] > t:
            t = ends[i]
        i = max(i + 1, 0)
        while i < len(starts) and starts[i] < t + length:
            t = max(t, ends[i])
            i += 1
        return t

    def _fit(self, k: int, t: float, length: float) -> float:
        while True:
            moved = self._clear(self.held[k], self._clear(self.busy[k], t, length), length)
            if moved == t:
                return t
            t = moved

    def take(self, t: float, length: float) -> tuple[float, int]:
        """(start, thread) of the earliest gap for a task of `length` ready at t."""
        best = (float("inf"), 0)
        for k in range(len(self.busy)):
            start = self._fit(k, t, length)
            if start < best[0]:
                best = (start, k)
                if start <= t:
                    break
        return best

    def take_held(self, t: float, length: float) -> tuple[float, int]:
        best = (float("inf"), 0)
        for k in range(len(self.held)):
            start = self._clear(self.held[k], t, length)
            if start < best[0]:
                best = (start, k)
        return best

    def hold(self, k: int, start: float, end: float, blocking: bool = False) -> None:
        starts, ends = (self.held if blocking else self.busy)[k]
        i = bisect.bisect_right(starts, start)
        starts.insert(i, start)
        ends.insert(i, end)


@dataclass
class Node:
    """One cluster member (a pod): its dispatcher, native pool, stalls, GC record and JIT state."""

    index: int
    cores: int
    stalls: Stalls
    pauses: list[tuple[float, float, str]]  # (start, end, G1 type: Normal | Mixed | Full), for JFR
    served: int = 100_000  # requests and entity messages its JIT has seen (a fresh JVM starts at 0)
    born: float = 0.0
    jdbc_on_dispatcher: bool = False
    dispatcher: Pool = field(init=False)
    native: Pool = field(init=False)

    def __post_init__(self) -> None:
        self.dispatcher = Pool(self.cores)
        self.native = Pool(self.cores)

    def jit(self) -> float:
        """How much slower JVM code runs than when warm: interpreted, then C1, then C2 code."""
        n = self.served
        return 1.0 + 12.0 * 2.718 ** (-n / 60.0) + 2.0 * 2.718 ** (-n / 400.0)

    def run(self, t: float, work: float) -> tuple[float, float]:
        """A task of `work` ns of CPU on the default dispatcher: (start, end)."""
        start, k = self.dispatcher.take(self.stalls.settle(t), work)
        start = self.stalls.settle(start)
        end = self.stalls.run(start, work)
        self.dispatcher.hold(k, start, end)
        return start, end

    def block(self, t: float, wait: float) -> tuple[float, float]:
        """A blocking call on a dispatcher thread: it holds the thread for the call's `wait` ns."""
        start, k = self.dispatcher.take_held(self.stalls.settle(t), wait)
        start = self.stalls.settle(start)
        end = self.stalls.settle(start + wait)
        self.dispatcher.hold(k, start, end, blocking=True)
        return start, end

    def predict(self, t: float, work: float) -> tuple[float, float]:
        """XGBoost4J's predict: native threads (a G1 pause does not stop them, but the JNI call
        returns into Java only after the pause); CFS throttling stops every thread of the cgroup."""
        start, k = self.native.take(t, work)
        end = self.stalls.settle(self.stalls.run(start, work))
        self.native.hold(k, start, end)
        return start, end


def g1_pauses(rng: random.Random, horizon: float, old_pressure: bool) -> list[tuple[float, float, str]]:
    """G1's young pauses every ~1.5 s (4-12 ms); near a full heap, mixed collections every ~0.3 s
    (60-200 ms) and now and then an evacuation failure's full collection (0.4-0.9 s)."""
    out = []
    t = rng.uniform(0.0, 1.5) * NS_PER_S
    while t < horizon:
        length = lognormal_ms(rng, 7.0, 0.35)
        out.append((t, t + length, "Normal"))
        t += length + rng.uniform(0.8, 2.2) * NS_PER_S
    if old_pressure:
        t = rng.uniform(0.1, 0.4) * NS_PER_S
        while t < horizon:
            full = rng.random() < 0.1
            length = (rng.uniform(400.0, 900.0) * NS_PER_MS if full else lognormal_ms(rng, 110.0, 0.4))
            out.append((t, t + length, "Full" if full else "Mixed"))
            t += length + rng.uniform(0.15, 0.4) * NS_PER_S
    return out


def throttled_periods(rng: random.Random, horizon: float, share: float,
                      left_ms: tuple[float, float]) -> list[tuple[float, float]]:
    """CFS: in a period where the JIT compiler and GC threads burst past the quota, the cgroup runs
    out of it part-way and nothing runs until the next period begins."""
    out = []
    for k in range(int(horizon // PERIOD_NS) + 1):
        if rng.random() < share:
            end = (k + 1) * PERIOD_NS
            out.append((end - rng.uniform(*left_ms) * NS_PER_MS, end))
    return out


@dataclass
class Entity:
    kind: str  # "Restaurant" | "Courier"
    id: int
    events_since_snapshot: int
    loaded: bool
    free: float = 0.0  # when its mailbox's current message is done


@dataclass
class Recovery:
    """An entity's recovery: the snapshot read, then the journal replayed page by page."""

    snapshot: tuple[float, float]
    pages: list[tuple[float, float, int]]  # (start, end, events)
    end: float


class Shards:
    """Cluster sharding: entity -> shard -> node; a shard moved to another node stops its entities,
    which restart there on their next message (after the hand-off)."""

    def __init__(self, rng: random.Random, shards: int, nodes: list[int]) -> None:
        self.rng = rng
        self.shards = shards
        self.home = {s: nodes[s % len(nodes)] for s in range(shards)}
        self.entities: dict[tuple[str, int], Entity] = {}
        self.handoff: dict[int, float] = {}  # shard -> when its hand-off ends (a moved shard)

    def shard(self, kind: str, eid: int) -> int:
        return (eid * 2654435761 + (17 if kind == "Courier" else 0)) % self.shards

    def entity(self, kind: str, eid: int) -> Entity:
        key = (kind, eid)
        if key not in self.entities:
            every = 1000 if kind == "Restaurant" else 300
            moved = self.shard(kind, eid) in self.handoff  # alive on the old node: not in memory here
            self.entities[key] = Entity(kind, eid, self.rng.randrange(every),
                                        not moved and self.rng.random() > 0.012)
        return self.entities[key]

    def move(self, to: int, frm: set[int] | None, count: int, at: float, handoff: float) -> list[int]:
        """Move `count` shards (from nodes `frm`, or the busiest) to node `to` at `at`."""
        pick = [s for s, n in sorted(self.home.items()) if frm is None or n in frm]
        self.rng.shuffle(pick)
        moved = pick[:count]
        for s in moved:
            self.home[s] = to
            self.handoff[s] = at + handoff
        for (kind, eid), ent in self.entities.items():
            if self.shard(kind, eid) in moved:
                ent.loaded = False
        return moved


def recover(rng: random.Random, node: Node, ent: Entity, t: float) -> Recovery:
    """akka-persistence-cassandra: the latest snapshot, then the events after it, 100 per page; each
    page's events are applied on the dispatcher before the next page is asked."""
    snap_e = t + lognormal_ms(rng, 2.5, 0.3)
    pages = []
    left, at = ent.events_since_snapshot, snap_e
    while True:
        n = min(100, left)
        page_e = at + lognormal_ms(rng, 2.2, 0.3) + 0.03 * n * NS_PER_MS
        pages.append((at, page_e, n))
        _, at = node.run(page_e, 0.012 * n * NS_PER_MS * node.jit() ** 0.5)  # one handler, hot at once
        left -= n
        if left <= 0:
            break
    ent.loaded = True
    return Recovery((t, snap_e), pages, at)


class Breaker:
    """akka.pattern.CircuitBreaker: `max_failures` consecutive failures open it for `reset` ns; then
    one trial call (half-open) closes it or opens it again; while open, calls fail fast."""

    def __init__(self, max_failures: int = 5, reset: float = 30 * NS_PER_S) -> None:
        self.max_failures, self.reset = max_failures, reset
        self.failures = 0
        self.open_until = -1.0
        self.trial_until = -1.0

    def allows(self, t: float) -> bool:
        if t < self.open_until:
            return False
        return not (self.open_until >= 0 and t < self.trial_until)  # half-open: one trial in flight

    def record(self, t_start: float, t_end: float, ok: bool) -> None:
        if ok:
            self.failures, self.open_until = 0, -1.0
            return
        self.failures += 1
        half_open = self.open_until >= 0 and t_start >= self.open_until
        if half_open or self.failures >= self.max_failures:
            self.open_until = t_end + self.reset
            self.trial_until = self.open_until + 0.3 * NS_PER_S


def geo_search(rng: random.Random, area: str) -> list[tuple[int, int]]:
    """GEOSEARCH BYRADIUS, radius doubled from 2 km (to 16 km at most) until 8 couriers returned are
    available: [(radius km, members returned)] per query. Busy couriers come back too, and are
    scored (one finishing a delivery nearby can be the best). `area`: dense (the city), edge (its
    outskirts: a radius or two more), suburb (few couriers, most of them busy)."""
    density, available = {"dense": (rng.uniform(2.5, 5.0), 0.3), "edge": (rng.uniform(1.0, 2.0), 0.15),
                          "suburb": (rng.uniform(0.6, 1.4), 0.04)}[area]
    out = []
    radius = 2
    while True:
        mean = density * 3.1416 * radius * radius
        members = max(0, int(rng.gauss(mean, mean ** 0.5)))
        out.append((radius, members))
        free = sum(rng.random() < available for _ in range(min(members, 400))) if members < 400 else int(
            members * available)
        if free >= 8 or radius >= 16:
            return out
        radius *= 2
