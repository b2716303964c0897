"""A service spread over locations has far callers whose every call crosses the same long distance:
their gaps are long beside the run's median in every part of the run, however healthy the network is
(usual_paths.usual_path_share, read by network.py). That spread is the topology, not a cause. The
wire's causes show against the path itself: a failover sending some callers' calls farther for a
while, or packets lost on some of a path's calls (a retransmit timer beyond its usual trip)."""

from __future__ import annotations

from tailscope.analysis.diagnosis import network
from tailscope.analysis.diagnosis.model import Context
from tests.mechanism_frames import TraceBuilder, lognormal

N = 3000
RPS = 60.0
# one-way trip (ms) from each location's front end to the model servers' region: two near, two far
TRIP = {"edge/a": 2.0, "edge/b": 4.0, "edge/c": 45.0, "edge/d": 90.0}


def _geo(seed: int, failover: bool = False, loss: bool = False, jitter: bool = False):
    """Four front ends call two model hosts in one region; the reply costs the same trip back.
    `failover`: for the middle half of the run the near front ends' calls go to a far region (80 ms
    each way); `loss`: 6 % of the near front ends' calls lose a packet (a 200 ms retransmit timer);
    `jitter`: one far front end's uplink saturates all run (each way ~60 ms of queueing, exponential)."""
    b = TraceBuilder(seed)
    times = b.arrivals(N, RPS)
    end = float(times[-1])
    for t in times:
        b.new_trace()
        edge = list(TRIP)[int(b.rng.integers(len(TRIP)))]
        trip = TRIP[edge]
        host = f"model/{int(b.rng.integers(2))}"
        near = trip < 10.0
        if failover and near and 0.25 * end <= t <= 0.75 * end:
            trip, host = 80.0, f"model/{2 + int(b.rng.integers(2))}"
        root = b.span(None, "GET /recommend", "Server", edge, t, 0.0)
        cur = t + lognormal(b.rng, 1.0, 0.3)
        out = trip * float(b.rng.uniform(0.97, 1.05))
        back = trip * float(b.rng.uniform(0.97, 1.05))
        if jitter and edge == "edge/c":
            out, back = out + float(b.rng.exponential(60.0)), back + float(b.rng.exponential(60.0))
        if loss and near and b.rng.random() < 0.06:
            out += 200.0
        work = lognormal(b.rng, 6.0, 0.3)
        call = b.span(root, "POST /rank", "Client", edge, cur, 0.0)
        b.span(call, "POST /rank", "Server", host, cur + out, work)
        cur = cur + out + work + back
        b.set_end(call, cur)
        b.set_end(root, cur + lognormal(b.rng, 0.5, 0.3))
    return b.frame()


def _network(frame) -> float:
    return max((fd.confidence for fd in network.detect(Context(frame)) if fd.pattern == "network"),
               default=0.0)


def test_far_callers_every_call_all_run_is_the_topology() -> None:
    assert _network(_geo(1)) < 0.5


def test_a_failover_sending_near_callers_far_for_a_while_stays_the_network() -> None:
    assert _network(_geo(1, failover=True)) >= 0.5


def test_retransmits_on_some_of_a_paths_calls_stay_the_network() -> None:
    assert _network(_geo(1, loss=True)) >= 0.5


def test_a_jittery_link_all_run_is_no_distance_and_stays_the_network() -> None:
    """As steady as the far callers' trips, but its calls spread far apart around their usual gap."""
    assert _network(_geo(1, jitter=True)) >= 0.5
