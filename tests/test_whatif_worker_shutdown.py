"""Workers that end their span before their request's shutdown (PHP-FPM: the SDK exports the spans at
request shutdown, ~1 ms) take the next request from the backlog that long after the span ends: the
queue before them is still seen (a span that opens as a worker frees, with every worker busy)."""

from __future__ import annotations

import heapq

import numpy as np

from tailscope.analysis.whatif.handlers import handlers
from tailscope.analysis.whatif.levers import Inputs
from tailscope.analysis.whatif.queue_levers import handlers_as_calm
from tailscope.analysis.whatif.retime import layout, request_latency, retime
from tests.hand_frames import MS, hand_frame


def _rows() -> list[tuple]:
    """nginx (instance 0) hands each request to a pod of two workers (instance 1); a worker serves it
    in 10 ms and takes the next 0.8 ms after its span ends. Calm: a request every 20 ms; a burst of
    60 at 5 s waits in the backlog."""
    rows: list[tuple] = []
    sent = sorted([20.0 * k for k in range(300)] + [5000.0] * 60)
    free = [0.0, 0.0]
    for trace, t in enumerate(sent):
        at = heapq.heappop(free)
        began = max(t + 0.1, at)
        rows.append((trace, -1, "nginx", "Server", 0, t, began - t + 10.1))
        rows.append((trace, len(rows) - 1, "GET /similar", "Server", 1, began, 10.0))
        heapq.heappush(free, began + 10.0 + 0.8)
    return rows


def test_a_backlog_before_workers_that_shut_down_after_their_span_is_seen() -> None:
    f = hand_frame(_rows(), instances=("nginx", "php-fpm"))
    h = handlers(f)
    assert h is not None and set(h.slots) == {1}
    x = Inputs(f, layout(f), f.stage, None, [], 0)
    x.handlers = h
    lever = handlers_as_calm(x)
    assert lever is not None
    before = request_latency(f, f.dur, client_side=False) / MS
    after = request_latency(f, retime(f, lever.edit, x.lay).dur, client_side=False) / MS
    assert np.percentile(before, 99) > 200
    assert np.percentile(after, 99) < 11, np.sort(after)[-10:]


def test_a_queue_named_at_another_service_than_the_handlers_seen_is_not_in_sight() -> None:
    """The front's workers queue (seen), but the finding names the backend whose workers an untraced
    client fills (no traced call seen waiting there): the requests of busy stretches still get their
    lever (requests_as_calm), the handler queue's lever answering another service's queue."""
    from tailscope.analysis.whatif.queue_levers import no_queue_in_sight

    f = hand_frame(_rows(), instances=("nginx", "php-fpm"))
    x = Inputs(f, layout(f), f.stage, None, [], 0)
    x.handlers = handlers(f)
    lever = handlers_as_calm(x)
    for service, expected in (("ann-retrieval", True), ("svc", False)):
        x.findings = [{"pattern": "queueing", "confidence": 0.9, "evidence": {"stats": {"service": service}}}]
        assert no_queue_in_sight(x, [lever]) is expected
