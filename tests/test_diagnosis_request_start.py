"""Issue 25: a wait for a worker thread before the handler starts, seen only through the front
proxy's `X-Request-Start` stamp (the proxy itself is not traced): queueing at the service."""

from __future__ import annotations

import heapq

import numpy as np

from tailscope.analysis.diagnosis import diagnose_frame
from tailscope.analysis.diagnosis.request_start import _epoch_ns
from tests.mechanism_frames import TraceBuilder, lognormal

HEADER = "http.request.header.x-request-start"


def _pool_behind_an_untraced_proxy(seed: int, stamped: bool = True):
    """Three instances of eight worker threads each; two bursts at 1.7x their capacity. A request
    waits for a free thread, then its SERVER span starts; the proxy's stamp (ms resolution, in
    seconds) says when it was forwarded."""
    b = TraceBuilder(seed)
    threads = {f"api/{k}": [0.0] * 8 for k in range(3)}
    capacity = 3 * 8 / 12.0 * 1000.0  # requests/s at 12 ms each
    n, rate = 6000, 0.5 * capacity
    span_ms = n / rate * 1000.0
    t, first = 0.0, None
    for _ in range(n):
        burst = any(a <= t < a + 0.05 * span_ms for a in (0.3 * span_ms, 0.7 * span_ms))
        t += b.rng.exponential(1000.0 / (1.7 * capacity if burst else rate))
        first = t if first is None else first
        inst = f"api/{int(b.rng.integers(3))}"
        start = max(t, heapq.heappop(threads[inst]))
        work = lognormal(b.rng, 12.0, 0.25)
        heapq.heappush(threads[inst], start + work)
        b.new_trace()
        attrs = {HEADER: f"t={round((t - first) / 1000.0, 3):.3f}"} if stamped else {}
        root = b.span(None, "GET /v2/items", "Server", inst, start, work, **attrs)
        b.span(root, "load", "Internal", inst, start + 0.1, 0.4 * work)
        b.span(root, "render", "Internal", inst, start + 0.2 + 0.4 * work, 0.5 * work)
    return b.frame()


def test_the_wait_before_the_handler_from_the_proxy_stamp_is_queueing() -> None:
    """Before: nothing reads the stamp, and the handler's own spans show no wait (queueing < 0.5)."""
    result = diagnose_frame(_pool_behind_an_untraced_proxy(3))
    top, found = result.findings[0], [(f.pattern, round(f.confidence, 2)) for f in result.findings]
    assert top.pattern == "queueing" and top.confidence >= 0.5, found
    assert top.span_name == "GET /v2/items" and top.evidence["stats"]["wait_before_handler_from"]
    unstamped = diagnose_frame(_pool_behind_an_untraced_proxy(3, stamped=False))
    assert all(f.confidence < 0.5 for f in unstamped.findings if f.pattern == "queueing")


def test_request_start_stamps_in_any_unit_are_read() -> None:
    assert _epoch_ns("t=1767225600.002") == 1767225600.002 * 1e9
    for text in ("1767225600002", "t=1767225600002000", "1767225600002000000"):
        assert np.isclose(_epoch_ns(text), 1767225600.002e9)
    assert np.isnan(_epoch_ns("soon"))
