"""One request's path through the blind family `vertx-hazelcast` (vertx_hazelcast.py): the world a run
builds (gateway pods and their generations, near caches, the Hazelcast cluster, each pod's Envoy, the
model-server hosts) and the recommendation and history routes, written span by span.
"""

from __future__ import annotations

import heapq
import itertools
import math
import random
from collections.abc import Generator
from dataclasses import dataclass
from typing import Any

from reference_pipeline.simulate import vertx_hazelcast_spans as sp
from reference_pipeline.simulate.trace_table import (
    NS_PER_MS,
    NS_PER_S,
    Stalls,
    TraceTable,
    WorkerPool,
    merge_intervals,
)
from reference_pipeline.simulate.vertx_hazelcast_physics import (
    PARTITIONS,
    RETRY_PAUSE_MS,
    WORKER_POOL,
    Cluster,
    Envoy,
    Inference,
    Loop,
    Member,
    ModelHost,
    NearCache,
    Pod,
    jitter,
    lognormal,
    zgc_stalls,
)
from reference_pipeline.simulate.vertx_hazelcast_write import write_history, write_request

ITEMS = 200_000
NEAR_CACHE = 20_000
_POPULARITY = list(itertools.accumulate(1.0 / (rank + 1) ** 1.3 for rank in range(ITEMS)))
BACKOFF_MS = 40.0
ATTEMPTS = 4


@dataclass
class World:
    """Everything one run's requests share."""

    table: TraceTable
    res: sp.Resources
    parts: frozenset[str]
    run_ns: float
    pods: dict[tuple[int, int], Pod]
    swap_at: list[float | None]  # per pod slot: when the rolling deploy replaced it
    caches: dict[tuple[int, int], NearCache]
    cluster: Cluster
    envoys: dict[tuple[int, int], Envoy]
    hosts: list[ModelHost]
    update: tuple[float, float] | None

    @classmethod
    def build(
        cls,
        rng: random.Random,
        s: dict[str, Any],
        parts: frozenset[str],
        run_ns: float,
        horizon: float,
        seed: int,
        table: TraceTable,
        zgc_pod: int,
        broken_host: int,
    ) -> World:
        res = sp.Resources(table, s["style"], seed)
        n = s["pods"]
        swap_at: list[float | None] = [None] * n
        if "rolling-deploy-cold-jit" in parts:
            swap_at = [(0.12 + 0.8 * k / n) * run_ns for k in range(n)]
        pods, caches, envoys = {}, {}, {}
        for gen in (0, 1):
            for k in range(n):
                if gen and swap_at[k] is None:
                    continue
                leak = (
                    0.2 * run_ns if ("zgc-allocation-stalls" in parts and k == zgc_pod and not gen) else None
                )
                stalls = Stalls(merge_intervals(zgc_stalls(rng, horizon, leak, run_ns)))
                loops = [Loop(stalls) for _ in range(2 * s["cores"])]
                born = swap_at[k] if gen else 0.0
                pods[(gen, k)] = Pod(loops, WorkerPool(WORKER_POOL), stalls, born or 0.0, bool(gen))
                caches[(gen, k)] = NearCache(NEAR_CACHE, list(range(NEAR_CACHE)) if not gen else [])
                envoys[(gen, k)] = Envoy(s["hosts"], s["max_pending"])
        members = []
        for _ in range(s["members"]):
            pauses = []
            t = rng.expovariate(1 / 3.0) * NS_PER_S
            while t < horizon:  # the members' own (G1) young pauses
                length = lognormal(rng, 12.0, 0.5)
                pauses.append((t, t + length))
                t += length + rng.expovariate(1 / 3.0) * NS_PER_S
            members.append(Member([0.0] * 8, Stalls(pauses)))
        cluster = Cluster(members, 0.35)
        if "partition-migration" in parts:
            cluster.restart(rng, 1, 0.2 * run_ns, 0.45 * run_ns, 10)
        big = "larger-model" in parts
        delay = 25.0 if "batcher-max-delay" in parts else 0.3
        hosts = [
            ModelHost(
                delay * NS_PER_MS, (3.0 if big else 2.0) * NS_PER_MS, (14.2 if big else 10.5) * NS_PER_MS
            )
            for _ in range(s["hosts"])
        ]
        if "outlier-ejection" in parts:
            hosts[broken_host].broken_from = 0.3 * run_ns
        update = None
        if "near-cache-invalidation" in parts:
            update = (0.3 * run_ns, 0.55 * run_ns)
            for key, cache in caches.items():
                if key[0] == 0:
                    cache.invalidate(*update)
        return cls(table, res, parts, run_ns, pods, swap_at, caches, cluster, envoys, hosts, update)

    def pod_at(self, rng: random.Random, t: float) -> tuple[int, int]:
        """The Service picks a ready pod at random (a replaced pod's new JVM once it is ready)."""
        k = rng.randrange(len(self.swap_at))
        swap = self.swap_at[k]
        return (1 if swap is not None and t >= swap else 0), k

    def update_jobs(self, rng: random.Random) -> list[float]:
        """The bulk putAll's operations: a chunk of entries per partition, ~4 ms each, keeping the
        members' partition threads ~60 % busy on average (a thread holding more partitions, more)."""
        if self.update is None:
            return []
        a, b = self.update
        rate = 0.6 / 0.004 * 8 * len(self.cluster.members)
        out, t = [], a
        while t < b:
            t += rng.expovariate(rate / NS_PER_S)
            out.append(t)
        return out

    def update_job(self, rng: random.Random, t: float) -> None:
        partition = rng.randrange(PARTITIONS)
        self.cluster.members[self.cluster.owner(partition, t)].op(partition, t, lognormal(rng, 3.6, 0.4))


def _cpu(pod: Pod, rng: random.Random, median_ms: float, sigma: float = 0.3) -> float:
    return lognormal(rng, median_ms, sigma) * pod.jit()


def _jdbc_ms(rng: random.Random, median_ms: float) -> float:
    ms = median_ms * jitter(rng, 0.35)
    if rng.random() < 0.01:  # a cold page, a lock wait, a plan flip: the odd slow statement
        ms += min(400.0, 15.0 * rng.paretovariate(1.5))
    return ms * NS_PER_MS


Steps = Generator[float, None, None]


def _blocking(pod: Pod, rng: random.Random, t: float, median_ms: float) -> tuple[float, float, int]:
    """A job through executeBlocking: it waits for a worker (FIFO), runs the query: (start, end,
    worker thread)."""
    start = pod.stalls.settle(pod.pool.acquire(t))
    end = pod.stalls.run(start + _jdbc_ms(rng, median_ms), lognormal(rng, 0.05, 0.3))
    pod.pool.release(end)
    return start, end, rng.randrange(WORKER_POOL)


def history(world: World, rng: random.Random, t0: float, days: int) -> Steps:
    """The history route: one query through executeBlocking, ~8 ms for the web app's 30 days, ~60 ms
    for a year (what the new mobile release asks for)."""
    gen, k = world.pod_at(rng, t0)
    pod = world.pods[(gen, k)]
    loop_i = rng.randrange(len(pod.loops))
    loop = pod.loops[loop_i]
    t = yield t0 + lognormal(rng, 0.12, 0.3)
    root_s, parsed = loop.run(t, _cpu(pod, rng, 0.1))
    t = yield parsed + lognormal(rng, 0.02, 0.3)
    q_s, q_e, worker = _blocking(pod, rng, t, 60.0 if days > 30 else 8.0)
    t = yield q_e + lognormal(rng, 0.02, 0.3)
    _, root_e = loop.run(t, _cpu(pod, rng, 0.25))
    write_history(
        world.table,
        world.res,
        gen,
        k,
        loop_i,
        (t0, root_e + lognormal(rng, 0.08, 0.3)),
        (root_s, root_e),
        (q_s, q_e),
        worker,
        rng.randrange(10**7),
        days,
    )


def _fetch(
    world: World, rng: random.Random, t: float, keys: list[int], per_key_ms: float
) -> Generator[float, None, tuple[float, int]]:
    """A Hazelcast call: keys on migrating partitions are tried again after the retry pause;
    (when the last reply is back, retries)."""
    retries = 0
    while True:
        end, again = world.cluster.call(rng, t, keys, per_key_ms)
        if not again or retries >= 5:
            return end, retries
        retries += 1
        keys = again
        t = yield end + RETRY_PAUSE_MS * NS_PER_MS


def _score(
    world: World, rng: random.Random, key: tuple[int, int], loop: Loop, pod: Pod, t: float
) -> Generator[float, None, list[sp.Attempt]]:
    """ModelInfer through Envoy, retried with exponential backoff on UNAVAILABLE / INTERNAL."""
    envoy = world.envoys[key]
    attempts = []
    for n in range(ATTEMPTS):
        start = loop.run(t, _cpu(pod, rng, 0.06))[1]
        at_envoy = yield start + lognormal(rng, 0.08, 0.3)
        if not envoy.admit(at_envoy):
            e_end = at_envoy + lognormal(rng, 0.05, 0.3)
            t = yield e_end + lognormal(rng, 0.05, 0.3)
            end = loop.run(t, _cpu(pod, rng, 0.03))[1]
            attempts.append(sp.Attempt(start, end, "overflow", envoy=(at_envoy, e_end)))
        else:
            host = envoy.pick(at_envoy)
            envoy.hold(at_envoy)
            arrive = yield at_envoy + lognormal(rng, 0.35, 0.25)
            batch = world.hosts[host].join(rng, arrive)
            if batch is None:
                served = Inference(arrive, arrive, arrive + lognormal(rng, 1.5, 0.3), 1, 0, True)
            else:
                yield batch.dispatch
                served = Inference(arrive, batch.dispatch, batch.end, batch.size, batch.instance)
            server_e = served.end + lognormal(rng, 0.06, 0.3)
            e_end = server_e + lognormal(rng, 0.35, 0.25)
            t = yield e_end
            envoy.done(host, e_end, served.failed)
            t = yield t + lognormal(rng, 0.05, 0.3)
            end = loop.run(t, _cpu(pod, rng, 0.08))[1]
            outcome = "internal" if served.failed else "ok"
            attempts.append(
                sp.Attempt(start, end, outcome, host, (at_envoy, e_end), served, (arrive, server_e))
            )
            if not served.failed:
                return attempts
        t = yield end + BACKOFF_MS * 2**n * rng.uniform(0.5, 1.5) * NS_PER_MS  # a Vert.x timer
    return attempts


def recommend(world: World, rng: random.Random, t0: float) -> Steps:
    key = world.pod_at(rng, t0)
    pod = world.pods[key]
    loop_i = rng.randrange(len(pod.loops))
    loop = pod.loops[loop_i]
    first_use = (
        45.0 * NS_PER_MS * math.exp(-pod.served / 6.0) if pod.cold else 0.0
    )  # class loading, lazy init
    pod.served += 1
    t = yield t0 + lognormal(rng, 0.15, 0.3)
    root_s, t = loop.run(t, _cpu(pod, rng, 0.12))
    consent = None
    if "eventloop-blocking-jdbc" in world.parts and rng.random() < 0.04:
        t = yield t + lognormal(rng, 0.02, 0.3)
        consent = loop.block(t, _jdbc_ms(rng, 45.0) * jitter(rng, 0.3))
        t = consent[1]
    t = yield t + lognormal(rng, 0.02, 0.3)
    user = rng.randrange(10**7)
    q_s, q_e, worker = _blocking(pod, rng, t, 4.5)  # executeBlocking: the user's recent events
    u_s = t + lognormal(rng, 0.01, 0.3)
    u_end, u_retries = yield from _fetch(world, rng, u_s, [10**6 + user], 0.01)  # the user's features
    done = {}
    for when, which in sorted(((u_end, "user"), (q_e + lognormal(rng, 0.02, 0.3), "events"))):
        t = yield when
        done[which] = loop.run(t, _cpu(pod, rng, 0.03))[1]
    user_get, t = (u_s, done["user"]), max(done.values())
    i_s = yield t + lognormal(rng, 0.02, 0.3)
    keys = sorted(set(rng.choices(range(ITEMS), cum_weights=_POPULARITY, k=int(rng.uniform(45, 75)))))
    misses = world.caches[key].lookup(rng, i_s, keys)
    back, retries = i_s + lognormal(rng, 0.02, 0.3), 0
    if misses:
        back, retries = yield from _fetch(world, rng, i_s, misses, 0.004)
    t = yield back
    i_e = loop.run(t, _cpu(pod, rng, 0.002 * (len(keys) - len(misses)) + 0.03 * len(misses) + 0.02))[1]
    t = yield i_e + lognormal(rng, 0.02, 0.3)
    jit = pod.compiled() if pod.cold else None
    a_s, a_e = loop.run(t, _cpu(pod, rng, 1.1, 0.35) + first_use)
    t = yield a_e + lognormal(rng, 0.02, 0.3)
    attempts = yield from _score(world, rng, key, loop, pod, t)
    t = yield attempts[-1].end + lognormal(rng, 0.02, 0.3)
    b_s, b_e = loop.run(t, _cpu(pod, rng, 0.5))
    root_e = loop.run(b_e, _cpu(pod, rng, 0.12))[1]
    stalls = [(a, b) for a, b in pod.stalls.overlapping(root_s, root_e) if b - a > 5 * NS_PER_MS]
    write_request(
        world.table,
        world.res,
        sp.Request(
            key[0],
            key[1],
            loop_i,
            (t0, root_e + lognormal(rng, 0.1, 0.3)),
            (root_s, root_e),
            consent,
            user_get,
            (q_s, q_e),
            worker,
            (i_s, i_e),
            len(keys),
            len(misses),
            retries,
            (a_s, a_e),
            len(keys),
            attempts,
            (b_s, b_e),
            user,
            stalls,
            4 if "larger-model" in world.parts else 3,
            u_retries,
            jit,
        ),
    )


def simulate(world: World, rng: random.Random, events: list[tuple[float, int]]) -> None:
    """Run every request's steps in time order: each step that touches a shared resource (an event
    loop, a pool, a member, Envoy, the batcher) happens when the clock reaches it."""
    heap: list[tuple[float, int, int, Any]] = [(t, n, kind, None) for n, (t, kind) in enumerate(events)]
    heapq.heapify(heap)
    seq = len(heap)
    while heap:
        t, _, kind, steps = heapq.heappop(heap)
        if kind == 2:
            world.update_job(rng, t)
            continue
        try:
            if steps is None:
                steps = (
                    recommend(world, rng, t)
                    if kind == 0
                    else history(world, rng, t, 365 if kind == 3 else 30)
                )
                at = next(steps)
            else:
                at = steps.send(t)
        except StopIteration:
            continue
        seq += 1
        heapq.heappush(heap, (max(at, t), seq, kind, steps))
