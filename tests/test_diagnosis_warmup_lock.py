"""A rolling deploy's new pods run their code slowly at first (interpreted / C1 code until the JIT
has compiled the hot paths): on two cores a pod, their steps wait for a core behind each other, so
a span's time rises with the requests already in it, as a lock's would (first_calls.settle: a
lock_contention finding whose tail excess is mostly a named cold start's warm-up requests is part of
it). The twin holds a real mutex around a step on every pod through the same deploy: its waits fall
on warm requests all run long, and it stays a lock."""

from __future__ import annotations

import numpy as np

from tailscope.analysis.diagnosis import diagnose_frame
from tests.mechanism_frames import TraceBuilder, by_pattern, lognormal

N, RPS, PODS = 4000, 240.0, 4


def _deploy(seed: int, mode: str) -> TraceBuilder:
    """A pod replaced at 30-66 % of the run, two cores each. `mode`: `cold` (each new pod runs its code
    ~5x slower at first, decaying over ~150 requests: a JIT warming), `lock` (warm pods, a mutex around
    `score` on every pod: each request waits for the ones before it), `cold+lock` (both)."""
    b = TraceBuilder(seed)
    arrivals = b.arrivals(N, RPS)
    end = float(arrivals[-1])
    served = {}
    free = {}
    cores: dict[str, list[float]] = {}

    def cpu(inst: str, ready: float, work: float) -> float:
        """Run `work` on the pod's earliest free core (2 a pod) from `ready`: its end."""
        c = cores.setdefault(inst, [0.0, 0.0])
        i = int(np.argmin(c))
        c[i] = max(ready, c[i]) + work
        return c[i]
    for t in arrivals:
        b.new_trace()
        k = int(b.rng.integers(PODS))
        gen = 1 if t >= (0.3 + 0.12 * k) * end else 0
        inst = f"api-{gen}/{k}"
        n = served.get(inst, 0)
        served[inst] = n + 1
        jit = 1.0 + 4.0 * np.exp(-n / 150.0) if (gen == 1 and mode in ("cold", "cold+lock")) else 1.0
        root = b.span(None, "GET /rank", "Server", inst, t, 0.0)
        cur = t + 0.1
        done = cpu(inst, cur, lognormal(b.rng, 3.0, 0.3) * jit)
        b.span(root, "parse", "Internal", inst, cur, done - cur)
        cur = done
        call = lognormal(b.rng, 6.0, 0.3)
        b.span(root, "fetch", "Client", inst, cur, call, server__address="store.db")
        cur += call
        work = lognormal(b.rng, 4.0, 0.25) * jit
        start = cur
        if mode.endswith("lock"):
            start = max(cur, free.get(inst, 0.0))
        done = cpu(inst, start, work)
        if mode.endswith("lock"):
            free[inst] = done
        b.span(root, "score", "Internal", inst, cur, done - cur)
        cur = done
        b.set_end(root, cur + 0.3)
    return b


def test_a_cold_deploy_crowding_its_cores_is_a_cold_start_not_a_lock():
    findings = diagnose_frame(_deploy(7, "cold").frame()).findings
    conf = by_pattern(findings)
    assert findings[0].pattern == "cold_start" and conf["cold_start"] >= 0.8, [
        (f.pattern, round(f.confidence, 2)) for f in findings]
    assert conf.get("lock_contention", 0.0) < 0.5


def test_a_mutex_held_through_a_cold_deploy_stays_a_lock():
    findings = diagnose_frame(_deploy(7, "cold+lock").frame()).findings
    assert by_pattern(findings).get("lock_contention", 0.0) >= 0.8, [
        (f.pattern, round(f.confidence, 2)) for f in findings]
