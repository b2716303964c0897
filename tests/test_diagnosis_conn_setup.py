"""A cost paid once per new connection is the network (diag37, feast-redis class 1): a client that keeps
too few idle connections dials most of its calls, and each dial resolves the peer's name through the
search domains first (a few ms of NXDOMAIN round trips) before the call goes out (conn_setup.py). Read
before as slow_dependency 0.08 beside unexplained_tail 0.11 on feast-redis ndots-dns. A wait for a
connection from a bounded pool sits at the start of the call too, but lengthens with the calls in
flight: it is no set-up; and a pool that dials rarely costs nothing worth naming."""

from __future__ import annotations

import heapq

import pytest

from tailscope.analysis.diagnosis import diagnose_frame
from tests.mechanism_frames import TraceBuilder, by_pattern, lognormal

SHARDS = 3


def dialling_service(seed: int, dial_p: float, dial_ms: float, score_sigma: float = 0.5, n: int = 3000,
                     rps: float = 150.0, lost: int = 0):
    """Four API instances; each request reads three cache shards in parallel (~0.8 ms a call), then
    scores (~3 ms, log-normal with `score_sigma`). A call dials first with probability `dial_p`: a
    `connect` span at its start lasting `dial_ms` (log-normal, sigma 0.2: a fixed number of round
    trips), then the usual exchange. The first `lost` dials lose their lookup's query: +5 s (the
    resolver's timeout)."""
    b = TraceBuilder(seed)
    for t in b.arrivals(n, rps):
        b.new_trace()
        inst = f"api/{int(b.rng.integers(4))}"
        root = b.span(None, "POST /bid", "Server", inst, t, 0.0)
        cur = t + 0.1
        joined = cur
        for shard in range(SHARDS):
            sent = cur + lognormal(b.rng, 0.02, 0.4)
            dial = lognormal(b.rng, dial_ms, 0.2) if b.rng.random() < dial_p else 0.0
            if dial and lost > 0:
                dial, lost = dial + 5000.0, lost - 1
            d = dial + lognormal(b.rng, 0.8, 0.3)
            call = b.span(root, "HMGET", "Client", inst, sent, d, db__system="redis",
                          server__address=f"cache-{shard}")
            if dial:
                b.span(call, "connect", "Client", inst, sent, dial, db__system="redis",
                       server__address=f"cache-{shard}")
            joined = max(joined, sent + d)
        d = lognormal(b.rng, 3.0, score_sigma)
        b.span(root, "score", "Internal", inst, joined + 0.05, d)
        b.set_end(root, joined + 0.05 + d + 0.05)
    return b.frame()


def pooled_service(seed: int, n: int = 3000, rps: float = 330.0, size: int = 3):
    """Two API instances, each with a bounded pool of `size` connections to one store; each request
    makes one call (~5 ms) holding a connection. A call that finds none free waits in a `connect` span
    at its start until one is released: its wait lengthens with the calls ahead of it."""
    b = TraceBuilder(seed)
    free = {f"api/{k}": [0.0] * size for k in range(2)}
    for t in b.arrivals(n, rps):
        b.new_trace()
        inst = f"api/{int(b.rng.integers(2))}"
        root = b.span(None, "POST /bid", "Server", inst, t, 0.0)
        sent = t + 0.1
        got = max(sent, heapq.heappop(free[inst]))
        work = lognormal(b.rng, 5.0, 0.3)
        heapq.heappush(free[inst], got + work)
        call = b.span(root, "SELECT", "Client", inst, sent, got + work - sent, db__system="postgresql",
                      server__address="db")
        if got > sent:
            b.span(call, "connect", "Client", inst, sent, got - sent, db__system="postgresql",
                   server__address="db")
        d = lognormal(b.rng, 3.0, 0.2)
        b.span(root, "score", "Internal", inst, got + work + 0.05, d)
        b.set_end(root, got + work + 0.1 + d)
    return b.frame()


def test_a_dial_on_most_calls_with_a_slow_lookup_is_the_network() -> None:
    result = diagnose_frame(dialling_service(1, dial_p=0.85, dial_ms=6.0))
    seen = by_pattern(result.findings)
    top = result.findings[0]
    assert top.pattern == "network" and top.confidence >= 0.5, seen
    stats = top.evidence["stats"]
    assert stats["mechanism"] == "connection set-up" and top.span_name == "connect", stats
    assert 0.8 <= stats["dial_rate"] <= 0.9 and 5.0 <= stats["setup_p50_ms"] <= 7.0, stats
    assert seen.get("slow_dependency", 0.0) < 0.5, seen


@pytest.mark.parametrize("score_sigma", [0.5, 0.2])
def test_a_pool_that_dials_rarely_names_no_connection_cost(score_sigma: float) -> None:
    """A dial in 3 % of the calls costing 1.2 ms: beside a heavy-tailed step it carries little of the
    tail; in a service with no material tail (p99 < 1.5 x p50, under 3 ms over the body) it carries
    much of a tail that is none."""
    seen = by_pattern(diagnose_frame(dialling_service(1, 0.03, 1.2, score_sigma)).findings)
    assert seen.get("network", 0.0) < 0.5, seen


def test_a_wait_for_a_pooled_connection_is_no_connection_set_up() -> None:
    result = diagnose_frame(pooled_service(1))
    setups = [fd for fd in result.findings
              if fd.evidence.get("stats", {}).get("mechanism") == "connection set-up"]
    assert all(fd.confidence < 0.5 for fd in setups), [(fd.confidence, fd.evidence["stats"]) for fd in setups]
    assert by_pattern(result.findings).get("network", 0.0) < 0.5, by_pattern(result.findings)


def test_one_lost_lookup_among_cheap_dials_is_no_connection_cost() -> None:
    """A dial in 5 % of the calls costing 1.5 ms, and one of them 5 s (a lost DNS query): the fixed
    cost per connection is the 1.5 ms; one timer's 5 s carries the tail alone (network 0.9 before)."""
    result = diagnose_frame(dialling_service(1, 0.05, 1.5, lost=1))
    setups = [fd for fd in result.findings
              if fd.evidence.get("stats", {}).get("mechanism") == "connection set-up"]
    assert all(fd.confidence < 0.5 for fd in setups), [fd.evidence["stats"] for fd in setups]
