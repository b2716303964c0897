"""A concurrent collector's marks where the process's work has no spans of its own (diag37, feast-redis
class 2): a Go service whose steps run between its calls, inside the SERVER span and an internal span
holding a fan-out. While a pod marks its leaking heap, its goroutines wait for a P when they wake (the
calls' replies are read late) and their CPU work runs three times slower; the other pods are fine
(gc_assists.own_time_spans). Read before as slow_dependency 0.45 on feast-redis gc-leak s0/s1. A CPU
quota's stops (ending on the period's boundaries) and a slowdown of every pod at once are no marks."""

from __future__ import annotations

import numpy as np
import pytest

from tailscope.analysis.diagnosis import diagnose_frame
from tests.mechanism_frames import TraceBuilder, lognormal

PODS = 4
SLOWED = ("api/0", "api/1")
PERIOD = 100.0


class Runtime:
    """One pod's CPU: `kind` "marks" (its own marks: work 3x slower, a wake waits ~3 ms for a P),
    "quota" (in busy stretches of its own, the quota runs out 45 ms into each 100 ms period: nothing
    runs until the next one) or "fleet" (marks on one schedule shared by every pod)."""

    def __init__(self, rng: np.random.Generator, kind: str, until: float, shared=None) -> None:
        self.rng, self.kind, self.spans = rng, kind, []
        if shared is not None:
            self.spans = shared
            return
        t = rng.uniform(0, 1500)
        while t < until:  # marks, or the busy stretches in which the quota runs out each period
            length = rng.uniform(250, 400)
            if kind == "quota":
                self.spans += [(k * PERIOD + 45.0, (k + 1) * PERIOD)
                               for k in range(int(t / PERIOD), int((t + length) / PERIOD) + 1)]
            else:
                self.spans.append((t, t + length))
            t += length + rng.uniform(1000, 2000)

    def _in(self, t: float):
        return next(((a, b) for a, b in self.spans if a <= t < b), None)

    def wake(self, t: float) -> float:
        span = self._in(t)
        if span is None:
            return t
        return span[1] if self.kind == "quota" else t + lognormal(self.rng, 3.0, 0.6)

    def cpu(self, t: float, work: float) -> float:
        t = self.wake(t) if self.kind == "quota" else t
        span = self._in(t)
        if span is not None and self.kind != "quota":
            return t + 3.0 * work
        if span is None and self.kind == "quota":
            nxt = next(((a, b) for a, b in self.spans if t < a < t + work), None)
            if nxt is not None:
                return nxt[1] + work - (nxt[0] - t)
        return t + work


def go_service(seed: int, kind: str, n: int = 4000, rps: float = 200.0):
    """Four pods; a request: own work, an internal `fetch` span reading four shards in parallel
    (~0.8 ms a call) and merging what came (own work), a `Predict` call (~3 ms), own work. Pods 0 and
    1 run on a `Runtime` of `kind` ("fleet": every pod on one schedule), the others on a healthy one."""
    b = TraceBuilder(seed)
    until = n / rps * 1000.0 + 5000.0
    healthy = Runtime(b.rng, "none", 0.0, shared=[])
    fleet = Runtime(b.rng, "marks", until) if kind == "fleet" else None
    runtimes = {f"api/{k}": (fleet if fleet is not None else
                             Runtime(b.rng, kind, until) if f"api/{k}" in SLOWED else healthy)
                for k in range(PODS)}
    for t in b.arrivals(n, rps):
        b.new_trace()
        inst = f"api/{int(b.rng.integers(PODS))}"
        go = runtimes[inst]
        root = b.span(None, "Score", "Server", inst, t, 0.0)
        fetch_s = go.cpu(t + 0.02, lognormal(b.rng, 0.3, 0.3))
        fetch = b.span(root, "fetch", "Internal", inst, fetch_s, 0.0)
        joined = fetch_s
        for shard in range(4):
            sent = fetch_s + lognormal(b.rng, 0.02, 0.4)
            end = go.wake(sent + lognormal(b.rng, 0.8, 0.3))
            b.span(fetch, "HMGET", "Client", inst, sent, end - sent, db__system="redis",
                   server__address=f"shard-{shard}")
            joined = max(joined, end)
        fetch_e = go.cpu(go.wake(joined), lognormal(b.rng, 0.6, 0.3))
        b.set_end(fetch, fetch_e)
        pred_s = go.cpu(fetch_e, lognormal(b.rng, 0.2, 0.3))
        pred_e = go.wake(pred_s + lognormal(b.rng, 3.0, 0.2))
        b.span(root, "Predict", "Client", inst, pred_s, pred_e - pred_s, rpc__system="grpc")
        b.set_end(root, go.cpu(pred_e, lognormal(b.rng, 0.2, 0.3)))
    return b.frame()


def _marks(findings) -> list:
    return [fd for fd in findings if fd.evidence.get("stats", {}).get("mechanism") == "concurrent mark"]


def test_two_pods_marks_without_work_spans_are_the_collector() -> None:
    result = diagnose_frame(go_service(1, "marks"))
    top = result.findings[0]
    assert top.pattern == "gc_pause" and top.confidence >= 0.5, [(f.pattern, f.confidence)
                                                                  for f in result.findings]
    stats = top.evidence["stats"]
    assert stats["mechanism"] == "concurrent mark" and stats["work_measure"].startswith("exclusive"), stats
    assert set(stats["instances"]) == set(SLOWED), stats


@pytest.mark.parametrize("kind", ["quota", "fleet"])
def test_a_quotas_stops_or_every_pod_at_once_are_no_marks(kind: str) -> None:
    result = diagnose_frame(go_service(1, kind))
    assert all(fd.confidence < 0.5 for fd in _marks(result.findings)), [
        (fd.confidence, fd.evidence["stats"]) for fd in _marks(result.findings)]
