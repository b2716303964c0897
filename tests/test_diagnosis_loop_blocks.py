"""compute_bound where one request's synchronous step blocks its event loop (loop_blocks.py): every
other request on that process waits behind it; the blocking span lasts the stall and its length
follows its input. A stop-the-world pause of the same lengths, which no span's work fills, stays a
gc_pause."""

from __future__ import annotations

import numpy as np

from tailscope.analysis.diagnosis import diagnose_frame
from tests.mechanism_frames import Pauses, TraceBuilder, by_pattern, lognormal

N, RPS, PROCESSES = 3000, 150.0, 3


def _loop_service(seed: int, blocker: bool, own_span: bool = True) -> TraceBuilder:
    """Node-like processes (one event loop each): parse the query, call a backend, render. On
    process 0 a scraper sends ~2 long queries a second whose parse computes 40-300 ms, growing with
    the query's length (`blocker`), or the same stretches come as pauses nobody's work fills. Without
    `own_span` the parse has no span: it is the server span's own time before its first child (a body
    parsed before the handler's spans start), the query's length an attribute of the server span."""
    b = TraceBuilder(seed)
    arrivals = b.arrivals(N, RPS)
    horizon = float(arrivals[-1])
    at = np.cumsum(b.rng.exponential(500.0, int(horizon / 500.0) + 5))
    at = at[at < horizon]
    lengths = b.rng.integers(300, 1200, len(at))
    cost = np.minimum(300.0, 40.0 * 2 ** ((lengths - 300) / 300)) * b.rng.uniform(0.85, 1.15, len(at))
    loop = Pauses({"bff/0": [(float(a), float(a + c)) for a, c in zip(at, cost, strict=True)]})
    for t in arrivals:
        b.new_trace()
        inst = f"bff/{int(b.rng.integers(PROCESSES))}"
        start = loop.run(inst, t, 0.0)
        length = int(b.rng.integers(3, 60))
        root = b.span(None, "GET /search", "Server", inst, start, 0.0,
                      **({} if own_span else {"query__length": length}))
        cur = loop.run(inst, start + 0.05, 0.0)
        done = loop.run(inst, cur, lognormal(b.rng, 0.2, 0.3))
        if own_span:
            b.span(root, "parse", "Internal", inst, cur, done - cur, query__length=length)
        cur = done
        reply = cur + lognormal(b.rng, 15.0, 0.3)
        end = loop.run(inst, reply, 0.0)  # the reply's callback runs when the loop is free
        b.span(root, "GET profile", "Client", inst, cur, end - cur)
        done = loop.run(inst, end, lognormal(b.rng, 1.0, 0.3))
        b.span(root, "render", "Internal", inst, end, done - end)
        b.set_end(root, done + 0.05)
    if blocker:
        for a, c, n in zip(at, cost, lengths, strict=True):
            b.new_trace()
            root = b.span(None, "GET /search", "Server", "bff/0", float(a) - 0.1, 0.0,
                          **({} if own_span else {"query__length": int(n)}))
            if own_span:
                b.span(root, "parse", "Internal", "bff/0", float(a), float(c), query__length=int(n))
            call = lognormal(b.rng, 15.0, 0.3)
            b.span(root, "GET profile", "Client", "bff/0", float(a + c), call)
            b.set_end(root, float(a + c) + call + 1.0)
    return b


def test_a_step_that_blocks_its_event_loop_is_compute_bound_at_the_step():
    findings = diagnose_frame(_loop_service(2, blocker=True).frame()).findings
    blocks = [f for f in findings if f.pattern == "compute_bound" and f.span_name == "parse"]
    assert blocks and blocks[0].confidence >= 0.5, [(f.pattern, round(f.confidence, 2)) for f in findings]
    assert blocks[0].evidence["stats"]["instances"] == ["bff/0"]
    assert findings[0] is blocks[0]
    seen = by_pattern(findings)
    assert seen.get("gc_pause", 0.0) < 0.5 and seen.get("slow_dependency", 0.0) < 0.5, seen


def test_pauses_that_no_span_fills_are_not_a_blocking_step():
    seen = by_pattern(diagnose_frame(_loop_service(2, blocker=False).frame()).findings)
    assert seen.get("compute_bound", 0.0) < 0.5, seen


def test_a_blocking_step_without_a_span_is_the_server_spans_own_work():
    """The parse has no span: the long stretches of the server span before its first child, ordered
    by its query's length, are the stalls (before: slow_dependency 0.45 on the call, nothing at the
    step)."""
    findings = diagnose_frame(_loop_service(2, blocker=True, own_span=False).frame()).findings
    seen = by_pattern(findings)
    assert findings[0].pattern == "compute_bound" and findings[0].span_name == "GET /search", seen
    assert seen.get("gc_pause", 0.0) < 0.5, seen


def test_pauses_beside_a_server_span_without_children_spans_stay_gc_pause():
    seen = by_pattern(diagnose_frame(_loop_service(2, blocker=False, own_span=False).frame()).findings)
    assert seen.get("compute_bound", 0.0) < 0.5, seen
