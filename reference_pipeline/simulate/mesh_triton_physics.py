"""The machinery of the blind family `mesh-triton` (mesh_triton.py): a Rust process's CPU (a CFS quota,
a noisy neighbour's steal), Envoy's upstream connections (mTLS handshakes) and least-request picks, a
Redis Cluster being resharded (MIGRATE blocking both shards, MOVED / ASK redirects) and Triton's
dynamic batcher (max queue delay, preferred batch sizes, instances sharing a GPU, a cold pod's
CUDA / cuDNN warm-up). Times are float ns from the run's start."""

from __future__ import annotations

import binascii
import random
from dataclasses import dataclass, field

from reference_pipeline.simulate.trace_table import NS_PER_MS, NS_PER_S, Stalls, WorkerPool, lognormal_ms

SLOTS = 16384
PERIOD = 100 * NS_PER_MS  # the CFS period (cpu.cfs_period_us = 100000)


def key_slot(key: str) -> int:
    """Redis Cluster's slot: CRC16 (XMODEM) of the key's hash tag, mod 16384."""
    lo = key.find("{")
    if lo >= 0:
        hi = key.find("}", lo + 1)
        if hi > lo + 1:
            key = key[lo + 1 : hi]
    return binascii.crc_hqx(key.encode(), 0) % SLOTS


def cfs_stalls(demand: list[tuple[float, float]], quota_ms: float) -> list[tuple[float, float]]:
    """Throttled intervals of a cgroup from its CPU demand (time, work ns): in each 100 ms period the
    threads burn the quota as their work arrives (work left over from a throttled period starts the
    next one); once the period's quota is spent every thread stops until the period ends."""
    quota = quota_ms * NS_PER_MS
    per: dict[int, list[tuple[float, float]]] = {}
    for t, work in demand:
        per.setdefault(int(t // PERIOD), []).append((t, work))
    out: list[tuple[float, float]] = []
    backlog = 0.0
    for p in range(max(per) + 1 if per else 0):
        start = p * PERIOD
        chunks = [(start, backlog), *per.get(p, [])]
        if sum(w for _, w in chunks) <= quota:
            backlog = 0.0
            continue

        def burnt(x: float, chunks: list[tuple[float, float]] = chunks) -> float:
            return sum(min(max(0.0, x - t), w) for t, w in chunks)

        lo, hi = start, start + PERIOD
        for _ in range(30):  # the moment the quota runs out
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if burnt(mid) < quota else (lo, mid)
        if hi < start + PERIOD:
            out.append((hi, start + PERIOD))
        backlog = sum(w for _, w in chunks) - burnt(hi)
    return out


@dataclass
class Cpu:
    """One pod's process as its threads see it: stalls (throttled periods), a steal factor on CPU
    work and a scheduling delay each time a task wakes (both ~1 and ~0 on a quiet node)."""

    stalls: Stalls
    rng: random.Random
    steal: float = 1.0
    wake_ms: float = 0.0

    def _wake(self) -> float:
        return lognormal_ms(self.rng, self.wake_ms, 0.9) if self.wake_ms else 0.0

    def settle(self, t: float) -> float:
        return self.stalls.settle(t + self._wake())

    def run(self, t: float, work: float) -> float:
        return self.stalls.run(t + self._wake(), work * self.steal)


@dataclass
class Upstream:
    """A sidecar's connection pool to one upstream cluster: a request reuses a connection unless the
    pool churns (maxRequestsPerConnection: 1, a reset, an idle timeout); a new connection costs TCP +
    an mTLS handshake, the server half on the upstream sidecar's two worker threads."""

    rng: random.Random
    churn: float  # probability a request needs a new connection
    sign_ms: float  # one CertificateVerify signature (the workload key's size)
    server_workers: dict[int, WorkerPool] = field(default_factory=dict)

    def connect(self, t: float, endpoint: int, forced: bool = False) -> tuple[float, bool]:
        """(when the request can be written, whether a handshake happened)."""
        if not forced and self.rng.random() >= self.churn:
            return t, False
        rtt = lognormal_ms(self.rng, 0.12, 0.3)
        t += rtt + lognormal_ms(self.rng, self.sign_ms, 0.35)  # SYN/ACK, ClientHello, client's signature
        pool = self.server_workers.setdefault(endpoint, WorkerPool(2))
        got = pool.acquire(t)
        done = got + lognormal_ms(self.rng, self.sign_ms, 0.35)  # server's certificate + signature
        pool.release(done)
        return done + rtt, True


class LeastRequest:
    """Envoy's LEAST_REQUEST (power of two choices) over endpoints, per sidecar: the in-flight
    requests this sidecar has on each endpoint decide."""

    def __init__(self, rng: random.Random, endpoints: int) -> None:
        self.rng = rng
        self.busy: list[list[float]] = [[] for _ in range(endpoints)]

    def pick(self, t: float, exclude: set[int]) -> int:
        allowed = [e for e in range(len(self.busy)) if e not in exclude] or list(range(len(self.busy)))
        pair = self.rng.sample(allowed, min(2, len(allowed)))
        active = [sum(1 for end in self.busy[e] if end > t) for e in pair]
        return pair[0] if active[0] <= active[-1] else pair[-1]

    def hold(self, endpoint: int, end: float) -> None:
        self.busy[endpoint] = [e for e in self.busy[endpoint][-64:] if e > end - 2 * NS_PER_S] + [end]


@dataclass
class Attempt:
    shard: int
    start: float
    end: float
    reply: str  # "OK", "MOVED <slot> <ip>:6379", "ASK <slot> <ip>:6379"
    asking: bool = False


class RedisCluster:
    """Masters owning slot ranges; each runs one command at a time, so a command waits out a fork or
    a MIGRATE in progress. With `reshard`, slots move one by one from shard 2 to a new shard: MIGRATE
    batches of large feature hashes block the source (and RESTORE the target), a key of the slot in
    flight that already moved answers ASK, a slot moved since the client's last CLUSTER SLOTS answers
    MOVED (the client re-sends to the new owner and refreshes its map)."""

    SOURCE = 2

    def __init__(self, rng: random.Random, shards: int, horizon: float, reshard: bool, clients: int) -> None:
        self.rng, self.shards = rng, shards
        self.owner = [s * shards // SLOTS for s in range(SLOTS)]
        self.moved_at: dict[int, tuple[float, float]] = {}  # slot -> (migration start, done)
        self.refreshed = [0.0] * clients  # each client's slot map is as of this time
        pauses = [[(a, b) for a, b in _forks(rng, horizon)] for _ in range(shards + 1)]
        if reshard:
            source_slots = [s for s in range(SLOTS) if self.owner[s] == self.SOURCE]
            t, k = -rng.uniform(0.0, 0.3) * NS_PER_S, 0
            while t < horizon and k < len(source_slots):
                start = t
                for _batch in range(rng.randint(4, 8)):  # --cluster-pipeline 10 keys per MIGRATE
                    length = lognormal_ms(rng, 110.0, 0.35)
                    pauses[self.SOURCE].append((t, t + length))
                    pauses[shards].append((t + 0.3 * length, t + length))  # RESTORE on the target
                    t += length + lognormal_ms(rng, 1.5, 0.4)
                self.moved_at[source_slots[k]] = (start, t)
                k += 1
        self.blocked = [Stalls(sorted(p)) for p in pauses]
        self.addresses = redis_addresses(shards)

    def _send(self, shard: int, t: float, service_ns: float) -> float:
        rtt = lognormal_ms(self.rng, 0.22, 0.3)
        done = self.blocked[shard].run(t + rtt / 2, service_ns)
        return done + rtt / 2

    def command(self, client: int, key: str, t: float, service_ns: float) -> list[Attempt]:
        """The attempts one command takes (a redirect adds one), each to a shard."""
        slot = key_slot(key)
        target = self.shards
        move = self.moved_at.get(slot)
        believed = target if move and move[1] <= self.refreshed[client] else self.owner[slot]
        actual = self.owner[slot]
        if move and move[1] <= t:
            actual = target
        end = self._send(believed, t, service_ns)
        if believed == actual and not (move and move[0] <= t < move[1]):
            return [Attempt(believed, t, end, "OK")]
        addr = f"{self.addresses[target]}:6379"
        if believed != actual:  # the slot moved: MOVED, re-send to the owner, refresh the map
            self.refreshed[client] = end
            again = self._send(actual, end, service_ns)
            return [Attempt(believed, t, end, f"MOVED {slot} {addr}"), Attempt(actual, end, again, "OK")]
        if self.rng.random() < (t - move[0]) / (move[1] - move[0]):  # this key already went: ASK
            again = self._send(target, end, service_ns)
            return [Attempt(believed, t, end, f"ASK {slot} {addr}"), Attempt(target, end, again, "OK", True)]
        return [Attempt(believed, t, end, "OK")]


def redis_addresses(shards: int = 6) -> list[str]:
    """The masters' addresses (the last one: the master a reshard adds)."""
    return [f"10.52.{3 + s}.{20 + s}" for s in range(shards + 1)]


def _forks(rng: random.Random, horizon: float) -> list[tuple[float, float]]:
    """Healthy noise: an RDB snapshot's fork() stalls a shard for 5-25 ms about once a minute."""
    out = []
    t = rng.uniform(0.0, 60.0) * NS_PER_S
    while t < horizon:
        out.append((t, t + rng.uniform(5.0, 25.0) * NS_PER_MS))
        t += rng.uniform(40.0, 80.0) * NS_PER_S
    return out


@dataclass
class Job:
    """One inference request as Triton sees it: arrival after gRPC decode, candidates, bytes."""

    index: int
    arrive: float
    items: int
    nbytes: int
    queue_start: float = 0.0
    compute_start: float = 0.0
    input_end: float = 0.0
    output_start: float = 0.0
    compute_end: float = 0.0
    batch: int = 0


@dataclass
class Batcher:
    """One Triton pod's dynamic batcher and its model instances (instance_group count on one GPU):
    a free instance takes the queued requests, waiting up to the max queue delay for a preferred
    batch size; two instances on one GPU slow each other down; a cold pod pays CUDA context set-up
    on its first batch, cuDNN autotuning on each new batch shape and a decaying warm-up factor."""

    rng: random.Random
    instances: int
    delay_ms: float
    preferred: tuple[int, ...] = (4, 8)
    max_batch: int = 8
    cold: bool = False
    per_item_ms: float = 0.045

    def compute_ms(self, items: list[int], done: int, shapes: set[int]) -> float:
        padded = sum(-(-n // 64) * 64 for n in items)  # each request's candidates padded to 64
        batch = len(items)
        ms = 2.0 + self.per_item_ms * padded
        ms *= self.rng.lognormvariate(0.0, 0.06)
        if self.cold:
            ms *= 1.0 + 2.5 * 0.93**done
            if done == 0:
                ms += self.rng.uniform(600.0, 900.0)  # CUDA context, lazy module loading
            if batch not in shapes:
                ms += lognormal_ms(self.rng, 150.0, 0.3) / NS_PER_MS  # cudnn.benchmark for the new shape
        shapes.add(batch)
        return ms

    def run(self, jobs: list[Job]) -> None:
        for j in jobs:
            j.queue_start = j.arrive + lognormal_ms(self.rng, 0.02, 0.3)
        jobs.sort(key=lambda j: j.queue_start)
        free = [0.0] * self.instances
        busy: list[tuple[float, float]] = []
        shapes: set[int] = set()
        i, done = 0, 0
        while i < len(jobs):
            k = min(range(self.instances), key=free.__getitem__)
            now = max(free[k], jobs[i].queue_start)
            queued = [j for j in jobs[i : i + 64] if j.queue_start <= now][: self.max_batch]
            if len(queued) < max(self.preferred):
                deadline = jobs[i].queue_start + self.delay_ms * NS_PER_MS
                while len(queued) < self.max_batch and i + len(queued) < len(jobs):
                    nxt = jobs[i + len(queued)]
                    if nxt.queue_start > max(deadline, now) or (
                        len(queued) in self.preferred and nxt.queue_start > now
                    ):
                        break
                    queued.append(nxt)
                    now = max(now, nxt.queue_start)
                if len(queued) not in self.preferred and len(queued) < self.max_batch:
                    now = max(now, deadline)
            batch = queued
            items = sum(j.items for j in batch)
            nbytes = sum(j.nbytes for j in batch)
            shared = 1.6 if any(a <= now < b for a, b in busy[-8:]) else 1.0
            infer = self.compute_ms([j.items for j in batch], done, shapes) * shared * NS_PER_MS
            inp = (0.15 + nbytes * 1.5e-6) * NS_PER_MS * self.rng.lognormvariate(0.0, 0.1)
            out = (0.08 + items * 2e-4) * NS_PER_MS
            end = now + inp + infer + out
            for j in batch:
                j.compute_start, j.input_end = now, now + inp
                j.output_start, j.compute_end, j.batch = now + inp + infer, end, len(batch)
            busy.append((now, end))
            free[k] = end
            done += 1
            i += len(batch)
