"""One instance of three pauses again and again (a heap near its limit), and its one thread drains
the requests that queued during each pause after it: requests accepted well after a pause still
wait. Removing the pauses from the spans they cover leaves that drain; the instance's peers, serving
the same route at the same time, show what its requests take without the pauses."""

from __future__ import annotations

import numpy as np

from tailscope.analysis.whatif import levers as lv
from tailscope.analysis.whatif.engine import _latency
from tailscope.analysis.whatif.peer_levers import no_pauses_as_peers
from tailscope.analysis.whatif.retime import layout
from tests.hand_frames import MS, hand_frame


def _inputs(paused_on: int = 0) -> tuple[lv.Inputs, float]:
    """900 requests 5 ms apart over three instances: 2 ms of parsing, an 8 ms call. From 1.5 s on,
    instance 0 pauses 100 ms every 300 ms; a request it accepts within 150 ms of a pause's start
    waits for the pause and the drain (up to 40 ms after it) before its parse."""
    rows: list[tuple] = []
    pauses = [(1500.0 + 300.0 * k, 1600.0 + 300.0 * k) for k in range(10)]
    for k in range(900):
        t, inst = 5.0 * k, k % 3
        wait = 0.0
        if inst == paused_on:
            for a, b in pauses:
                if a <= t < b + 50.0:
                    wait = (b - t if t < b else 0.0) + 40.0 * max(0.0, 1 - max(t - b, 0.0) / 50.0)
        root = len(rows)
        rows.append((k, -1, "POST /moderate", "Server", inst, t, wait + 10.0))
        rows.append((k, root, "parse", "Internal", inst, t + wait, 2.0))
        rows.append((k, root, "GET verdict", "Client", inst, t + wait + 2.0, 8.0))
    f = hand_frame(rows, instances=("a", "b", "c"))
    lay = layout(f)
    x = lv.Inputs(f, lay, np.full(len(f), -1), None, [])
    x.stalls = (np.full(len(pauses), paused_on, np.int64), np.array([a * MS for a, _ in pauses], np.int64),
                np.array([b * MS for _, b in pauses], np.int64))
    return x, float(np.percentile(f.requests.latency, 99)) / MS


def test_the_drain_behind_one_instances_pauses_goes_with_them() -> None:
    x, before = _inputs()
    assert before > 100
    stalls_only = lv.no_stalls(x)
    assert stalls_only is not None
    left = np.percentile(_latency(x, stalls_only, False), 99) / MS
    assert left > 40, left  # the drain stays
    lever = no_pauses_as_peers(x)
    assert lever is not None and lever.key == "no_gc_stalls_as_peers"
    after = np.percentile(_latency(x, lever, False), 99) / MS
    assert after < 10.5, after


def test_no_peers_no_lever() -> None:
    x, _ = _inputs()
    inst, s, e = x.stalls
    x.stalls = (np.r_[inst, inst + 1, inst + 2], np.r_[s, s, s], np.r_[e, e, e])  # every instance alike
    assert no_pauses_as_peers(x) is None
