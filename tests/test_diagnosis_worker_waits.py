"""queueing where a process's workers are all held (worker_waits.py): a thread pool whose threads all
block on asynchronous calls (sync-over-async) starts nothing for a while, every request waits to start
and every call's reply waits to be read, yet the work a thread runs goes to its end unstretched. The
same stretches as a stop-the-world pause stretch the running work across them: gc_pause, as before."""

from __future__ import annotations

import numpy as np

from tailscope.analysis.diagnosis import diagnose_frame
from tailscope.analysis.diagnosis.model import Context
from tailscope.analysis.diagnosis.worker_waits import MECHANISM, ran_through
from tests.mechanism_frames import Pauses, TraceBuilder, by_pattern, lognormal

N, RPS, PROCESSES = 3000, 150.0, 3


def _stretches(b: TraceBuilder, horizon: float) -> Pauses:
    """Per process, from 30 % to 60 % of the run: stretches of 150-300 ms, one every 0.5-0.9 s."""
    out = {}
    for k in range(PROCESSES):
        t, spans = 0.3 * horizon + float(b.rng.uniform(0.0, 300.0)), []
        while t < 0.6 * horizon:
            length = float(b.rng.uniform(150.0, 300.0))
            spans.append((t, t + length))
            t += length + float(b.rng.uniform(500.0, 900.0))
        out[f"api/{k}"] = spans
    return Pauses(out)


def _run_to_end(held: Pauses, inst: str, t: float, work: float) -> tuple[float, float]:
    """(start, end) of `work` ms of a thread's work wanted at `t` where the pool's threads are held in
    `held`: it starts once a thread is free and, once running, runs to its end (a stretch begins only
    when the last running thread has finished its work and blocked)."""
    start = held.run(inst, t, 0.0)
    for a, b in held.spans.get(inst, ()):
        if start < a < start + work:
            start = b
    return start, start + work


def _service(seed: int, starved: bool) -> TraceBuilder:
    """A gateway calls a scoring API (3 processes): a feature read, the model's forward on the
    request's thread (`predict`, ~8 ms), a risk call and a write. `starved`: the stretches hold every
    pool thread (work waits to start, replies wait to be read, running work is not stretched); else
    they stop every thread (running work stretched across them)."""
    b = TraceBuilder(seed)
    arrivals = b.arrivals(N, RPS)
    stretches = _stretches(b, float(arrivals[-1]))
    b.stretches = stretches  # type: ignore[attr-defined]  # for the test that reads them

    def work(inst: str, t: float, ms: float) -> tuple[float, float]:
        if starved:
            return _run_to_end(stretches, inst, t, ms)
        start = stretches.run(inst, t, 0.0)
        return start, stretches.run(inst, start, ms)

    for t in arrivals:
        b.new_trace()
        inst = f"api/{int(b.rng.integers(PROCESSES))}"
        call = b.span(None, "POST /score", "Client", "gw/0", float(t), 0.0, service="gateway")
        start, cur = work(inst, float(t) + 0.3, 0.1)
        root = b.span(call, "POST /score", "Server", inst, start, 0.0, service="score-api")
        for name, ms, is_call in (("GET features", 1.5, True), ("predict", 8.0, False),
                                  ("POST risk", 15.0, True), ("INSERT decision", 2.0, True)):
            if is_call:
                began, _ = work(inst, cur, 0.05)
                end = stretches.run(inst, began + lognormal(b.rng, ms, 0.3), 0.0)  # the reply read late
                b.span(root, name, "Client", inst, began, end - began, service="score-api")
            else:
                began, end = work(inst, cur, lognormal(b.rng, ms, 0.2))
                b.span(root, name, "Internal", inst, began, end - began, service="score-api")
            cur = end
        _, done = work(inst, cur, 0.1)
        b.set_end(root, done)
        b.set_end(call, done + 0.3)
    return b


def test_a_pool_whose_threads_are_all_held_is_queueing_not_a_pause():
    """Before worker_waits: gc_pause >= 0.5 on top (every name slow at once, the process silent)."""
    findings = diagnose_frame(_service(3, starved=True).frame()).findings
    seen = by_pattern(findings)
    waits = [f for f in findings if f.evidence.get("stats", {}).get("mechanism") == MECHANISM]
    assert waits and waits[0].confidence >= 0.5, [(f.pattern, round(f.confidence, 2)) for f in findings]
    assert findings[0].pattern == "queueing", [(f.pattern, round(f.confidence, 2)) for f in findings]
    assert seen.get("gc_pause", 0.0) < 0.5, seen
    assert waits[0].evidence["stats"]["running_work_across_stalls"]["predict"]["seen"] == 0


def test_the_same_stretches_as_a_pause_stay_gc_pause():
    """Twin: the stretches stop every thread, the running forward is stretched across them."""
    findings = diagnose_frame(_service(3, starved=False).frame()).findings
    seen = by_pattern(findings)
    assert seen.get("gc_pause", 0.0) >= 0.5, seen
    waits = [f for f in findings if f.evidence.get("stats", {}).get("mechanism") == MECHANISM]
    assert not waits or waits[0].confidence < 0.5


def test_running_work_is_what_tells_them_apart():
    """The forward's spans across the stretches: none where the threads were held, about its
    concurrency where they were stopped."""

    for starved in (True, False):
        b = _service(4, starved)
        frame = b.frame()
        t_first = min(row[6] for row in b.rows)
        ep = [(frame.instances.index(k), (a - t_first) * 1e6, (z - t_first) * 1e6)
              for k, v in b.stretches.spans.items() for a, z in v]
        ep_inst, t0, t1 = (np.array(x, np.int64) for x in zip(*ep, strict=True))
        ran, told = ran_through(Context(frame), ep_inst, t0, t1)
        assert bool(ran.all()) is starved and bool(ran.any()) is starved, (starved, told)
        assert ("predict" in told) is starved, told
