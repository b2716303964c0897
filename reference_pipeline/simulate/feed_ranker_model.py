"""The physical parts of the blind family `feed-ranker` (feed_ranker.py): G1 pauses driven by what the
requests allocate, a Cassandra LOCAL_QUORUM read over a 6-node ring, an expire-after-write Caffeine
cache, the sidecar's CFS quota, the ads-blending service's latency, TCP retransmits and JIT warm-up.

Times are float ns from the start of the run, as in trace_table.py.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from typing import Any

from reference_pipeline.simulate.trace_table import NS_PER_MS, NS_PER_S, lognormal_ms

MB = 1 << 20
PERIOD_NS = 100 * NS_PER_MS  # the CFS period


@dataclass(frozen=True)
class Pause:
    """One stop-the-world G1 pause as the GC notification would describe it."""

    start: float
    end: float
    name: str  # the collector's MXBean name
    cause: str


def g1_pauses(
    rng: random.Random,
    allocations: list[tuple[float, float, float]],
    horizon: float,
    leak_mb_per_gc: float,
    humongous_trigger_mb: float | None,
) -> list[Pause]:
    """The pauses of one JVM, from what its requests allocate: (time ns, young MB, humongous MB).

    Eden (350 MB) filling ends in a young pause (6 ms median, longer the more each request keeps
    live); each young pause promotes `leak_mb_per_gc` to the old generation; once the old generation
    passes the IHOP (45 % of a 4 GB heap) a concurrent mark runs (about a second) and the next young
    pauses are mixed (old regions evacuated too: 60-200 ms). Humongous arrays (over half a 4 MB
    region) go straight to old regions: past `humongous_trigger_mb` of them since the last pause a
    `G1 Humongous Allocation` pause runs, every third one starting a cycle, and some of them fail to
    evacuate (to-space exhausted: a few hundred ms)."""
    pauses: list[Pause] = []
    eden, humongous = 0.0, 0.0
    old = rng.uniform(900.0, 1700.0)
    mark_done: float | None = None
    mixed_left = 0
    since_cycle = 0
    per_request = sum(a for _, a, _ in allocations) / max(len(allocations), 1)
    young_scale = 1.0 + per_request / 40.0  # survivors copied: more live data per request in flight
    last_end = 0.0
    for t, young_mb, humongous_mb in allocations:
        eden += young_mb
        humongous += humongous_mb
        at = max(t, last_end)
        if humongous_trigger_mb is not None and humongous >= humongous_trigger_mb:
            humongous, eden = 0.0, 0.0
            since_cycle += 1
            length = lognormal_ms(rng, 35.0, 0.4)
            cause = "G1 Humongous Allocation"
            if rng.random() < 0.15:
                length = lognormal_ms(rng, 260.0, 0.3)  # to-space exhausted: evacuation failure
            if since_cycle % 3 == 0 and mark_done is None and mixed_left == 0:
                mark_done = at + length + rng.uniform(0.6, 1.2) * NS_PER_S
            pauses.append(Pause(at, at + length, "G1 Young Generation", cause))
            last_end = at + length
            continue
        if eden < 350.0:
            continue
        eden = 0.0
        old += leak_mb_per_gc + rng.uniform(0.0, 4.0)
        if mixed_left > 0:
            mixed_left -= 1
            length = lognormal_ms(rng, 95.0, 0.4)
            old = max(old - rng.uniform(250.0, 450.0), 600.0)
            pauses.append(Pause(at, at + length, "G1 Young Generation", "G1 Evacuation Pause (Mixed)"))
        else:
            length = lognormal_ms(rng, 6.0 * young_scale, 0.35)
            pauses.append(Pause(at, at + length, "G1 Young Generation", "G1 Evacuation Pause"))
            if mark_done is None and old > 0.45 * 4096:
                mark_done = at + length + rng.uniform(0.8, 1.5) * NS_PER_S
        last_end = at + length
        if mark_done is not None and at >= mark_done:
            mark_done, mixed_left = None, rng.randint(4, 7)
    return [p for p in pauses if p.start < horizon]


class CassandraRing:
    """Six nodes in one DC, replication factor 3, LOCAL_QUORUM (2 of 3). Token-aware routing makes a
    replica of the partition the coordinator; it reads locally and asks one more replica (the dynamic
    snitch prefers the one that has been answering faster), and asks the third once the table's
    p99 (speculative_retry, 12 ms) passes. The read completes at the second answer. A node under
    compaction reads slowly and, its CPU and disk saturated, coordinates slowly too."""

    def __init__(self, rng: random.Random, slow_nodes: tuple[int, ...]) -> None:
        self.rng = rng
        self.slow = set(slow_nodes)
        self.host_ids = [
            f"{rng.getrandbits(32):08x}-{rng.getrandbits(16):04x}-4{rng.getrandbits(12):03x}-"
            f"a{rng.getrandbits(12):03x}-{rng.getrandbits(48):012x}"
            for _ in range(6)
        ]

    def replicas(self, partition: int) -> list[int]:
        first = (partition * 2654435761) % 6
        return [(first + j) % 6 for j in range(3)]

    def _replica_read(self, node: int, rows: int) -> float:
        work = 0.9 + 0.002 * rows
        if node in self.slow:
            return lognormal_ms(self.rng, 8.0 * work, 0.8)
        return lognormal_ms(self.rng, work, 0.35)

    def read(self, partition: int, rows: int) -> tuple[float, int, int]:
        """(duration ns, coordinator node, speculative executions) of one page of `rows` rows."""
        rng = self.rng
        replicas = self.replicas(partition)
        coordinator = rng.choice(replicas)
        others = [r for r in replicas if r != coordinator]
        if any(r in self.slow for r in others) and rng.random() < 0.85:
            others.sort(key=lambda r: r in self.slow)  # the snitch routes around the slow replica
        else:
            rng.shuffle(others)
        hop = lognormal_ms(rng, 0.25, 0.3)
        answers = [self._replica_read(coordinator, rows), 2 * hop + self._replica_read(others[0], rows)]
        speculative = 0
        if sorted(answers)[1] > 12.0 * NS_PER_MS:
            speculative = 1
            answers.append(12.0 * NS_PER_MS + 2 * hop + self._replica_read(others[1], rows))
        quorum = sorted(answers)[1]
        coordinate = lognormal_ms(rng, 0.3, 0.3)
        if coordinator in self.slow:  # native-transport threads starved by compaction
            coordinate += lognormal_ms(rng, 20.0, 0.9)
        return coordinate + quorum, coordinator, speculative


class CaffeineCache:
    """Per-candidate features in process, expire-after-write `ttl_s`. In a long-running pod the
    entries were written at scattered times (each refilled after its own expiry); a pod warmed at
    `warmed_at` (its deploy: a bulk load of the hot set) has them all written at that moment, so they
    all expire together one TTL later. Ids past `hot` (the long tail) are loaded only on a miss."""

    def __init__(self, rng: random.Random, hot: int, ttl_s: float, warmed_at: float | None) -> None:
        self.ttl = ttl_s * NS_PER_S
        if warmed_at is None:
            self.written = {i: -rng.uniform(0.0, self.ttl) for i in range(hot)}
        else:
            self.written = dict.fromkeys(range(hot), warmed_at)

    def misses(self, ids: set[int], t: float) -> list[int]:
        limit = t - self.ttl
        written = self.written
        return [i for i in ids if written.get(i, -math.inf) <= limit]

    def fill(self, ids: list[int], t: float) -> None:
        for i in ids:
            self.written[i] = t


def candidate_ids(rng: random.Random, n: int, universe: int) -> set[int]:
    """`n` draws from the candidate universe, popular ids far more often (a power-law skew)."""
    r = rng.random
    return {int(universe * r() ** 2.4) for _ in range(n)}


def cfs_stalls(
    rng: random.Random,
    arrivals: list[float],
    horizon: float,
    quota_ms: float,
    per_request_ms: float,
    background_ms: float,
) -> list[tuple[float, float]]:
    """The throttled stretches of one container under a CFS quota: each 100 ms period its work (the
    requests that arrive in it, its background, what was left over) runs until the quota is spent,
    then nothing runs until the next period begins."""
    periods = int(horizon // PERIOD_NS) + 1
    counts = [0] * periods
    for t in arrivals:
        counts[min(int(t // PERIOD_NS), periods - 1)] += 1
    out: list[tuple[float, float]] = []
    backlog = 0.0
    for p, count in enumerate(counts):
        demand = backlog + background_ms * rng.uniform(0.6, 1.4)
        demand += sum(per_request_ms * rng.lognormvariate(0.0, 0.3) for _ in range(count))
        if demand > quota_ms:
            start = p * PERIOD_NS + PERIOD_NS * quota_ms / demand
            out.append((start, (p + 1) * PERIOD_NS))
            backlog = demand - quota_ms
        else:
            backlog = 0.0
    return out


def ads_episodes(rng: random.Random, horizon: float) -> list[tuple[float, float]]:
    """When a degraded ads-blending service is at its worst (its own backend saturated): three
    stretches of 4-6 % of the run each, spread over it."""
    out = []
    for centre in (0.2, 0.5, 0.8):
        start = (centre + rng.uniform(-0.05, 0.05)) * horizon
        out.append((start, start + rng.uniform(0.04, 0.06) * horizon))
    return out


def ads_blend_ns(rng: random.Random, t: float, degraded: bool, episodes: list[tuple[float, float]]) -> float:
    """The ads-blending service's own time for one call: 11 ms median with a rare slow auction; when
    degraded 45 ms, and about 700 ms inside an episode."""
    if not degraded:
        own = lognormal_ms(rng, 11.0, 0.4)
        if rng.random() < 0.005:
            own += 40.0 * NS_PER_MS * rng.paretovariate(1.5)
        return own
    if any(a <= t < b for a, b in episodes):
        return lognormal_ms(rng, 700.0, 0.35)
    return lognormal_ms(rng, 45.0, 0.5)


def retransmit_ns(rng: random.Random, lossy: bool, loss: float = 0.03) -> float:
    """Extra time one direction of a call spends to TCP loss: a lost segment waits for the
    retransmission timeout (Linux's 200 ms floor, a little more with RTT variance), doubling on a
    second loss."""
    if not lossy or rng.random() >= loss:
        return 0.0
    rto = rng.uniform(200.0, 230.0) * NS_PER_MS
    return rto * (3.0 if rng.random() < loss else 1.0)


def jit_factor(index: int) -> float:
    """How much slower a fresh JVM runs its hot code on its `index`-th request: interpreted and C1
    code until C2 has compiled the scoring (a pure-Java tree evaluator) and JSON paths."""
    return 1.0 + 12.0 * math.exp(-index / 80.0)


def first_request_ns(rng: random.Random, index: int) -> float:
    """Lazy initialisation on a fresh pod's first requests (Spring beans, the model's native library,
    driver connection pools)."""
    return lognormal_ms(rng, 600.0, 0.3) if index < 3 else 0.0


# --- the pods and what one request did, for the span writer -------------------------------------

ZONES = ("us-east-1a", "us-east-1b", "us-east-1c")


@dataclass(frozen=True)
class Pod:
    name: str
    uuid: str
    ip: str
    zone: str


@dataclass
class Call:
    """One outbound call: the app's CLIENT span, Envoy's outbound span, the callee's SERVER span."""

    start: float
    envoy_start: float
    envoy_end: float
    server_start: float
    server_end: float
    end: float
    instance: int
    attrs: dict[str, Any] = field(default_factory=dict)


@dataclass
class Request:
    pod: int
    inbound: tuple[float, float]
    root: tuple[float, float]
    cql: tuple[float, float]
    cql_attrs: dict[str, Any]
    hydrate: tuple[float, float]
    hits: int
    misses: int
    feature_calls: list[Call]
    rank: tuple[float, float]
    batches: list[tuple[float, float, int]]
    ads: Call
    produce: tuple[float, float]
    candidates: int
    surface: str
    items: int


def pods_of(seed: int, count: int) -> list[Pod]:
    """The app's pods for a seed (the same names in every scenario; a fresh pod is the last)."""
    rng = random.Random(seed * 7907 + 11)
    alphabet = "bcdfghjklmnpqrstvwxz2456789"
    replicaset = "".join(rng.choice("0123456789abcdef") for _ in range(9))
    out = []
    for k in range(count):
        suffix = "".join(rng.choice(alphabet) for _ in range(5))
        u = f"{rng.getrandbits(128):032x}"
        out.append(
            Pod(
                f"feed-api-{replicaset}-{suffix}",
                f"{u[:8]}-{u[8:12]}-4{u[13:16]}-a{u[17:20]}-{u[20:]}",
                f"10.12.{k % 3}.{21 + k}",
                ZONES[k % 3],
            )
        )
    return out


def labels(style: int, pods: list[Pod], sidecar: bool) -> list[str]:
    """The instance label a reader gives each pod's app (or sidecar) process: the app's
    service.instance.id (a UUID), Jaeger's `hostname`, a Zipkin endpoint's ip:port."""
    if style == 0:
        return [p.name if sidecar else p.uuid for p in pods]
    if style == 1:
        return [p.name for p in pods]
    return [f"{p.ip}:{15006 if sidecar else 8080}" for p in pods]
