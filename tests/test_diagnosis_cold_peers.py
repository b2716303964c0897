"""cold_start at a callee whose spans are not traced (cold_peers.py): a replica that joins mid-run
answers its first calls slowly; the callers' CLIENT spans name it (`net.peer.name`)."""

from __future__ import annotations

import numpy as np

from tailscope.analysis.diagnosis import diagnose_frame
from tests.mechanism_frames import TraceBuilder, by_pattern, lognormal

N, RPS = 3000, 200.0


def _gateway(seed: int, cold: bool) -> TraceBuilder:
    """Gateways call an untraced model server over gRPC, round-robin over its replicas; a third
    replica joins at 40 % of the run, its first executions ~300 ms slower (`cold`), halving every
    few calls, or warm from the start."""
    b = TraceBuilder(seed)
    arrivals = b.arrivals(N, RPS)
    joined = float(arrivals[int(0.4 * N)])
    served = 0
    for turn, t in enumerate(arrivals):
        b.new_trace()
        inst = f"gw/{int(b.rng.integers(4))}"
        root = b.span(None, "POST /check", "Server", inst, t, 0.0)
        cur = t + 0.1
        done = cur + lognormal(b.rng, 3.0, 0.3)
        b.span(root, "decode", "Internal", inst, cur, done - cur)
        replicas = 3 if t >= joined else 2
        peer = turn % replicas
        call = lognormal(b.rng, 12.0, 0.25)
        if peer == 2:
            if cold:
                call += 300.0 * np.exp(-served / 4.0)
            served += 1
        b.span(root, "ModelInfer", "Client", inst, done, call, net__peer__name=f"10.0.0.{40 + peer}")
        b.set_end(root, done + call + 0.2)
    return b


def test_a_replica_that_joins_cold_behind_untraced_calls_is_a_cold_start():
    findings = diagnose_frame(_gateway(4, cold=True).frame()).findings
    cold = [f for f in findings if f.pattern == "cold_start"]
    assert cold and cold[0].confidence >= 0.5, [(f.pattern, round(f.confidence, 2)) for f in findings]
    assert findings[0] is cold[0]
    assert cold[0].evidence["stats"]["peer"] == "net.peer.name=10.0.0.42"
    assert by_pattern(findings).get("slow_dependency", 0.0) < 0.5


def test_a_replica_that_joins_warm_is_not_a_cold_start():
    assert by_pattern(diagnose_frame(_gateway(4, cold=False).frame()).findings).get("cold_start", 0.0) < 0.5


def _replicas(seed: int, mode: str) -> TraceBuilder:
    """An API reads from two untraced database replicas (`server.address`), round-robin; replica 1 is
    out for 1.5 s from 20 % of the run (its calls go to replica 2). `mode`: `restart` (it comes back with
    empty caches: every read from disk at first, ~10x, fewer as its hot pages are read back in),
    `warm` (back as fast as before: a network blip), `ejected` (it was slow before it left, ~6x, and is
    as slow after: an outlier let back, no restart)."""
    b = TraceBuilder(seed)
    arrivals = b.arrivals(N, RPS)
    out = float(arrivals[int(0.2 * N)])
    back = out + 1500.0
    for turn, t in enumerate(arrivals):
        b.new_trace()
        inst = f"api/{int(b.rng.integers(3))}"
        root = b.span(None, "POST /ask", "Server", inst, t, 0.0)
        cur = t + lognormal(b.rng, 2.0, 0.3)
        peer = 1 if out <= t < back else turn % 2
        call = lognormal(b.rng, 12.0, 0.25)
        if peer == 0 and mode == "restart" and t >= back:
            call *= 1.0 + 9.0 * np.exp(-(t - back) / 4000.0)
        if peer == 0 and mode == "ejected":
            call *= 6.0
        b.span(root, "query", "Client", inst, cur, call, server__address=f"pg-replica-{peer}.db")
        b.set_end(root, cur + call + 0.5)
    return b


def test_a_replica_back_from_a_restart_with_cold_caches_is_a_cold_start():
    findings = diagnose_frame(_replicas(6, "restart").frame()).findings
    cold = [f for f in findings if f.pattern == "cold_start"]
    assert cold and cold[0].confidence >= 0.8, [(f.pattern, round(f.confidence, 2)) for f in findings]
    assert findings[0] is cold[0] and cold[0].evidence["stats"]["peer"] == "server.address=pg-replica-0.db"
    assert cold[0].evidence["stats"]["silent_before_s"] >= 1.0
    assert by_pattern(findings).get("slow_dependency", 0.0) < 0.5  # the slow calls are the cold replica's


def test_a_replica_back_warm_from_a_silence_is_not_a_cold_start():
    assert by_pattern(diagnose_frame(_replicas(6, "warm").frame()).findings).get("cold_start", 0.0) < 0.5


def test_a_slow_replica_let_back_after_a_silence_is_not_a_cold_start():
    findings = diagnose_frame(_replicas(6, "ejected").frame()).findings
    assert by_pattern(findings).get("cold_start", 0.0) < 0.5, [(f.pattern, f.confidence) for f in findings]
