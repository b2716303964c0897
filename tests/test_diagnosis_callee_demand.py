"""An untraced callee slow for a while (callee_demand.py): slow by itself (a degraded host: the callers
ask what they always ask) is a slow dependency; slow while its callers send it larger inputs (its
capacity ran short for the work sent: a queue inside it) is no slow callee, a possible cause at most."""

from __future__ import annotations

import heapq

from tailscope.analysis.diagnosis import diagnose_frame
from tests.mechanism_frames import TraceBuilder, by_pattern, lognormal

N, RPS, SLOTS = 2400, 20.0, 4


def _service(seed: int, heavier_inputs: bool, other_peer: bool = False) -> TraceBuilder:
    """A front service calls an untraced engine (SLOTS requests at a time, first come first served;
    its time per request grows with the request's `engine.input_length`). From 40 % to 60 % of the run
    either a fifth of the requests are eight times as long (`heavier_inputs`: the engine's queue
    builds behind them) or the engine's host is degraded (every request 2.5 times slower, inputs as
    always). `other_peer`: meanwhile the calls go to a fallback peer (a replica out): who answers changed,
    not what was asked."""
    b = TraceBuilder(seed)
    free = [0.0] * SLOTS
    for i, t in enumerate(b.arrivals(N, RPS)):
        b.new_trace()
        episode = 0.4 * N <= i < 0.6 * N
        heavy = heavier_inputs and episode and b.rng.random() < 0.2
        units = int(b.rng.integers(50, 150)) * (8 if heavy else 1)
        work = 0.6 * units * lognormal(b.rng, 1.0, 0.2) * (2.5 if episode and not heavier_inputs else 1.0)
        root = b.span(None, "POST /ask", "Server", f"front/{i % 2}", float(t), 0.0)
        send = float(t) + lognormal(b.rng, 2.0, 0.3)
        begin = max(send + 0.5, heapq.heappop(free))
        heapq.heappush(free, begin + work)
        end = begin + work + 0.5
        b.span(root, "engine.run", "Client", f"front/{i % 2}", send, end - send,
               **{"server.address": "engine-b.svc" if other_peer and episode else "engine.svc",
                  "engine.input_length": units, "engine.op": "run"})
        b.set_end(root, end + lognormal(b.rng, 1.0, 0.2))
    return b


def test_a_callee_slow_by_itself_for_a_while_is_a_slow_dependency():
    findings = diagnose_frame(_service(3, heavier_inputs=False).frame()).findings
    assert by_pattern(findings).get("slow_dependency", 0.0) >= 0.5, by_pattern(findings)


def test_a_callee_slow_while_its_callers_send_it_more_is_not_named_slow():
    findings = diagnose_frame(_service(3, heavier_inputs=True).frame()).findings
    seen = by_pattern(findings)
    assert seen.get("slow_dependency", 0.0) < 0.5, seen
    dep = next(f for f in findings if f.pattern == "slow_dependency")
    assert "engine.input_length" in dep.evidence["stats"]["episode_follows_demand"][0]


def test_a_callee_slow_while_its_calls_go_to_another_peer_is_still_a_slow_dependency():
    findings = diagnose_frame(_service(3, heavier_inputs=False, other_peer=True).frame()).findings
    assert by_pattern(findings).get("slow_dependency", 0.0) >= 0.5, by_pattern(findings)
