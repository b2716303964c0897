"""A threaded web service whose processes each run one interpreter lock (Ruby's GVL, CPython's GIL),
built from the mechanism for the interpreter-lock rule's tests (test_diagnosis_interpreter_lock.py).

Every process serves requests on several threads: a recommendations request queries a database,
renders (CPU), calls a search service and serialises (CPU); now and then an export request
serialises a large page: ~400 ms of CPU. With `holder="lock"`, only the thread holding the lock runs
Ruby: the export's thread holds it for a 100 ms slice at a time, and a thread whose I/O returned or
whose CPU work is due waits for the slice to end (the export itself is never held up). With
`holder="gc"`, the same exports run at the same rate, but the stalls are a collector's stop-the-world
pauses at their own times, which stop every thread of the process, the export's too."""

from __future__ import annotations

import numpy as np

from reference_pipeline.simulate.trace_table import merge_intervals
from tests.mechanism_frames import Pauses, TraceBuilder, lognormal

SLICE_MS = 100.0  # a holder yields the lock after a slice when others wait
EXPORT_CPU_MS = 400.0


def _exports(b: TraceBuilder, until_ms: float, per_s: float) -> list[float]:
    return list(np.cumsum(b.rng.exponential(1000.0 / per_s, int(until_ms / 1000.0 * per_s * 2) + 5)))


def threaded_service(seed: int, holder: str = "lock", n: int = 5000, rps: float = 150.0,
                     exports_per_s: float = 0.4):
    b = TraceBuilder(seed)
    procs = [f"web/{i}" for i in range(3)]
    until = n / rps * 1000.0 + 2000.0
    export_at = {p: [t for t in _exports(b, until, exports_per_s) if t < until - 1000.0] for p in procs}
    held: dict[str, list[tuple[float, float]]] = {}
    gc: dict[str, list[tuple[float, float]]] = {}
    done: dict[tuple[str, float], float] = {}
    for p in procs:
        if holder == "gc":  # a leaking heap: long collections every 0.6-1.2 s, whatever runs
            t, out = b.rng.uniform(0, 800), []
            while t < until:
                length = b.rng.uniform(60.0, 150.0)
                out.append((t, t + length))
                t += length + b.rng.uniform(600.0, 1200.0)
            gc[p] = out
        slices = []
        for t in export_at[p]:  # the export's CPU in slices, the waiters running in between
            cur, left = t + 3.0, EXPORT_CPU_MS * lognormal(b.rng, 1.0, 0.05)
            if holder == "gc":  # no lock: the export runs through, stopped by the collector only
                done[(p, t)] = Pauses(gc).run(p, cur, left)
                continue
            while left > 0:
                run = min(SLICE_MS, left)
                slices.append((cur, cur + run))
                cur, left = cur + run + b.rng.uniform(2.0, 6.0), left - run
            done[(p, t)] = cur
        held[p] = [tuple(x) for x in merge_intervals(sorted(slices))] if holder == "lock" else []
    others = Pauses({p: sorted(held[p] + gc.get(p, [])) for p in procs})  # what every other thread sees
    for p in procs:
        for t in export_at[p]:
            b.new_trace()
            root = b.span(None, "GET /export", "Server", p, t, 0.0)
            q = lognormal(b.rng, 3.0, 0.2)
            b.span(root, "SELECT items", "Client", p, t + 0.5, q)
            cur, end = t + 3.0, done[(p, t)]
            b.span(root, "to_json", "Internal", p, cur, end - cur)
            b.set_end(root, end + 0.3)
    for t in b.arrivals(n, rps):
        b.new_trace()
        p = procs[int(b.rng.integers(3))]
        root = b.span(None, "GET /recs", "Server", p, t, 0.0)
        cur = t + 0.2
        for name, kind, median in (("SELECT users", "Client", 2.0), ("render", "Internal", 4.0),
                                   ("POST /search", "Client", 6.0), ("serialize", "Internal", 1.5)):
            work = lognormal(b.rng, median, 0.25)
            # CPU waits for the lock (or a stop); a call's reply is read when the thread runs again
            end = others.run(p, cur, work) if kind == "Internal" else others.run(p, cur + work, 0.0)
            b.span(root, name, kind, p, cur, end - cur)
            cur = end + 0.05
        b.set_end(root, cur + 0.1)
    return b.frame()
