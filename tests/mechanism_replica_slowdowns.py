"""A gateway calling a pool of model replicas, each serving several requests at once (a prefill step
and a decode step per request), for the tests of a process-wide slowdown's timing
(test_diagnosis_replica_slowdowns.py). With `cause="cold"`, two replicas join a third and half of the
way in and run slower for their first tens of seconds (weights paged in, kernels compiled, caches
empty: 5x at first, decaying with a time constant of 20 s); with `cause="marks"`, every replica runs
3x slower during a concurrent collector's marks (0.3-0.8 s every 2-4 s, all run long)."""

from __future__ import annotations

import numpy as np

from tests.mechanism_frames import TraceBuilder, lognormal


def _marks(b: TraceBuilder, until_ms: float) -> list[tuple[float, float]]:
    t, out = b.rng.uniform(0, 2000), []
    while t < until_ms:
        length = b.rng.uniform(300.0, 800.0)
        out.append((t, t + length))
        t += length + b.rng.uniform(2000.0, 4000.0)
    return out


def model_replicas(seed: int, cause: str = "cold", n: int = 6000, rps: float = 80.0):
    b = TraceBuilder(seed)
    until = n / rps * 1000.0
    joins = {"model/0": 0.0, "model/1": 0.0, "model/2": 0.3 * until, "model/3": 0.5 * until}
    marks = {r: _marks(b, until + 5000.0) for r in joins} if cause == "marks" else {}

    def factor(replica: str, t: float) -> float:
        if cause == "cold":
            return 1.0 + 4.0 * float(np.exp(-(t - joins[replica]) / 20000.0)) if joins[replica] > 0 else 1.0
        return 3.0 if any(a <= t < e for a, e in marks[replica]) else 1.0

    for t in b.arrivals(n, rps):
        b.new_trace()
        live = [r for r, at in joins.items() if t >= at]
        replica = live[int(b.rng.integers(len(live)))]
        api = f"api/{int(b.rng.integers(2))}"
        root = b.span(None, "POST /chat", "Server", api, t, 0.0)
        call = b.span(root, "generate", "Client", api, t + 0.2, 0.0)
        server = b.span(call, "generate", "Server", replica, t + 0.5, 0.0)
        cur = t + 0.6
        for name, median in (("prefill", 15.0), ("decode", 60.0)):
            d = lognormal(b.rng, median, 0.15) * factor(replica, cur)
            b.span(server, name, "Internal", replica, cur, d)
            cur += d + 0.05
        b.set_end(server, cur)
        b.set_end(call, cur + 0.3)
        b.set_end(root, cur + 0.6)
    return b.frame()
