"""Warm-ups and late scale-outs, on hand-built traces: a cold request's own time (lazy initialisation
before its first child) taken from warm ones, the network time of an instance whose every call waited
for it to start, and the scale-out there before the queue (scaled_out_early)."""

from __future__ import annotations

import numpy as np
import pytest

from tailscope.analysis.whatif import queue_levers as ql
from tailscope.analysis.whatif.cold_levers import prewarmed
from tailscope.analysis.whatif.engine import _latency, inputs
from tailscope.analysis.whatif.handlers import handlers
from tailscope.analysis.whatif.levers import Inputs
from tailscope.analysis.whatif.retime import layout, request_latency, retime
from tests.hand_frames import MS, hand_frame


def test_a_warm_up_requests_own_time_before_its_first_child_is_a_warm_ones() -> None:
    """The first five requests of the instance initialise lazily for 50 ms before their first child
    (no span covers it): pre-warmed, they take a warm request's 1 ms, not only its child's time."""
    rows = []
    for k in range(30):
        t, init = 100.0 * k, 50.0 if k < 5 else 1.0
        rows += [(k, -1, "GET /", "Server", 0, t, init + 2 + 1),
                 (k, 2 * k, "work", "Internal", 0, t + init, 2)]
    f = hand_frame(rows)
    x = Inputs(f, layout(f), f.stage, None, [], 0)
    finding = {"pattern": "cold_start", "evidence": {"stats": {"warmup_requests_per_instance": 5}}}
    lever = prewarmed(x, finding)
    assert lever is not None
    new = request_latency(f, retime(f, lever.edit, x.lay).dur, client_side=False) / MS
    assert new.round(3).tolist() == [4.0] * 30


def _scale_out_rows(old_burst: bool) -> list[tuple]:
    """lb (instance 0) calls api: api-old (1) from the start, api-new (2) from 1 s on, one thread
    each, 5 ms a call, 0.2 ms of network before a free thread takes a call. Twenty calls sent to
    api-new from 900 ms wait for it to start (it takes them back to back; its first ten are cold, 15
    ms). `old_burst`: also calm calls to api-old every 20 ms and a burst of twelve at 2 s that queue for
    its thread."""
    rows: list[tuple] = []

    def call(sent: float, began: float, instance: int, took: float = 5.0) -> None:
        rows.append((len(rows) // 2, -1, "GET /api", "Client", 0, sent, began - sent + took + 0.2))
        rows.append((len(rows) // 2, len(rows) - 1, "GET /api", "Server", instance, began, took))

    began = 1000.0
    for k in range(20):
        took = 15.0 if k < 10 else 5.0
        call(900.0 + 2 * k, began, 2, took)
        began += took + 0.05
    if old_burst:
        for k in range(150):
            if not 1990 <= 20.0 * k <= 2100:
                call(20.0 * k, 20.0 * k + 0.2, 1)
        began = 2000.2
        for _ in range(12):
            call(2000.0, began, 1)
            began += 5.05
    return rows


def _scale_out_frame(old_burst: bool):
    rows = _scale_out_rows(old_burst)
    f = hand_frame(rows, instances=("lb", "api-old", "api-new"))
    f.service = np.array([0 if r[4] == 0 else 1 for r in rows])
    f.services = ["lb", "api"]
    return f


def test_an_instance_whose_every_call_waited_for_it_to_start_has_its_links_network_time() -> None:
    """api-new's calls all waited for it to start, the first one too (no call ended before it: not seen
    to wait for a thread): the network part of their gaps is the link's usual 0.2 ms, not the 100 ms
    and more of the calls not seen to wait on that instance."""
    f = _scale_out_frame(old_burst=True)
    h = handlers(f)
    assert h is not None
    new = f.instance[h.server] == 2
    assert new.sum() == 20
    assert h.net[new].max() / MS == pytest.approx(0.2, abs=0.01)
    assert h.wait(f)[new].min() / MS == pytest.approx(99.8, abs=0.01)


def test_a_late_scale_out_ready_before_the_queue_spreads_the_calls_over_every_instance() -> None:
    f = _scale_out_frame(old_burst=True)
    finding = {"pattern": "cold_start", "confidence": 0.9, "span_name": "GET /api",
               "evidence": {"stats": {"warmup_requests_per_instance": 10, "instances": ["api-new"]}}}
    x = inputs(f, [finding])
    lever = ql.scaled_out_early(x, finding)
    assert lever is not None and lever.params == {"instances_joined_late": 1, "instances": 2}
    assert set(lever.handler_pools.tolist()) == {1, 2}
    before = np.percentile(request_latency(f, f.dur, client_side=True), 99) / MS
    after = np.percentile(_latency(x, lever, client_side=True), 99) / MS
    # as measured: api-new's last call waited 227 ms; spread over both threads from the start, warm,
    # the twenty sent from 900 ms and the burst at 2 s wait at most a few calls' time
    assert before > 150 and after < 40, (before, after)
    # a run where no instance joined mid-run has no such lever
    early = {**finding, "evidence": {"stats": {"warmup_requests_per_instance": 10, "instances": ["api-old"]}}}
    assert ql.scaled_out_early(inputs(f, [early]), early) is None
