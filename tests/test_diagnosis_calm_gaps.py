"""Large client-server gaps that a calm server never shows are a wait for its worker, not the wire
(accept_queue.calm_gaps, read by network.py). A retrieval server with two workers per instance answers
short searches, and now and then a long embedding (a cache miss upstream) holds the worker: a search
sent meanwhile waits before its handler starts. The wire delays a call whatever the server is doing,
so its large gaps come as often to a calm instance as to a busy one; this wait never does."""

from __future__ import annotations

from tailscope.analysis.diagnosis import network
from tailscope.analysis.diagnosis.model import Context
from tests.mechanism_frames import TraceBuilder, lognormal

N = 3000


def _retrieval(seed: int, wire: bool, workers: int = 1, rps: float = 60.0):
    """Two retrieval instances with `workers` workers each (a call waits for a free one); `wire`: no
    wait for a worker (one per call), but 8 % of calls lose a packet on the way (a 20-60 ms retransmit
    before the server sees the call)."""
    b = TraceBuilder(seed)
    free = {f"ann/{k}": [0.0] * workers for k in range(2)}
    for t in b.arrivals(N, rps):
        b.new_trace()
        app = f"shop/{int(b.rng.integers(3))}"
        root = b.span(None, "GET /similar", "Server", app, t, 0.0)
        cur = t + 0.2
        miss = b.rng.random() < 0.3
        for name, median in ((("Embed", 17.0),) if miss else ()) + (("Search", 2.0),):
            ann = f"ann/{int(b.rng.integers(2))}"
            arrive = cur + lognormal(b.rng, 0.2, 0.2)
            if wire and b.rng.random() < 0.08:
                arrive += float(b.rng.uniform(20.0, 60.0))
            slots = free[ann]
            w = min(range(workers), key=lambda j: slots[j])
            start = arrive if wire else max(arrive, slots[w])
            work = lognormal(b.rng, median, 0.2)
            if not wire:
                slots[w] = start + work
            call = b.span(root, f"ann.v1.Retrieval/{name}", "Client", app, cur, 0.0)
            b.span(call, f"ann.v1.Retrieval/{name}", "Server", ann, start, work)
            cur = start + work + lognormal(b.rng, 0.3, 0.2)
            b.set_end(call, cur)
            cur += 0.1
        b.set_end(root, cur + 0.2)
    return b.frame()


def _network(frame) -> float:
    return max((fd.confidence for fd in network.detect(Context(frame)) if fd.pattern == "network"),
               default=0.0)


def test_gaps_only_while_the_server_is_busy_are_not_the_wire() -> None:
    assert _network(_retrieval(3, wire=False, workers=2, rps=90.0)) < 0.5  # 0.70 before calm_gaps


def test_packet_loss_on_the_way_to_the_same_server_stays_the_network() -> None:
    assert _network(_retrieval(3, wire=True, workers=2, rps=90.0)) >= 0.5
