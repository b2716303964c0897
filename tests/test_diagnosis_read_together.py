"""Large client-server gaps that a stopped caller makes are not the wire (network.read_together).

The mechanism: an orchestrator's process stops (a long collection, 0.5-1 s); the replies its callees
send meanwhile wait in its socket buffers and are read one after the other when it runs again, so its
calls in flight end within a moment of each other although the callees answered apart. The wire
delays each reply on its own: the calls end as spread as the callees answered."""

from __future__ import annotations

import numpy as np
from mechanism_frames import TraceBuilder

from tailscope.analysis.diagnosis.network import large_gaps, read_together


def _calls(paused: bool, seed: int = 4):
    b = TraceBuilder(seed)
    pods = ["orch/0", "orch/1"]
    stops = {p: [(at, at + float(b.rng.uniform(500, 1000))) for at in np.arange(700.0, 60000.0, 3000.0)]
             for p in pods}
    for t in b.arrivals(3000, rps=50.0):
        b.new_trace()
        pod = pods[int(b.rng.integers(2))]
        root = b.span(None, "POST /v1/chat", "Server", pod, t, 0.0)
        answer = float(b.rng.lognormal(np.log(30.0), 0.3))
        call = b.span(root, "search", "Client", pod, t + 1.0, 0.0)
        b.span(call, "Search", "Server", f"db/{int(b.rng.integers(3))}", t + 1.3, answer)
        back = t + 1.3 + answer + 0.3
        if paused:
            for a, e in stops[pod]:
                if a <= back < e:
                    back = e + 0.05 * float(b.rng.random())  # read one after the other on resuming
        elif b.rng.random() < 0.03:
            back += float(b.rng.uniform(200.0, 600.0))  # a retransmission timeout, this reply alone
        b.set_end(call, back)
        b.set_end(root, back + 1.0)
    f = b.frame()
    srv = np.nonzero(f.kind == 2)[0]
    srv = srv[f.parent[srv] >= 0]
    cli = f.parent[srv]
    g = (f.dur[cli] - f.dur[srv]).astype(np.float64)
    return f, cli, srv, large_gaps(g, float(np.median(g))), g


def test_replies_read_together_after_the_callers_stop_are_the_stop():
    f, cli, srv, big, g = _calls(paused=True)
    assert big.sum() >= 20
    assert read_together(f, cli, srv, big, g) >= 0.6


def test_replies_delayed_one_by_one_on_the_wire_are_not():
    f, cli, srv, big, g = _calls(paused=False)
    assert big.sum() >= 20
    assert read_together(f, cli, srv, big, g) <= 0.2
