"""What the blind family `dotnet-onnx` (dotnet_onnx.py) talks to, as one fraud-api pod sees it: Azure
Cache for Redis through StackExchange.Redis' one multiplexed connection, SQL Server through
SqlClient's connection pool (Max Pool Size = 100) and the card network's risk service through
SocketsHttpHandler (MaxConnectionsPerServer = 20) under Polly (300 ms attempt timeout, 2 retries with
exponential back-off and jitter, a circuit breaker per pod).
"""

from __future__ import annotations

import heapq
import random
from collections import deque
from dataclasses import dataclass

from reference_pipeline.simulate.trace_table import NS_PER_MS, NS_PER_S, Stalls, lognormal_ms

REDIS_BYTES_PER_NS = 0.025  # ~25 MB/s through one TLS connection to the cache
ATTEMPT_TIMEOUT = 300 * NS_PER_MS


@dataclass
class RedisTimes:
    enqueued: float
    sent: float
    received: float


class Multiplexer:
    """One ConnectionMultiplexer: commands are written to one socket in order and their replies come
    back in order, so a big reply on the pipe delays every reply queued behind it (head-of-line).
    A cold pod connects (TLS, AUTH, CLIENT SETNAME, the config handshake) on first use."""

    def __init__(self, server: Stalls, connected_at: float | None) -> None:
        self.server = server
        self.connected_at = connected_at
        self.out_free = 0.0
        self.in_free = 0.0

    def command(self, rng: random.Random, t: float, reply_bytes: float) -> RedisTimes:
        if self.connected_at is None:
            self.connected_at = t + lognormal_ms(rng, 45.0, 0.3)
        sent = max(t, self.out_free, self.connected_at) + lognormal_ms(rng, 0.02, 0.3)
        self.out_free = sent
        rtt = lognormal_ms(rng, 0.7, 0.2)
        served = self.server.settle(sent + rtt / 2) + lognormal_ms(rng, 0.03, 0.4)
        reply = max(served + rtt / 2, self.in_free) + reply_bytes / REDIS_BYTES_PER_NS
        self.in_free = reply
        return RedisTimes(t, sent, reply)


class ConnectionPool:
    """A pool of up to `size` connections, handed out first come first served: a free one, else a new
    one (a connect: `open_ms`), else the first to come back. `warm` connections exist at the start."""

    def __init__(self, size: int, warm: int, open_ms: float) -> None:
        self.size, self.open_ms = size, open_ms
        self.free = [0.0] * warm
        self.created = warm
        self.waited = 0

    def acquire(self, rng: random.Random, t: float) -> tuple[float, bool]:
        """(when the caller has a connection, whether it opened a new one)."""
        if self.free and self.free[0] <= t:
            return max(t, heapq.heappop(self.free)), False
        if self.created < self.size:
            self.created += 1
            return t + lognormal_ms(rng, self.open_ms, 0.3), True
        self.waited += 1
        return heapq.heappop(self.free), False

    def release(self, t: float) -> None:
        heapq.heappush(self.free, t)


def sql_ms(rng: random.Random, insert: bool) -> float:
    """One statement on the SQL Server: a round trip and execution; 0.5 % are slow (a plan
    recompile, a page read from disk, a log flush stall)."""
    ms = (1.1 if insert else 1.6) * rng.lognormvariate(0.0, 0.3)
    if rng.random() < 0.005:
        ms += min(150.0, 15.0 * rng.paretovariate(1.5))
    return ms * NS_PER_MS


class Breaker:
    """Polly's circuit breaker: opens when >= 50 % of at least 20 attempts in the last 10 s failed,
    then rejects every call for 30 s."""

    def __init__(self) -> None:
        self.outcomes: deque[tuple[float, bool]] = deque()
        self.failures = 0
        self.open_until = -1.0
        self.opened: list[float] = []

    def is_open(self, t: float) -> bool:
        return t < self.open_until

    def record(self, t: float, failed: bool) -> None:
        self.outcomes.append((t, failed))
        self.failures += failed
        while self.outcomes and self.outcomes[0][0] < t - 10 * NS_PER_S:
            self.failures -= self.outcomes.popleft()[1]
        if not self.is_open(t) and len(self.outcomes) >= 20 and self.failures >= 0.5 * len(self.outcomes):
            self.open_until = t + 30 * NS_PER_S
            self.opened.append(t)
            self.outcomes.clear()
            self.failures = 0


@dataclass
class Attempt:
    start: float
    end: float
    failed: bool
    status: int | None  # HTTP status; None when the attempt timed out


def risk_latency(rng: random.Random, slow: bool, hung: bool) -> float:
    """The card network's risk service (over the internet): healthy ~14 ms with a 1 % tail; slow:
    ~170 ms with a heavy tail (a share past the attempt timeout); hung: no answer at all."""
    if hung:
        return float("inf")
    if slow:
        return lognormal_ms(rng, 170.0, 0.55)
    ms = lognormal_ms(rng, 14.0, 0.3)
    if rng.random() < 0.01:
        ms += lognormal_ms(rng, 60.0, 0.5)
    return ms


class RiskClient:
    """The named HttpClient of one pod: a SocketsHttpHandler pool of 20 connections (a new one pays
    TCP + TLS to the card network) and the pod's breaker. `attempt` is one try through Polly's attempt
    timeout: the CLIENT span covers the wait for a connection and the exchange."""

    def __init__(self, warm: int) -> None:
        self.pool = ConnectionPool(20, warm, 32.0)
        self.breaker = Breaker()

    def attempt(self, rng: random.Random, t: float, slow: bool, hung: bool) -> Attempt:
        got, _new = self.pool.acquire(rng, t)
        answer = got + risk_latency(rng, slow, hung)
        deadline = t + ATTEMPT_TIMEOUT
        if answer > deadline:  # cancelled: the connection is torn down, the pool opens another later
            self.pool.created -= 1
            self.breaker.record(deadline, True)
            return Attempt(t, deadline + lognormal_ms(rng, 0.05, 0.3), True, None)
        self.pool.release(answer)
        self.breaker.record(answer, False)
        return Attempt(t, answer, False, 200)


def backoff(rng: random.Random, retry: int) -> float:
    """Exponential back-off with jitter: ~50 ms, then ~100 ms."""
    return 50.0 * 2 ** retry * rng.uniform(0.5, 1.5) * NS_PER_MS
