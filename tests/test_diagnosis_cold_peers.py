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
