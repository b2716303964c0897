"""The backends of the blind family `go-ray` (go_ray.py): the Feast feature server over a sharded Redis
online store (with its offline fallback), and the Ray Serve `ranker` application as a discrete-event
model: proxy actors, the router (a replica with fewer than max_ongoing_requests in flight, else its
FIFO queue), replica actors (one asyncio loop each, blocked while a batch runs), `@serve.batch`
(max_batch_size, batch_wait_timeout_s), the autoscaler (target ongoing requests per replica, an upscale
delay, new replicas that load the model and run slow first batches) and a replica whose GPU freezes.
Times are ns from the run's start.
"""

from __future__ import annotations

import heapq
import math
import random
from collections.abc import Callable
from dataclasses import dataclass, field

from reference_pipeline.simulate.trace_table import NS_PER_MS, NS_PER_S, Stalls, WorkerPool, lognormal_ms

MS = NS_PER_MS


# --- Feast + Redis -----------------------------------------------------------------------------------

@dataclass
class Shard:
    """One Redis primary: a single-threaded event loop that stalls (BGSAVE forks; on a slow disk, AOF
    writes blocking the loop) and a per-command service time."""

    stalls: Stalls
    slow: float = 1.0

    def call(self, rng: random.Random, t: float, keys: int) -> float:
        served = self.stalls.settle(t + lognormal_ms(rng, 0.12, 0.25))
        return served + (0.04 + 0.006 * keys) * self.slow * MS * rng.lognormvariate(0.0, 0.3) + (
            lognormal_ms(rng, 0.12, 0.25))


@dataclass
class FeastCall:
    server: tuple[float, float]
    reads: list[tuple[int, float, float, int]]  # (shard, start, end, keys)
    fallback: tuple[float, float] | None
    writeback: tuple[int, float, float] | None
    pod: int
    missing: int


@dataclass
class Feast:
    pools: list[WorkerPool]
    shards: list[Shard]
    seen: dict[int, float] = field(default_factory=dict)

    def serve(self, rng: random.Random, t: float, pod: int, user: int, items: int, expired_from: float | None,
              item_miss: float) -> FeastCall:
        """One get-online-features: a worker of the pod, one pipelined HMGET per shard (the user's
        row on its shard, the items' rows spread over all), and for rows that are missing or past their
        TTL the offline materialisation call, written back with HSET."""
        pool = self.pools[pod]
        start = pool.acquire(t)
        cur = start + lognormal_ms(rng, 1.1, 0.25)  # parse the request, build entity keys
        home = user % len(self.shards)
        reads = []
        for k, shard in enumerate(self.shards):
            keys = items // len(self.shards) + (1 if k == home else 0)
            end = shard.call(rng, cur, keys)
            reads.append((k, cur, end, keys))
            cur = end + lognormal_ms(rng, 0.05, 0.3)
        expired = expired_from is not None and t >= expired_from and self.seen.get(user, -1.0) < expired_from
        missing = (1 if expired or rng.random() < 0.004 else 0) + (1 if rng.random() < item_miss else 0)
        fallback = writeback = None
        if missing:
            f_end = cur + lognormal_ms(rng, 130.0, 0.45) * (1.0 + 0.3 * (missing - 1))
            fallback = (cur, f_end)
            w_end = self.shards[home].call(rng, f_end + 0.05 * MS, 1)
            writeback = (home, f_end + 0.05 * MS, w_end)
            cur = w_end
        self.seen[user] = t
        end = cur + lognormal_ms(rng, 0.9, 0.3)  # to_dict + JSON response
        pool.release(end)
        return FeastCall((start, end), reads, fallback, writeback, pod, missing)


# --- Ray Serve -----------------------------------------------------------------------------------------

@dataclass
class Attempt:
    """One call to the ranker (one try): what the proxy, router and replica did with it."""

    request: int  # -1: a call from the untraced batch client
    number: int
    send: float
    deadline: float
    proxy: int
    kb: float
    pairs: int
    proxy_start: float = 0.0
    assigned: float = -1.0
    replica: int = -1
    rep_start: float = 0.0
    batch: tuple[float, float, int] = (0.0, 0.0, 0)
    batch_index: int = 0
    rep_end: float = 0.0
    proxy_end: float = 0.0
    end: float = -1.0  # the client span's end
    status: str = "OK"  # OK | DEADLINE_EXCEEDED | UNAVAILABLE


@dataclass
class Replica:
    node: int
    ready: float
    stalls: Stalls
    cold: bool
    in_flight: int = 0
    busy_until: float = 0.0
    pending: list[Attempt] = field(default_factory=list)
    buffered: list[Attempt] = field(default_factory=list)
    timer: int = 0
    batches: int = 0


@dataclass
class ServeConfig:
    max_ongoing: int = 8
    max_batch: int = 8
    wait_s: float = 0.005
    target_ongoing: float = 0.75
    max_replicas: int = 8
    upscale_delay_s: float = 0.5
    per_try_ms: float = 250.0
    attempts: int = 3


class Serve:
    """The ranker application: proxies, router, replicas, autoscaler; `run` plays every attempt."""

    def __init__(self, rng: random.Random, cfg: ServeConfig, replicas: list[Replica],
                 one_way: Callable[[Attempt], float], back: Callable[[Attempt], float],
                 resend: Callable[[Attempt, float], float], autoscale: bool, nodes: int) -> None:
        self.rng, self.cfg, self.replicas, self.nodes = rng, cfg, replicas, nodes
        self.one_way, self.back, self.resend = one_way, back, resend
        self.autoscale = autoscale
        self.queue: list[Attempt] = []
        self.events: list[tuple[float, int, str, object]] = []
        self.seq = 0
        self.done: list[Attempt] = []
        self.samples: list[float] = []
        self.above = 0

    def push(self, t: float, kind: str, payload: object) -> None:
        self.seq += 1
        heapq.heappush(self.events, (t, self.seq, kind, payload))

    def send(self, a: Attempt) -> None:
        self.push(a.send + self.one_way(a), "proxy", a)
        if a.request >= 0:
            self.push(a.deadline, "deadline", a)

    def run(self, attempts: list[Attempt], horizon: float) -> list[Attempt]:
        for a in attempts:
            self.send(a)
        t = 0.0
        while t < horizon:
            self.push(t, "tick", None)
            t += 0.25 * NS_PER_S
        for j, r in enumerate(self.replicas):
            if r.ready > 0:
                self.push(r.ready, "ready", j)
        while self.events:
            t, _, kind, payload = heapq.heappop(self.events)
            getattr(self, f"_on_{kind}")(t, payload)
        return self.done

    # proxy and router
    def _on_proxy(self, t: float, a: Attempt) -> None:
        a.proxy_start = t
        if self.rng.random() < 0.0015:  # the proxy is draining (a rolling restart): UNAVAILABLE
            a.proxy_end, a.status = t + lognormal_ms(self.rng, 0.4, 0.3), "UNAVAILABLE"
            self.push(a.proxy_end + self.back(a), "response", a)
            return
        self._assign(t + lognormal_ms(self.rng, 0.25, 0.3), a)

    def _ready(self, t: float) -> list[int]:
        cap = self.cfg.max_ongoing
        return [j for j, r in enumerate(self.replicas) if r.ready <= t and r.in_flight < cap]

    def _assign(self, t: float, a: Attempt) -> None:
        free = self._ready(t)
        if not free:
            self.queue.append(a)
            return
        pick = free if len(free) < 2 else self.rng.sample(free, 2)  # power of two choices
        j = min(pick, key=lambda k: self.replicas[k].in_flight)
        self.replicas[j].in_flight += 1
        a.assigned, a.replica = t, j
        self.push(t + lognormal_ms(self.rng, 0.35, 0.3), "deliver", a)

    def _drain(self, t: float) -> None:
        while self.queue and self._ready(t):
            self._assign(t + lognormal_ms(self.rng, 0.1, 0.3), self.queue.pop(0))

    # replicas and @serve.batch
    def _on_deliver(self, t: float, a: Attempt) -> None:
        r = self.replicas[a.replica]
        if t < r.busy_until or r.stalls.settle(t) > t:
            r.buffered.append(a)  # the loop is blocked by a running batch (or a frozen GPU call)
            self.push(max(r.busy_until, r.stalls.settle(t)), "free", a.replica)
            return
        a.rep_start = t
        r.pending.append(a)
        self._maybe_launch(t, a.replica)

    def _maybe_launch(self, t: float, j: int) -> None:
        r = self.replicas[j]
        if t < r.busy_until or not r.pending:
            return
        if len(r.pending) >= self.cfg.max_batch:
            self._launch(t, j)
        elif r.timer == 0:
            r.timer = self.seq + 1
            due = max(t, r.pending[0].rep_start + self.cfg.wait_s * NS_PER_S)
            self.push(due, "timer", (j, r.timer))

    def _on_timer(self, t: float, payload: tuple[int, int]) -> None:
        j, token = payload
        r = self.replicas[j]
        if r.timer == token and t >= r.busy_until and r.pending:
            self._launch(t, j)

    def _launch(self, t: float, j: int) -> None:
        r = self.replicas[j]
        batch, r.pending = r.pending[: self.cfg.max_batch], r.pending[self.cfg.max_batch :]
        r.timer = 0
        rng = self.rng
        tokenize = sum(0.12 + 0.0009 * a.pairs for a in batch) * MS  # the tokenizer holds the GIL
        forward = (2.4 + 0.0042 * sum(a.pairs for a in batch)) * MS * rng.lognormvariate(0.0, 0.08)
        if r.cold:  # lazy CUDA module loading + cudnn autotune on the first shapes, then a warm-up decay
            forward *= 1.0 + 3.0 * math.exp(-r.batches / 4.0)
            if r.batches == 0:
                forward += lognormal_ms(rng, 850.0, 0.2)
        if rng.random() < 0.004:  # the replica's Python GC (gen 2) during the batch
            forward += lognormal_ms(rng, 14.0, 0.4)
        start = t
        end = r.stalls.run(start, tokenize + forward)
        for a in batch:
            a.batch, a.batch_index = (start, end, len(batch)), r.batches
        r.batches += 1
        cur = end
        for a in batch:  # results serialised one after the other on the loop (json of top_k items)
            cur += (0.05 + 0.011 * a.kb) * MS * rng.lognormvariate(0.0, 0.2)
            a.rep_end = cur
        r.busy_until = cur
        self.push(cur, "finish", (j, batch))

    def _on_finish(self, t: float, payload: tuple[int, list[Attempt]]) -> None:
        j, batch = payload
        r = self.replicas[j]
        for a in batch:
            r.in_flight -= 1
            a.proxy_end = a.rep_end + (0.45 + 0.004 * a.kb) * MS * self.rng.lognormvariate(0.0, 0.25)
            self.push(a.proxy_end + self.back(a), "response", a)
        self._on_free(t, j)
        self._drain(t)

    def _on_free(self, t: float, j: int) -> None:
        r = self.replicas[j]
        if t < r.busy_until:
            return  # its batch's finish frees it
        if r.stalls.settle(t) > t:
            self.push(r.stalls.settle(t), "free", j)
            return
        for a in r.buffered:
            a.rep_start = t
            r.pending.append(a)
        r.buffered = []
        self._maybe_launch(t, j)

    def _on_ready(self, t: float, j: int) -> None:
        self._drain(t)

    # the client side of an attempt
    def _on_deadline(self, t: float, a: Attempt) -> None:
        if a.end >= 0:
            return
        a.end, a.status = t, "DEADLINE_EXCEEDED"
        self.done.append(a)
        self._retry(t, a)

    def _on_response(self, t: float, a: Attempt) -> None:
        if a.request < 0:  # the batch client's call: no deadline of ours, no retry
            a.end = t
            self.done.append(a)
            return
        if a.end >= 0:  # the client gave up at its deadline: the late response is dropped
            return
        a.end = t
        self.done.append(a)
        if a.status != "OK":
            self._retry(t, a)

    def _retry(self, t: float, a: Attempt) -> None:
        if a.number + 1 >= self.cfg.attempts:
            return
        backoff = 25.0 * 2 ** a.number * self.rng.uniform(0.8, 1.2) * MS  # exponential, 20 % jitter
        send = self.resend(a, t + backoff)
        nxt = Attempt(a.request, a.number + 1, send, send + self.cfg.per_try_ms * MS, a.proxy, a.kb, a.pairs)
        self.send(nxt)

    # the autoscaler: the controller's metrics loop
    def _on_tick(self, t: float, _: object) -> None:
        if not self.autoscale:
            return
        live = [r for r in self.replicas if r.ready <= t]
        ongoing = sum(r.in_flight for r in live) + len(self.queue)
        self.samples = [*self.samples, ongoing][-4:]  # a 1 s look-back
        target = self.cfg.target_ongoing
        desired = math.ceil(sum(self.samples) / len(self.samples) / target)
        self.above = self.above + 1 if desired > len(self.replicas) else 0
        if self.above * 0.25 >= self.cfg.upscale_delay_s and len(self.replicas) < self.cfg.max_replicas:
            for _k in range(min(desired, self.cfg.max_replicas) - len(self.replicas)):
                node = len(self.replicas) % max(1, self.nodes)
                load, init = self.rng.uniform(0.25, 0.4), self.rng.uniform(0.35, 0.5)  # weights, CUDA context
                startup = (load + init) * NS_PER_S
                self.replicas.append(Replica(node, t + startup, Stalls([]), cold=True))
                self.push(t + startup, "ready", len(self.replicas) - 1)
            self.above = 0
