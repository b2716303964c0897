"""A model server's queue below its model's span: a call's tail that is the callee's own queue is
queueing, not a slow dependency. Triton's trace mode writes `ensemble` (SERVER) > the composing model's
span > `queue`, `compute`: the queue span sits two levels under the SERVER span, where slow_dependency
used to look for a callee's wait only among the SERVER span's direct children (vision-moderation
triton-queueing: slow_dependency 0.99 beside queueing 0.99 on the same time). The same trace with the
model's compute slowed in an episode (its queue short) stays a slow dependency. Traces built from
the mechanism."""

from __future__ import annotations

import heapq

from tailscope.analysis.diagnosis import diagnose_frame
from tests.mechanism_frames import TraceBuilder, by_pattern, lognormal

N, RPS, SLOTS, WORK_MS = 4000, 110.0, 2, 11.0
GATEWAYS = ("gw/0", "gw/1", "gw/2")


def model_server(seed: int, cause: str):
    """Three gateway pods ask a rate limiter, fetch an image, decode it, call a model server
    (`ModelInfer`, ~11 ms of compute on one of 2 executor slots, in arrival order), then write the
    verdict (~3 ms). `cause`: 'surge' - for 6 % of the run, a third of the way in, arrivals come at
    1.3x what the executors serve (calls wait in the queue); 'slow-model' - in the same stretch a
    quarter of the calls' compute takes 8x longer, on a server with 8x the executors (its queue stays
    short)."""
    b = TraceBuilder(seed)
    b.stages["queue"] = "queue"
    arrivals = list(b.arrivals(N, RPS))
    t_end = arrivals[-1]
    lo, hi = t_end / 3, t_end / 3 + 0.06 * t_end
    if cause == "surge":
        extra = b.rng.uniform(lo, hi, int((1.3 * SLOTS * 1000.0 / WORK_MS - RPS) * (hi - lo) / 1000.0))
        arrivals = sorted(arrivals + list(extra))
    free = [0.0] * (SLOTS if cause == "surge" else 8 * SLOTS)
    for i, t in enumerate(arrivals):
        b.new_trace()
        pod = GATEWAYS[i % 3]
        root = b.span(None, "POST /v1/moderate", "Server", pod, t, 0.0)
        cur = t + 0.1
        for call_name, median in (("EVALSHA", 0.5), ("GetObject", 4.0)):  # a rate limiter, the image
            took = lognormal(b.rng, median, 0.3)
            b.span(root, call_name, "Client", pod, cur, took)
            cur += took + 0.1
        pre = lognormal(b.rng, 2.0, 0.2)
        b.span(root, "image.Decode", "Internal", pod, cur, pre)
        cur += pre + 0.1
        arrive = cur + 0.3
        work = lognormal(b.rng, WORK_MS, 0.15)
        if cause == "slow-model" and lo <= t < hi and b.rng.random() < 0.25:
            work *= 8.0
        begin = max(arrive + 0.05, heapq.heappop(free))
        done = begin + work
        heapq.heappush(free, done)
        call = b.span(root, "ModelInfer", "Client", pod, cur, done + 0.4 - cur)
        server = b.span(call, "ensemble", "Server", f"triton/{i % 2}", arrive, done + 0.1 - arrive)
        model = b.span(server, "embedder", "Internal", f"triton/{i % 2}", arrive + 0.01, done - arrive)
        b.span(model, "queue", "Internal", f"triton/{i % 2}", arrive + 0.02, begin - arrive - 0.02)
        b.span(model, "compute", "Internal", f"triton/{i % 2}", begin, work)
        cur = done + 0.5
        save = lognormal(b.rng, 3.0, 0.25)
        b.span(root, "INSERT verdicts", "Client", pod, cur, save)
        b.set_end(root, cur + save + 0.1)
    return b.frame()


def _slow_dependency(result):
    return next((f for f in result.findings if f.pattern == "slow_dependency"), None)


def test_a_callees_queue_below_its_models_span_is_no_slow_dependency() -> None:
    result = diagnose_frame(model_server(1, "surge"))
    seen = by_pattern(result.findings)
    dep = _slow_dependency(result)
    assert dep is None or dep.confidence < 0.5, seen
    if dep is not None and "callee_wait_share" in dep.evidence["stats"]:
        assert dep.evidence["stats"]["callee_wait_share"] >= 0.5, dep.evidence["stats"]


def test_a_callees_slow_model_with_a_short_queue_stays_a_slow_dependency() -> None:
    result = diagnose_frame(model_server(2, "slow-model"))
    dep = _slow_dependency(result)
    assert dep is not None and dep.confidence >= 0.5, by_pattern(result.findings)
    assert dep.evidence["stats"]["callee_wait_share"] < 0.5
