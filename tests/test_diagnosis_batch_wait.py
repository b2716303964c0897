"""A batcher's queue inside one span: a request waits inside a span no rule knows (an Nx.Serving
`batched_run`, a Triton client's `infer`) until its batch runs, then the batch's run is a child span
shared by every member (`Context.batching`: batched work). The span's time before that child is the
wait for the batch: a queue's wait, which follows the arrivals (a burst backs the batches up).
Hand-built frames: the rule, and the shapes that look alike but are no wait (work per request, the
span's own work after the batch)."""

from __future__ import annotations

import numpy as np
from hand_frames import hand_frame

from tailscope.analysis.diagnosis.model import ALL_STAGES, Context
from tailscope.analysis.diagnosis.runner import diagnose_frame


def batched(n: int = 1500, seed: int = 3, shared: bool = True, after_ms: float = 0.0) -> list[tuple]:
    """Requests at ~200/s with a burst of 3x over a tenth of the run; each one's `Ranker.run` span
    holds it from arrival until its batch (up to 4 requests, 4 ms timeout, one batch at a time, 6 ms
    a batch) has run; the batch run is a child `Ranker.execute` with the batch's exact interval
    (shared=False: each request runs alone at its own time, no batch). after_ms: the span's own
    work after the run (a postprocessing that grows per request instead of a wait before)."""
    rng = np.random.default_rng(seed)
    gaps = rng.exponential(5.0, n)
    t = np.cumsum(gaps)
    burst = (t > 0.45 * t[-1]) & (t < 0.55 * t[-1])
    gaps[burst] /= 3.0
    arrive = np.cumsum(gaps)
    rows: list[tuple] = []
    free, i = 0.0, 0
    while i < n:
        opened = arrive[i]
        sealed = max(opened + 4.0, free)
        members = [i]
        i += 1
        while i < n and len(members) < 4 and arrive[i] <= sealed:
            members.append(i)
            i += 1
        start = max(sealed if len(members) < 4 else arrive[members[-1]], free)
        end = start + 6.0 * rng.lognormal(0.0, 0.05)
        free = end
        for j in members:
            a = float(arrive[j])
            run_s, run_e = (start, end) if shared else (a + 0.2, a + 0.2 + 6.0 * rng.lognormal(0.0, 0.05))
            # each member is answered on its own (a reply per caller): the ends differ by microseconds
            post = after_ms * rng.lognormal(0.0, 0.8) if after_ms else 0.02 + rng.exponential(0.06)
            base = len(rows)
            rows += [  # the request's own work (2 ms of features) comes before it joins the batch
                (j, -1, "GET /rank", "Server", 0, a - 2.2, run_e + post + 2.5 - a),
                (j, base, "Features.get", "Internal", 0, a - 2.1, 2.0),
                (j, base, "Ranker.run", "Internal", 0, a, run_e + post - a),
                (j, base + 2, "Ranker.execute", "Internal", 0, run_s, run_e - run_s),
            ]
    return rows


def _stage(rows: list[tuple], name: str) -> str | None:
    f = hand_frame(rows)
    ctx = Context(f)
    i = f.names.index(name)
    code = int(ctx.name_stage[i])
    return ALL_STAGES[code] if code >= 0 else None


def test_the_time_a_span_waits_for_its_shared_batch_run_is_a_queue() -> None:
    assert _stage(batched(), "Ranker.execute") == "model_forward"
    assert _stage(batched(), "Ranker.run") == "queue"  # was unknown: its wait was nobody's


def test_a_burst_backing_up_the_batches_inside_one_span_is_queueing() -> None:
    result = diagnose_frame(hand_frame(batched()))
    found = [(f.pattern, f.span_name, round(f.confidence, 2)) for f in result.findings]
    assert found and found[0][0] == "queueing" and found[0][2] >= 0.8, found


def test_a_child_run_per_request_is_no_batch_wait() -> None:
    # each request runs on its own: the child is not shared, the span's time is not a batch's wait
    assert _stage(batched(shared=False), "Ranker.run") != "queue"


def test_a_span_whose_own_time_is_after_the_batch_is_no_wait() -> None:
    # a postprocessing of ~20 ms after the shared run: most of the span's own time follows the batch
    assert _stage(batched(after_ms=20.0), "Ranker.run") != "queue"
