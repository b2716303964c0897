"""A caller's own stop-the-world pause is not the wire (caller_stalls.caller_stalled, network's discount).

The mechanism: two of four API pods stop for full collections (30-300 ms, every 0.5-1.5 s). A call whose
reply arrives during a stop is read when the stop ends: the caller's CLIENT span ends late around the
model server's unchanged SERVER span, and the client-server gap grows. Every span the pod has in flight
ends at that moment, and the requests that arrived meanwhile start then. The twin: a slow link on one
pod's node delays 8 % of its replies by 50-250 ms, each on its own; nothing else on the pod happens at
the moments those calls end; nor when the link's queue holds the replies and delivers them at once
(a burst): the requests arriving at the pod are not held."""

from __future__ import annotations

import numpy as np
from mechanism_frames import MS, Pauses, TraceBuilder, by_pattern, diagnosed

from tailscope.analysis.diagnosis.caller_stalls import caller_stalled
from tailscope.analysis.diagnosis.network import large_gaps

PODS = [f"api/{i}" for i in range(4)]


def _api(stalled: bool, seed: int = 3, n: int = 6000, rps: float = 40.0, burst: bool = False):
    b = TraceBuilder(seed)
    until = n / rps * 1000.0 + 2000.0
    stops: dict[str, list[tuple[float, float]]] = {}
    for pod in PODS[:2] if stalled or burst else ():
        at = float(b.rng.uniform(0, 2000))
        while at < until:
            length = float(b.rng.uniform(30.0, 300.0))
            stops.setdefault(pod, []).append((at, at + length))
            at += length + float(b.rng.uniform(500.0, 1500.0))
    pauses = Pauses(stops if stalled else {})
    link = Pauses(stops if burst else {})  # the replies held in the link's queue, delivered at once
    for t in b.arrivals(n, rps):
        b.new_trace()
        pod = PODS[int(b.rng.integers(len(PODS)))]
        begin = pauses.run(pod, float(t), 0.0)  # an arrival during a stop is taken when it ends
        root = b.span(None, "POST /score", "Server", pod, begin, 0.0)
        sent = pauses.run(pod, begin, 2.0)
        call = b.span(root, "POST /predict", "Client", pod, sent, 0.0)
        answer = float(b.rng.lognormal(np.log(40.0), 0.3))
        b.span(call, "predict", "Server", f"model/{int(b.rng.integers(3))}", sent + 0.5, answer)
        back = sent + 0.5 + answer + 0.5
        if not stalled and pod == PODS[0] and b.rng.random() < 0.08:
            back += float(b.rng.uniform(50.0, 250.0))  # the slow link delays this reply alone
        read = pauses.run(pod, link.run(pod, back, 0.01), 0.0)
        b.set_end(call, read)
        b.set_end(root, pauses.run(pod, read, 1.0))
    return b.frame()


def _gaps(f):
    srv = np.nonzero((f.kind == 2) & (f.parent >= 0))[0]
    cli = f.parent[srv]
    g = (f.dur[cli] - f.dur[srv]).astype(np.float64)
    return cli, large_gaps(g, float(np.median(g))), g


def test_calls_a_stopped_caller_ends_with_its_other_spans_are_the_stop():
    f = _api(stalled=True)
    cli, big, g = _gaps(f)
    assert big.sum() >= 30
    assert float(np.median(g[big])) > 20 * MS
    assert caller_stalled(f, cli, big, g) >= 0.5
    assert by_pattern(diagnosed(_api, True).findings).get("network", 0.0) < 0.5


def test_replies_a_slow_link_delays_one_by_one_stay_the_wire():
    f = _api(stalled=False)
    cli, big, g = _gaps(f)
    assert big.sum() >= 30
    assert caller_stalled(f, cli, big, g) <= 0.15
    assert by_pattern(diagnosed(_api, False).findings).get("network", 0.0) >= 0.5


def test_replies_a_link_delivers_in_bursts_stay_the_wire():
    f = _api(stalled=False, burst=True)
    cli, big, g = _gaps(f)
    assert big.sum() >= 30
    assert caller_stalled(f, cli, big, g) <= 0.15
