"""A forwarding tier's retry loop is not a pause of the tier (proxy_stalls.py): a throttling callee
rejects calls (429, no server span) and tells the client to retry at the next rate window, so the
retried calls of many requests leave the tier together after a long stretch of its "own" time, as the
requests a paused process releases do. The earlier attempts and the backoff between them are the
client's retry policy: left out of the tier's own time."""

from __future__ import annotations

import numpy as np

from tailscope.analysis.diagnosis import proxy_stalls
from tailscope.analysis.diagnosis.frame import SPAN_KINDS
from tailscope.analysis.diagnosis.model import Context
from tests.mechanism_frames import TraceBuilder, lognormal

WINDOW = 250.0  # ms: the callee's rate window; a rejected call is told to retry at the next one


def _throttled_behind_gateway(seed: int = 3):
    b = TraceBuilder(seed=seed)
    times = b.arrivals(3000, 150.0)
    used: dict[int, int] = {}
    for k, t in enumerate(times):
        b.new_trace()
        gw = f"gw/{k % 3}"
        outer = b.span(None, "POST /v1/score", "Server", gw, t, 0.0)
        cur = t + lognormal(b.rng, 0.8, 0.2)
        while True:
            window = int(cur // WINDOW)
            busy = (int(t // 4000) % 3 == 1) and used.get(window, 0) >= 20  # a throttled spell
            if not busy:
                used[window] = used.get(window, 0) + 1
                break
            b.span(outer, "POST /score", "Client", gw, cur, 1.5, http__response__status_code=429)
            cur = (window + 1) * WINDOW + b.rng.uniform(0.0, 0.2)  # Retry-After: the next window
        call = b.span(outer, "POST /score", "Client", gw, cur, 0.0, http__response__status_code=200)
        api = f"api/{k % 4}"
        start = cur + lognormal(b.rng, 0.6, 0.2)
        work = lognormal(b.rng, 30.0, 0.3)
        root = b.span(call, "score", "Server", api, start, work)
        b.span(root, "predict", "Internal", api, start + 0.5, work - 1.0)
        b.set_end(call, start + work + lognormal(b.rng, 0.6, 0.2))
        b.set_end(outer, start + work + 1.5)
    return b.frame()


def test_a_clock_aligned_retry_loop_is_not_a_pause_of_the_tier() -> None:
    found = proxy_stalls.detect(Context(_throttled_behind_gateway()))
    assert all(fd.confidence < 0.5 for fd in found), [(fd.confidence, fd.evidence["summary"]) for fd in found]


def test_answered_calls_of_one_name_one_after_another_are_not_a_retry_loop() -> None:
    """A tier that calls the same route several times in turn (pages, items), each answered: its time
    between them is its own, not a retry policy's."""
    b = TraceBuilder(seed=4)
    for k, t in enumerate(b.arrivals(300, 100.0)):
        b.new_trace()
        gw = f"gw/{k % 2}"
        outer = b.span(None, "GET /v1/page", "Server", gw, t, 0.0)
        cur = t + 0.5
        for _ in range(3):
            call = b.span(outer, "GET /item", "Client", gw, cur, 0.0, http__response__status_code=200)
            work = lognormal(b.rng, 5.0, 0.2)
            b.span(call, "item", "Server", f"api/{k % 3}", cur + 0.3, work)
            b.set_end(call, cur + work + 0.6)
            cur += work + 2.0
        b.set_end(outer, cur)
    frame = b.frame()
    outer = np.nonzero(frame.parent < 0)[0]
    calls = np.nonzero(frame.kind == SPAN_KINDS.index("Client"))[0]
    last = np.zeros(len(frame), np.int64)
    np.maximum.at(last, frame.parent[calls], calls)  # each tier span's last call
    assert (proxy_stalls._retry_loop(Context(frame), outer, last[outer]) == 0).all()
