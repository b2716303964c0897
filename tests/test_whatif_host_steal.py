"""A host whose CPU is stolen (a noisy neighbour on the hypervisor): every span's own time on it is
stretched, in bursts, with no pause and no quota period for no_throttling to remove. The fix takes
that host's spans at its peers' speed: each span's own time its quantile among the same span's own
times on the other hosts."""

from __future__ import annotations

import numpy as np

from tailscope.analysis.whatif.engine import evaluate
from tests.hand_frames import hand_frame


def _rows(steal: bool) -> list[tuple]:
    """A request every 10 ms, round robin over three hosts: 1 ms before the forward, the forward
    10-13 ms, 1 ms after. With `steal`, host 2's forward and its own time take 1.5-3.5 times as long."""
    rows: list[tuple] = []
    for k in range(600):
        host = k % 3
        stretch = 1.5 + 0.5 * (k % 5) if steal and host == 2 else 1.0
        work = (10.0 + 0.5 * (k % 7)) * stretch
        t = 10.0 * k
        rows.append((k, -1, "handle", "Server", host, t, work + 2.0 * stretch))
        rows.append((k, len(rows) - 1, "forward", "Internal", host, t + 1.0 * stretch, work))
    return rows


def test_a_host_with_stolen_cpu_takes_its_peers_speed() -> None:
    f = hand_frame(_rows(True), instances=("h0", "h1", "h2"))
    healthy = hand_frame(_rows(False), instances=("h0", "h1", "h2"))
    finding = {"pattern": "cpu_throttling", "confidence": 0.8, "span_name": "forward",
               "evidence": {"stats": {}}}
    result = evaluate(f, [finding])
    fixed = [o for o in result.outcomes if o.key == "host_as_peers"]
    truth = evaluate(healthy, []).measured.p99_ms
    assert result.measured.p99_ms > 2 * truth
    assert fixed, [o.key for o in result.outcomes]  # before: no lever (no quota period to remove)
    assert abs(fixed[0].p99_ms - truth) < 0.05 * truth, (fixed[0].p99_ms, truth)
    assert fixed[0].params["hosts"] == 1
    # the finding naming the host gives the same
    named = dict(finding, evidence={"stats": {"instances": ["h2"]}})
    again = [o for o in evaluate(f, [named]).outcomes if o.key == "host_as_peers"]
    assert again and np.isclose(again[0].p99_ms, fixed[0].p99_ms)


def test_no_slow_host_no_lever() -> None:
    """Every host alike (a throttling finding that the quota's stalls do not show): nothing to take."""
    f = hand_frame(_rows(False), instances=("h0", "h1", "h2"))
    finding = {"pattern": "cpu_throttling", "confidence": 0.8, "span_name": "forward",
               "evidence": {"stats": {}}}
    assert not [o for o in evaluate(f, [finding]).outcomes if o.key == "host_as_peers"]


def test_compute_bound_on_one_host_of_three_takes_its_peers_speed() -> None:
    """The diagnosis reads the stolen host as compute-bound there (its forward slow, nothing waiting):
    named on one of the service's hosts, its peers' speed is the fix; named on every host, none."""
    f = hand_frame(_rows(True), instances=("svc/h0", "svc/h1", "svc/h2"))
    finding = {"pattern": "compute_bound", "confidence": 0.99, "span_name": "forward",
               "evidence": {"stats": {"instances": ["svc/h2"]}}}
    fixed = [o for o in evaluate(f, [finding]).outcomes if o.key == "host_as_peers"]
    assert fixed and fixed[0].params["hosts"] == 1  # before: no lever for compute_bound but forward_x
    every = dict(finding, evidence={"stats": {"instances": ["svc/h0", "svc/h1", "svc/h2"]}})
    assert not [o for o in evaluate(f, [every]).outcomes if o.key == "host_as_peers"]
