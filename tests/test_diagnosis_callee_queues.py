"""Queues and cold starts at a callee behind a fan-out: a fixed pool of workers that a burst outruns
(its wait before the handler, accept_queue.py, judged per server; or, untraced, inside the call,
callee_queue.py), and workers restarted mid-run whose first requests are slow (cold_peers.py on the
callee's own SERVER spans)."""

from __future__ import annotations

import heapq

import numpy as np

from tailscope.analysis.diagnosis import diagnose_frame
from tests.mechanism_frames import TraceBuilder, by_pattern, lognormal

N, RPS, WORKERS, WORK_MS = 3000, 120.0, 3, 20.0


def _service(seed: int, traced: bool, burst: bool, recycle: bool = False, rps: float = RPS) -> TraceBuilder:
    """A BFF calls a profile service (fast, never waits) and then a re-ranker with WORKERS sync
    workers (a call waits for a free one, in arrival order). `burst`: for 1.5 s a third of the way
    in, arrivals come at 1.4x what the workers serve. `recycle`: every 200 calls a worker is replaced
    by a new process whose first calls are slow (its model loading, caches filling)."""
    b = TraceBuilder(seed)
    gaps = b.rng.exponential(1000.0 / rps, N)
    arrivals = np.cumsum(gaps)
    if burst:
        t0 = arrivals[N // 3]
        rate = 1.4 * WORKERS * 1000.0 / WORK_MS
        arrivals = np.sort(np.r_[arrivals, t0 + np.sort(b.rng.uniform(0, 1500.0, int(rate * 1.5)))])
    free = [(0.0, k) for k in range(WORKERS)]  # (free at, worker slot)
    pids = list(range(WORKERS))
    served = dict.fromkeys(pids, 1000)  # the workers serving when the trace begins are warm
    for calls, t in enumerate(arrivals, start=1):
        b.new_trace()
        inst = f"bff/{int(b.rng.integers(2))}"
        root = b.span(None, "GET /search", "Server", inst, float(t), 0.0)
        cur = float(t) + 0.1
        prof = lognormal(b.rng, 5.0, 0.3)
        c = b.span(root, "GET", "Client", inst, cur, prof + 0.4)
        b.span(c, "GET /profile", "Server", "profile/0", cur + 0.2, prof)
        cur += prof + 0.5
        at, slot = heapq.heappop(free)
        begin = max(at, cur + 0.3)
        if recycle and calls % 200 == 0:  # this slot's worker is replaced: a new process, cold
            pids[slot] = max(pids) + 1
            served[pids[slot]] = 0
        pid = pids[slot]
        work = lognormal(b.rng, WORK_MS, 0.2) + (150.0 * np.exp(-served[pid] / 4.0) if recycle else 0.0)
        served[pid] += 1
        heapq.heappush(free, (begin + work, slot))
        end = begin + work + 0.3
        call = b.span(root, "POST", "Client", inst, cur, end - cur)
        if traced:
            b.span(call, "POST /rerank", "Server", f"rerank/{pid}", begin, work)
        render = lognormal(b.rng, 60.0, 0.2) if recycle else 0.5  # the BFF's own work: its request
        b.span(root, "render", "Internal", inst, end + 0.1, render)
        b.set_end(root, end + render + 0.5)
    return b


def test_a_burst_queued_before_one_of_several_servers_is_queueing_there():
    findings = diagnose_frame(_service(1, traced=True, burst=True).frame()).findings
    assert findings[0].pattern == "queueing" and findings[0].confidence >= 0.5, [
        (f.pattern, round(f.confidence, 2)) for f in findings]
    assert "rerank" in findings[0].evidence["summary"]


def test_a_burst_queued_inside_calls_to_an_untraced_server_is_queueing_not_a_slow_dependency():
    findings = diagnose_frame(_service(1, traced=False, burst=True).frame()).findings
    seen = by_pattern(findings)
    assert findings[0].pattern == "queueing" and findings[0].span_name == "POST", seen
    assert seen.get("slow_dependency", 0.0) < 0.5, seen


def test_without_a_burst_an_untraced_server_is_not_a_queue():
    assert by_pattern(diagnose_frame(_service(1, traced=False, burst=False).frame()).findings).get(
        "queueing", 0.0) < 0.5


def test_workers_restarted_mid_run_behind_a_call_are_a_cold_start():
    findings = diagnose_frame(_service(2, traced=True, burst=False, recycle=True, rps=30.0).frame()).findings
    seen = [(f.pattern, round(f.confidence, 2)) for f in findings]
    cold = [f for f in findings if f.pattern == "cold_start" and "peer" in f.evidence["stats"]]
    assert cold and cold[0].confidence >= 0.5, seen
    assert cold[0].evidence["stats"]["peer"].startswith("rerank/")
    assert findings[0].pattern == "cold_start" and by_pattern(findings)["slow_dependency"] < 0.5, seen


def test_a_client_above_the_request_root_calling_two_servers_is_judged_without_error() -> None:
    """A load generator's CLIENT span at the top of each trace (above the request root, so in no
    request) calling one of two servers, each a fixed pool that a burst outruns: the calls are
    judged per server by the request of their SERVER span. Before, the per-server share read the
    client's request (-1 above the root) and the network detector failed on the run (as on
    bench_diagnose's 1 M-span gc-pressure run). What the run's tail is named is not asserted here."""
    b = TraceBuilder(3)
    arrivals = b.arrivals(N, RPS)
    t0 = arrivals[N // 3]
    rate = 1.4 * WORKERS * 1000.0 / WORK_MS
    arrivals = np.sort(np.r_[arrivals, t0 + np.sort(b.rng.uniform(0, 1500.0, int(rate * 1.5)))])
    free = {server: [(0.0, k) for k in range(WORKERS)] for server in ("score", "enrich")}
    for t in arrivals:
        b.new_trace()
        server = "score" if b.rng.random() < 0.6 else "enrich"
        at, slot = heapq.heappop(free[server])
        begin = max(at, float(t) + 0.3)
        work = lognormal(b.rng, WORK_MS, 0.2)
        heapq.heappush(free[server], (begin + work, slot))
        call = b.span(None, "POST", "Client", "loadgen/0", float(t), begin + work + 0.3 - float(t))
        b.span(call, f"POST /{server}", "Server", f"{server}/{slot}", begin, work)
    result = diagnose_frame(b.frame())
    assert not result.errors, result.errors
