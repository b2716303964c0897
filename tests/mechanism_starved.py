"""A single-worker scorer (three instances, one request at a time each) whose process stops now and
then for 20-60 ms at random moments, for the mechanism tests of reported GC pauses that miss the
stops (test_diagnosis_unreported_stops.py). With `gc="elsewhere"` the runtime reports its own short
collections (2-4 ms, with their durations) at other moments: the stops are not the collector's (a
starved or throttled CPU); with `gc="stops"` the reports are the stops themselves."""

from __future__ import annotations

import numpy as np

from tests.mechanism_frames import Pauses, TraceBuilder, lognormal


def starved_scorer(seed: int, gc: str = "elsewhere", n: int = 4000, rps: float = 90.0):
    b = TraceBuilder(seed)
    insts = [f"scorer/{i}" for i in range(3)]
    until = n / rps * 1000.0 + 2000.0
    stops: dict[str, list[tuple[float, float]]] = {}
    minor: list[tuple[str, float, float]] = []
    for inst in insts:
        t, out = b.rng.uniform(0, 300), []
        while t < until:
            length = b.rng.uniform(20.0, 60.0)
            out.append((t, t + length))
            t += length + b.rng.uniform(150.0, 450.0)
            minor.append((inst, t - b.rng.uniform(40.0, 100.0), 0.0))
        stops[inst] = out
    pauses = Pauses(stops)
    free = dict.fromkeys(insts, 0.0)
    for t in b.arrivals(n, rps):
        b.new_trace()
        inst = insts[int(b.rng.integers(3))]
        start = max(t, free[inst])
        root = b.span(None, "POST /score", "Server", inst, t, 0.0)
        cur = start + 0.05
        for name, median in (("decode", 0.4), ("features", 1.2), ("predict", 3.0), ("encode", 0.3)):
            end = pauses.run(inst, cur, lognormal(b.rng, median, 0.15))
            b.span(root, name, "Internal", inst, cur, end - cur)
            cur = end + 0.02
        b.set_end(root, cur + 0.05)
        free[inst] = cur + 0.05
    if gc == "stops":
        reports = [(inst, a, e) for inst, spans in stops.items() for a, e in spans]
    else:
        reports = [(inst, a, a + b.rng.uniform(2.0, 4.0)) for inst, a, _ in minor]
    return b.frame(gc=reports)


def steady_quota_service(seed: int, gc: str = "elsewhere", n: int = 6000, rps: float = 150.0):
    """Three instances under a steady load whose CPU quota runs out at the same point of a third of
    the 100 ms periods (60 ms in) and refills at the period's end: the stalls' starts and ends both
    keep one phase per instance. With `gc="elsewhere"` the runtime reports its own short collections
    (2-4 ms, with durations) at other moments; with `gc="stops"` it reports the stalls themselves as
    its pauses (a timer-driven collection of fixed length)."""
    from tests.mechanism_frames import sequential_service

    b = TraceBuilder(seed)
    insts = [f"api/{i}" for i in range(3)]
    until = n / rps * 1000.0 + 2000.0
    stops: dict[str, list[tuple[float, float]]] = {}
    for inst in insts:
        phase = b.rng.uniform(0, 100.0)
        ends = np.arange(phase + 100.0, until, 100.0)
        ends = ends[b.rng.random(len(ends)) < 0.33]
        stops[inst] = [(e - 40.0, e) for e in ends]
    sequential_service(b, n, rps, [("decode", "Internal", 1.0, 0.2), ("score", "Internal", 6.0, 0.2),
                                   ("fetch", "Client", 3.0, 0.3), ("encode", "Internal", 1.0, 0.2)],
                       instances=3, pauses=Pauses(stops))
    if gc == "stops":
        reports = [(inst, a, e) for inst, spans in stops.items() for a, e in spans]
    else:
        reports = [(insts[int(b.rng.integers(3))], t, t + b.rng.uniform(2.0, 4.0))
                   for t in np.sort(b.rng.uniform(0, until, 60))]
    return b.frame(gc=reports)
