"""One request of the blind family `edge-worker` (edge_worker.py) through its world: the page's arrivals
(browsers, a crawler's bursts, a partner's sync client), isolates made and evicted, each callback on
the isolate's event loop, the CPU-time limit, the KV reads, the session object, the ranker call over the
isolate's HTTP/2 connection. Times are ns from the run's start.
"""

from __future__ import annotations

import bisect
import random
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from reference_pipeline.simulate.edge_worker_net import (
    POPS,
    REGIONS,
    Isolate,
    Kv,
    RankerHost,
    SessionObject,
    nearest_region,
    net_ms,
    rank,
    ranker_hosts,
    region_rtt,
)
from reference_pipeline.simulate.edge_worker_spans import Attempt, Request
from reference_pipeline.simulate.trace_table import NS_PER_MS, NS_PER_S, lognormal_ms, poisson_arrivals

CPU_LIMIT_NS = 50.0 * NS_PER_MS
PROFILE_BUDGET_NS = 40.0 * NS_PER_MS
TTL_NS = 60.0 * NS_PER_S
SEGMENTS, CATEGORIES, MARKETS = 4, 6, 3  # a PoP serves three markets (prices, stock)
BUNDLES = ("v2026.11.27-1", "v2026.11.28-2")
PAGE, BOT, SYNC = 0, 1, 2


@dataclass
class User:
    uid: int
    registered: bool
    obj: SessionObject
    rtt_do: float


@dataclass
class World:
    s: dict[str, Any]
    parts: frozenset[str]
    run_ns: float
    kv: Kv
    slots: list[list[Isolate | None]]
    hosts: list[RankerHost]
    pools: list[list[User]]
    resets: dict[tuple[int, int], list[float]]
    far_pop: int
    bot_pop: int
    noisy_pop: int
    failed_region: int
    bot: User
    markets: int = 2
    serial: int = 0
    next_uid: int = 1
    objects: dict[int, SessionObject] = field(default_factory=dict)

    @classmethod
    def build(cls, rng: random.Random, s: dict[str, Any], parts: frozenset[str], requests: int, far_pop: int,
              bot_pop: int, noisy_pop: int, failed_region: int, slow_host: int) -> World:
        run_ns = requests / s["rps"] * NS_PER_S
        kv = Kv(TTL_NS, 24)
        if "central-kv-write-backlog" in parts:
            kv.backlog_window = (0.2 * run_ns, 0.85 * run_ns)
        wave = 0.4 * run_ns
        for j in range(len(POPS)):
            for key in range(CATEGORIES * MARKETS):
                warm = rng.random() < 0.95
                until = rng.uniform(0.0, TTL_NS) if warm else -1.0
                if "kv-ttl-wave" in parts:
                    until = wave + rng.uniform(0.0, 0.25 * NS_PER_S)
                kv.cached[(j, f"cands:{key}")] = until
            for cat in range(CATEGORIES):
                kv.cached[(j, f"popular:{cat}")] = rng.uniform(0.0, TTL_NS) if rng.random() < 0.7 else -1.0
        slots: list[list[Isolate | None]] = []
        for pop in POPS:
            n = 1 + int(pop.weight >= 0.10) + int(pop.weight >= 0.15)
            slots.append([Isolate(-1, -rng.uniform(30, 300) * NS_PER_S, 0.0, 0.0, BUNDLES[0],
                                  -rng.uniform(0.0, 2.0) * NS_PER_S, served=1000,
                                  evict_at=rng.expovariate(1 / 80.0) * NS_PER_S, conn_ready=0.0,
                                  conn_opened=-NS_PER_S, conn_until=rng.expovariate(1 / 900.0) * NS_PER_S)
                          for _ in range(n)])
        hosts = ranker_hosts(s["hosts"], s["workers"])
        if "ranker-slow-host" in parts:  # ~15-20x the time per candidate: the host runs at ~87 % busy
            host = hosts[slow_host]
            us = sum(p.weight for p in POPS if nearest_region(p) == host.region) / sum(p.weight for p in POPS)
            per_host = us * s["rps"] / s["hosts"]
            host.per_candidate_ms = (0.87 * s["workers"] / per_host * 1000.0 - 1.4) / 127.0
            host.model = "gbdt-ranker-v13"
        resets: dict[tuple[int, int], list[float]] = {}
        if "h2-reset-storm" in parts:
            for j, row in enumerate(slots):
                for k in range(len(row)):
                    t, out = 0.3 * run_ns, []
                    while t < 0.75 * run_ns:
                        t += rng.expovariate(1 / 0.6) * NS_PER_S
                        out.append(t)
                    resets[(j, k)] = out
        bot = User(0, True, SessionObject("near", history=1200), POPS[bot_pop].rtt_do)
        world = cls(s, parts, run_ns, kv, slots, hosts, [], resets, far_pop, bot_pop, noisy_pop,
                    failed_region, bot)
        for j, pop in enumerate(POPS):  # signed-in users active at the start, their profiles cached a while
            pool = [world.new_user(rng, j, True) for _ in range(max(6, int(s["rps"] * pop.weight * 6)))]
            for u in pool:
                if rng.random() < 0.85:
                    kv.cached[(j, f"profile:{u.uid}")] = rng.uniform(0.0, TTL_NS)
            world.pools.append(pool)
        kv.cached[(bot_pop, "profile:0")] = 1e30
        return world

    def new_user(self, rng: random.Random, pop: int, registered: bool) -> User:
        uid = self.next_uid
        self.next_uid += 1
        rtt = POPS[pop].rtt_do
        if registered and pop == self.far_pop and "far-session-objects" in self.parts and rng.random() < 0.9:
            rtt = POPS[pop].rtt_us  # created in enam by the backfill
        elif rng.random() < 0.005:  # a traveller: the object stayed where it was made
            rtt = max(POPS[pop].rtt_us, POPS[pop].rtt_eu) * rng.uniform(0.5, 1.0)
        return User(uid, registered, SessionObject("far" if rtt > 40 else "near"), rtt)

    def user(self, rng: random.Random, pop: int) -> User:
        if rng.random() < 0.3:
            return self.new_user(rng, pop, False)
        pool = self.pools[pop]
        if rng.random() < 0.08:
            u = self.new_user(rng, pop, True)
            pool[rng.randrange(len(pool))] = u
            return u
        return pool[rng.randrange(len(pool))]

    def isolate(self, rng: random.Random, pop: int, t: float) -> tuple[int, Isolate, bool]:
        """The isolate a request at t lands on (made now if its slot's was evicted: then True)."""
        row = self.slots[pop]
        k = rng.randrange(len(row))
        iso = row[k]
        deploy = 0.3 * self.run_ns + 0.01 * pop * self.run_ns
        deployed = "deploy-cold-isolates" in self.parts and t >= deploy
        stale = iso is None or (deployed and iso.bundle == BUNDLES[0])
        idle = iso is not None and t - iso.last_used > 15.0 * NS_PER_S
        if iso is not None and not stale and not idle and t < iso.evict_at:
            return k, iso, False
        bundle = BUNDLES[1] if deployed else BUNDLES[0]
        compile_ns = lognormal_ms(rng, 34.0 if deployed else 12.0, 0.3)
        churn = deployed and t < deploy + 0.25 * self.run_ns  # two versions in memory: evictions
        self.serial += 1
        iso = Isolate(self.serial, t, t + compile_ns, compile_ns, bundle, t,
                      evict_at=t + rng.expovariate(1 / (2.0 if churn else 80.0)) * NS_PER_S)
        row[k] = iso
        return k, iso, True


class Cpu:
    """One invocation's callbacks on its isolate's loop, counting its CPU time against the limit."""

    def __init__(self, iso: Isolate) -> None:
        self.iso, self.used = iso, 0.0
        self.factor = 2.2 if iso.served < 20 else 1.0  # a new isolate runs unoptimized code first
        self.killed_at: float | None = None
        self.began = 0.0  # when the last callback got the thread (an INTERNAL span's start)

    def run(self, t: float, work: float) -> float:
        work *= self.factor
        if self.used + work > CPU_LIMIT_NS:
            work = CPU_LIMIT_NS - self.used
            self.killed_at = self.iso.loop.run(t, work)
            self.used, self.began = CPU_LIMIT_NS, self.killed_at - work
            return self.killed_at
        self.used += work
        end = self.iso.loop.run(t, work)
        self.began = end - work
        return end


def _invoke(rng: random.Random, w: World, kind: int, pop: int, arrive: float, user: User, n: int,
            category: int, retry: bool, body: int) -> Attempt:
    k, iso, cold = w.isolate(rng, pop, arrive)
    iso.last_used = arrive
    at = Attempt(pop, (arrive, arrive), body, (arrive, arrive), batch=kind == SYNC, retry=retry,
                 category=str(category))
    if cold:
        at.cold = (iso.compile_ns, iso.bundle)
    cpu = Cpu(iso)
    iso.served += 1
    t = max(arrive, iso.ready) + lognormal_ms(rng, 0.05, 0.3)
    if kind == SYNC:  # JSON.parse of the whole body, one synchronous call
        t = cpu.run(t, body / 250_000.0 * NS_PER_MS * rng.lognormvariate(0.0, 0.1))
    else:
        t = cpu.run(t, lognormal_ms(rng, 0.25, 0.3))
    at.parse = (cpu.began, t)
    if cpu.killed_at is not None:
        return _killed(rng, at, cpu)
    if kind == SYNC:  # the partner's sync: the parsed history is stored through the object
        s0 = t + lognormal_ms(rng, 0.05, 0.3)
        back, _ = user.obj.call(rng, s0, user.rtt_do, True)
        t = cpu.run(back, lognormal_ms(rng, 0.2, 0.3))
        at.session = (s0, t)
        at.server = (arrive, t + lognormal_ms(rng, 0.1, 0.3))
        return at
    s0 = t + lognormal_ms(rng, 0.05, 0.3)
    back, _ = user.obj.call(rng, s0, user.rtt_do, False)
    session_end = cpu.run(back, lognormal_ms(rng, 0.15, 0.3))
    at.session = (s0, session_end)
    ready = session_end
    segment = "anon"
    if user.registered:
        p0 = t + lognormal_ms(rng, 0.08, 0.3)
        got, hit, _ = w.kv.get(rng, pop, f"profile:{user.uid}", p0)
        done = cpu.run(got, lognormal_ms(rng, 0.1, 0.3))
        at.profile = (p0, done, hit)
        if got - p0 <= PROFILE_BUDGET_NS:
            segment = f"s{user.uid % SEGMENTS}"
            ready = max(ready, done)
        else:  # the budget's timer fires first: the anonymous segment, the read goes on in the background
            ready = max(ready, cpu.run(p0 + PROFILE_BUDGET_NS, lognormal_ms(rng, 0.05, 0.3)))
    at.segment = segment
    c0 = ready + lognormal_ms(rng, 0.05, 0.3)
    got, hit, _ = w.kv.get(rng, pop, f"cands:{category * MARKETS + user.uid % MARKETS}", c0)
    t = cpu.run(got, (0.2 + 0.004 * n) * NS_PER_MS)
    at.cands = (c0, t, hit)
    at.candidates = n
    if cpu.killed_at is not None:
        return _killed(rng, at, cpu)
    t = cpu.run(t, (0.6 + 0.05 * n) * NS_PER_MS * rng.lognormvariate(0.0, 0.12))
    at.prepare = (cpu.began, t)
    if cpu.killed_at is not None:
        return _killed(rng, at, cpu)
    t = _rank(rng, w, at, iso, k, cpu, t, n, category)
    if cpu.killed_at is not None:
        return _killed(rng, at, cpu)
    work = (0.3 + 0.004 * n) * NS_PER_MS * rng.lognormvariate(0.0, 0.2)
    if rng.random() < 0.08:  # a scavenge of the young generation
        work += lognormal_ms(rng, 1.6, 0.4)
    if rng.random() < 0.003:  # a full mark-compact
        work += lognormal_ms(rng, 14.0, 0.3)
    t = cpu.run(t, work)
    at.merge = (cpu.began, t)
    if cpu.killed_at is not None:
        return _killed(rng, at, cpu)
    v0 = t + lognormal_ms(rng, 0.05, 0.3)  # the impression, awaited: the next page dedupes against it
    back, _ = user.obj.call(rng, v0, user.rtt_do, True)
    t = cpu.run(back, lognormal_ms(rng, 0.08, 0.3))
    at.view = (v0, t)
    at.server = (arrive, t + lognormal_ms(rng, 0.12, 0.3))
    return at


def _killed(rng: random.Random, at: Attempt, cpu: Cpu) -> Attempt:
    at.killed = True
    end = cpu.killed_at or at.server[0]
    if at.prepare is not None and at.rank is None:
        at.prepare = (at.prepare[0], end)
    at.server = (at.server[0], end + lognormal_ms(rng, 0.3, 0.3))
    return at


def _rank(rng: random.Random, w: World, at: Attempt, iso: Isolate, slot: int, cpu: Cpu, t: float, n: int,
          category: int) -> float:
    pop = POPS[at.pop]
    region = nearest_region(pop)
    failover = "ranker-region-failover" in w.parts and 0.25 * w.run_ns <= t < 0.8 * w.run_ns
    moved = failover and region == w.failed_region
    if moved:
        region = 1 - region
    rtt = region_rtt(pop, region)
    c0 = t + lognormal_ms(rng, 0.05, 0.3)
    resets = w.resets.get((at.pop, slot), [])
    reset = bisect.bisect_right(resets, c0) > bisect.bisect_right(resets, iso.conn_opened)
    drained = moved and iso.conn_opened < 0.25 * w.run_ns  # the failed region's front ends are gone
    if iso.conn_ready is None or c0 >= iso.conn_until or reset or drained:  # TCP + TLS 1.3 to the region's LB
        iso.conn_opened = c0
        iso.conn_ready = c0 + net_ms(rng, rtt) + net_ms(rng, rtt) + lognormal_ms(rng, 1.0, 0.3)
        iso.conn_until = c0 + rng.expovariate(1 / 900.0) * NS_PER_S
    send = max(c0, iso.conn_ready) + 0.002 * n * NS_PER_MS
    arrive = send + net_ms(rng, rtt) / 2
    hosts = [h for h in range(len(w.hosts)) if w.hosts[h].region == region]
    hid = hosts[rng.randrange(len(hosts))]
    served = rank(rng, w.hosts[hid], hid, arrive, n)
    back = served.end + net_ms(rng, rtt) / 2 + 0.001 * n * NS_PER_MS
    at.rank, at.served, at.rank_failed = (c0, back), served, served.failed
    t = cpu.run(back, (0.1 + 0.003 * n) * NS_PER_MS)
    if served.failed:
        f0 = t + lognormal_ms(rng, 0.05, 0.3)
        got, hit, _ = w.kv.get(rng, at.pop, f"popular:{category}", f0)
        t = cpu.run(got, lognormal_ms(rng, 0.3, 0.3))
        at.fallback = (f0, t, hit)
    assert REGIONS[region]
    return t


def _events(rng: random.Random, w: World, requests: int) -> list[tuple[float, int, int]]:
    """(time, kind, PoP) of every request: pages from the browsers, the crawler's bursts, the sync
    client's bodies."""
    weights = [p.weight for p in POPS]
    out = [(t, PAGE, rng.choices(range(len(POPS)), weights)[0])
           for t in poisson_arrivals(rng, w.s["rps"], requests)]
    if "bot-hot-object" in w.parts:
        t = 0.2 * w.run_ns
        while t < 0.85 * w.run_ns:
            b = t
            for _ in range(rng.randint(20, 40)):
                b += rng.expovariate(1 / 0.002) * NS_PER_S
                out.append((b, BOT, w.bot_pop))
            t += rng.expovariate(1 / 2.0) * NS_PER_S
    if "noisy-isolate-json" in w.parts:
        span = 0.75 * w.run_ns / NS_PER_S
        for t in poisson_arrivals(rng, 20.0, int(20.0 * span)):
            out.append((0.15 * w.run_ns + t, SYNC, w.noisy_pop))
    return sorted(out)


def run_requests(rng: random.Random, w: World, requests: int) -> Iterator[Request]:
    bundles_from = 0.25 * w.run_ns
    for t0, kind, pop in _events(rng, w, requests):
        rum = w.s["rum"] and kind == PAGE
        if kind == BOT:
            user = w.bot
        elif kind == SYNC:
            user = w.new_user(rng, pop, True)
        else:
            user = w.user(rng, pop)
        category = min(CATEGORIES - 1, int(rng.paretovariate(1.2)) - 1)
        big = kind == PAGE and "cpu-limit-kills" in w.parts and t0 >= bundles_from and rng.random() < 0.18
        n = int(min(2000, max(600, 900 * rng.lognormvariate(0.0, 0.4)))) if big else int(
            min(300, max(40, 120 * rng.lognormvariate(0.0, 0.35))))
        body = int(min(12.5e6, max(4e6, 9e6 * rng.lognormvariate(0.0, 0.3)))) if kind == SYNC else 0
        half = net_ms(rng, POPS[pop].rtt_user) / 2 if rum else 0.0
        req = Request([], product=rng.randrange(10_000, 99_999))
        send = t0
        for attempt in range(2):
            at = _invoke(rng, w, kind, pop, send + half, user, n if attempt == 0 else min(n, 200), category,
                         attempt == 1, body)
            req.attempts.append(at)
            end = at.server[1] + (half + 0.2 * NS_PER_MS if rum else 0.0)
            req.fetches.append((send, end))
            if not at.killed or kind != PAGE:
                break
            send = end + lognormal_ms(rng, 200.0, 0.3)  # the page's fetch wrapper: back off, retry lite=1
        if rum:
            req.nav = (t0 - lognormal_ms(rng, 4.0, 0.4), req.fetches[-1][1] + lognormal_ms(rng, 5.0, 0.4))
        yield req
