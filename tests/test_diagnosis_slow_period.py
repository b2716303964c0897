"""A slow period that covers most of the run is not a lock (stats.slow_spans).

The mechanism: a vector database's shard compacts from a fifth of the run to nine tenths of it, and
every search waits on it (0.15-0.25 s instead of 5 ms). Searches that last longer overlap more, so the
searches in flight rise with their durations, which lock_contention's crowd test reads as a mutex; the
extra time is the call out of the process. lock_contention's check that the slow spans' extra time is
spent in calls split slow from the rest at twice the median, and the median was itself slow: it found
no slow spans and let the lock stand."""

from __future__ import annotations

import numpy as np
from mechanism_frames import TraceBuilder

from tailscope.analysis.diagnosis import diagnose_frame


def test_calls_slow_for_most_of_the_run_are_not_a_lock():
    b = TraceBuilder(11)
    n, rps = 3000, 40.0
    run_ms = n / rps * 1000.0
    for t in b.arrivals(n, rps):
        b.new_trace()
        api = f"api/{b.trace % 2}"
        root = b.span(None, "POST /ask", "Server", api, t, 0.0)
        compacting = 0.2 * run_ms <= t <= 0.9 * run_ms
        work = float(b.rng.uniform(150.0, 250.0)) if compacting else float(b.rng.lognormal(np.log(5.0), 0.2))
        search = b.span(root, "retriever.search", "Internal", api, t + 0.5, work + 1.5)
        call = b.span(search, "Search", "Client", api, t + 1.0, work + 0.6)
        b.span(call, "Search", "Server", f"shard/{b.trace % 3}", t + 1.3, work)
        b.set_end(root, t + work + 3.0)
    result = diagnose_frame(b.frame())
    lock = max((f.confidence for f in result.findings if f.pattern == "lock_contention"), default=0.0)
    assert lock < 0.5, [(f.pattern, round(f.confidence, 2), f.span_name) for f in result.findings]
