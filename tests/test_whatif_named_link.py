"""A faulty link between two named instances whose calls show no wire gap (an actor's ask over a
cluster's remoting: an INTERNAL leaf, its work on another node with no span), on hand-built traces:
the network lever redraws the calls made on the named instances from the other instances' calls of
the same name at about that moment."""

from __future__ import annotations

import numpy as np

from tailscope.analysis.whatif.network_levers import network_p50
from tailscope.analysis.whatif.retime import request_latency, retime
from tests.hand_frames import MS, hand_frame, lever_inputs


def _rows() -> list[tuple]:
    """300 requests over instances a, b, c (round robin): a route asks (2-3 ms); on a and b every
    other ask waits 15-70 ms for a retransmission."""
    rows: list[tuple] = []
    for k in range(300):
        t, base, inst = 50.0 * k, len(rows), k % 3
        ask = 2.0 + (k % 5) * 0.2 + (15.0 + (k % 11) * 5 if inst < 2 and k % 2 else 0.0)
        rows += [(k, -1, "route", "Server", inst, t, ask + 2), (k, base, "ask", "Internal", inst, t + 1, ask)]
    return rows


def test_the_named_instances_calls_take_the_other_instances_times() -> None:
    """Before: no lever (no CLIENT/SERVER pair to read a gap from, no CLIENT call): `network_p50`
    was None."""
    f = hand_frame(_rows(), instances=("a", "b", "c"))
    x = lever_inputs(f)
    finding = {"pattern": "network", "confidence": 1.0, "span_name": "ask",
               "evidence": {"stats": {"service": "svc", "instances": ["a", "b"]}}}
    lever = network_p50(x, finding)
    assert lever is not None and lever.params["calls_redrawn"] == 200
    new = request_latency(f, retime(f, lever.edit, x.lay).dur, client_side=False) / MS
    assert np.percentile(new, 99) <= 2.0 + 0.8 + 2 + 1e-6, np.sort(new)[-5:]


def test_no_instances_named_no_lever() -> None:
    f = hand_frame(_rows(), instances=("a", "b", "c"))
    finding = {"pattern": "network", "confidence": 1.0, "span_name": "ask", "evidence": {"stats": {}}}
    assert network_p50(lever_inputs(f), finding) is None
