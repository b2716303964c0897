"""cold_start on a running process whose data went cold at one moment (cold_after_change.py): a search
service's index is swapped under a memory map; lists not yet in the page cache fault in from the volume
on first touch, popular lists first, so the extra time decays. The twins slow the same scan in the same
moments by another mechanism: a degraded volume for a while (a plateau that stops), arrivals that rise
with the slowdown (a second client's load), or no change at all."""

from __future__ import annotations

import numpy as np

from tailscope.analysis.diagnosis import diagnose_frame
from tests.mechanism_frames import TraceBuilder, by_pattern, lognormal

N, RPS, LISTS, PROBES = 3000, 200.0, 3000, 8
POPULARITY = np.cumsum(1.0 / np.arange(1, LISTS + 1) ** 1.2)
POPULARITY /= POPULARITY[-1]


def _search(seed: int, mode: str) -> TraceBuilder:
    """An API calls `Search` on one of three index servers (SERVER span, a `scan` inside). `mode`:
    `swap` (each server's index swapped at 30-40 % of the run: a list not yet resident costs a 2.6 ms
    read), `plateau` (every scan 12 ms slower from 30 % to 75 % of the run), `load` (the swap, with
    arrivals doubling from 30 %: a second client's traffic), `steady`."""
    b = TraceBuilder(seed)
    rps = RPS
    arrivals = b.arrivals(N, rps)
    if mode == "load":  # twice the arrivals after 30 % of the run
        cut = float(arrivals[int(0.3 * N)])
        extra = cut + np.cumsum(b.rng.exponential(1000.0 / rps, int(0.7 * N)))
        arrivals = np.sort(np.r_[arrivals, extra[extra < arrivals[-1]]])
    end = float(arrivals[-1])
    swap = {j: (0.3 + 0.05 * j) * end for j in range(3)}
    resident: dict[int, set[int]] = {j: set() for j in range(3)}
    for t in arrivals:
        b.new_trace()
        api = f"api/{int(b.rng.integers(4))}"
        root = b.span(None, "GET /similar", "Server", api, t, 0.0)
        cur = t + lognormal(b.rng, 8.0, 0.3)  # the API's own work: not a proxy in front of the index
        j = int(b.rng.integers(3))
        call = b.span(root, "Search", "Client", api, cur, 0.0)
        server = b.span(call, "Search", "Server", f"index/{j}", cur + 0.2, 0.0, service="index")
        work = lognormal(b.rng, 5.0, 0.15)
        if mode in ("swap", "load") and t >= swap[j]:
            probed = set(np.searchsorted(POPULARITY, b.rng.random(PROBES)).tolist())
            cold = probed - resident[j]
            resident[j] |= cold
            work += sum(lognormal(b.rng, 2.6, 0.15) for _ in cold)
        if mode == "plateau" and 0.3 * end <= t < 0.75 * end:
            work += lognormal(b.rng, 12.0, 0.4)
        b.span(server, "scan", "Internal", f"index/{j}", cur + 0.25, work, service="index")
        b.set_end(server, cur + 0.3 + work)
        b.set_end(call, cur + 0.5 + work)
        done = cur + 0.5 + work + lognormal(b.rng, 1.0, 0.3)
        b.span(root, "render", "Internal", api, done, lognormal(b.rng, 1.5, 0.3))
        b.set_end(root, done + 2.0)
    return b


def _cold(findings) -> float:
    return max((f.confidence for f in findings if f.pattern == "cold_start"
                and f.evidence["stats"].get("mechanism", "").startswith("data that went cold")), default=0.0)


def test_an_index_swapped_under_a_running_server_is_a_cold_start_at_its_scan():
    findings = diagnose_frame(_search(3, "swap").frame()).findings
    cold = [f for f in findings if f.pattern == "cold_start"]
    assert cold and cold[0].confidence >= 0.8, [(f.pattern, round(f.confidence, 2)) for f in findings]
    assert findings[0] is cold[0] and cold[0].span_name == "scan"
    assert len(cold[0].evidence["stats"]["onset_instances"]) == 3
    assert by_pattern(findings).get("slow_dependency", 0.0) < 0.5  # the call's tail is the cold scan's


def test_a_slowdown_that_holds_and_stops_is_not_data_gone_cold():
    assert _cold(diagnose_frame(_search(3, "plateau").frame()).findings) < 0.5


def test_a_slowdown_that_comes_with_more_arrivals_is_not_data_gone_cold():
    assert _cold(diagnose_frame(_search(3, "load").frame()).findings) < 0.5


def test_a_steady_search_service_has_no_cold_data():
    assert _cold(diagnose_frame(_search(3, "steady").frame()).findings) < 0.2
