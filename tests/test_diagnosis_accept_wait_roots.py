"""accept_queue.accept_wait on calls whose CLIENT span wraps the request root (the caller is outside
the request: its span has no request, the SERVER span it calls is the root), made to two services:
the per-server path summed each call's wait onto its client's request, -1 for every such call, and
np.bincount raised (network's finding lost on every sampled 1 M-span gc-pressure diagnosis of
bench_diagnose.py; found by helper scale11). Each call's wait goes to its server's request."""

from __future__ import annotations

import numpy as np

from tailscope.analysis.diagnosis.accept_queue import accept_wait
from tailscope.analysis.diagnosis.frame import SPAN_KINDS
from tailscope.analysis.diagnosis.model import Context
from tests.hand_frames import hand_frame


def _two_services():
    rows, big = [], []
    for k in range(160):
        waited = k % 8 == 0  # a long wait before the handler on every eighth call
        gap = 6.0 if waited else 0.2
        client = len(rows)
        rows.append((k, -1, "call", "Client", 0, 10.0 * k, gap + 2.0))
        rows.append((k, client, f"handle{k % 2}", "Server", 1, 10.0 * k + gap, 2.0))
        big.append(waited)
    f = hand_frame(rows)
    srv = np.nonzero(f.kind == SPAN_KINDS.index("Server"))[0]
    f.service = np.where(np.arange(len(f)) % 4 == 3, 1, 0)  # odd calls' servers: a second service
    f.services = ["a", "b"]
    return f, f.parent[srv], srv, np.array(big)


def test_calls_from_outside_the_request_to_two_services_are_judged():
    f, cli, srv, big = _two_services()
    assert (f.request[cli] < 0).all() and (f.request[srv] >= 0).all()
    assert len(np.unique(f.service[srv])) == 2
    strength, _ = accept_wait(Context(f, seed=0), cli, srv, big, 0.5)  # raised ValueError before
    assert 0.0 <= strength <= 1.0
