"""A device shared with a co-tenant (its kernels 3x as long in two windows on one instance) makes the
process silent while every thread waits for the forward, as a paused process is; the runtime reports
its collections (events without a duration, as a Zipkin annotation keeps them) and none falls in those
silences: the forward's time is compute, not a pause's (compute_bound.unreported_stops_left_out). Real
collections reported where the stalls are keep their time the pause's."""

from __future__ import annotations

import numpy as np
from batcher_frames import batcher_service

from tailscope.analysis.diagnosis.runner import diagnose_frame


def _run(pause_ms: float, co_tenant: bool):
    rng = np.random.default_rng(5)
    gc = [(f"scorer/{i}", float(t), float(t) + pause_ms) for i in range(3)
          for t in np.sort(rng.uniform(0.0, 14000.0, 15))]
    stops = {f"scorer/{i}": [(a, b) for j, a, b in gc if j == f"scorer/{i}"] for i in range(3)}
    shared = {"scorer/1": [(3000.0, 6000.0), (9000.0, 12000.0)]} if co_tenant else None
    frame = batcher_service(rps=200.0, shared_device=shared, stops=stops,
                            gc_events=[(i, a, a) for i, a, _ in gc])
    return diagnose_frame(frame).findings


def _conf(findings, pattern: str) -> float:
    return max((fd.confidence for fd in findings if fd.pattern == pattern), default=0.0)


def test_a_co_tenants_slowdown_is_compute_where_no_collection_is_reported() -> None:
    findings = _run(1.5, co_tenant=True)
    assert findings[0].pattern == "compute_bound"  # gc_pause 0.27 above compute_bound 0.16 before
    assert _conf(findings, "compute_bound") >= 0.5


def test_reported_collections_keep_their_stalls() -> None:
    findings = _run(40.0, co_tenant=False)
    assert findings[0].pattern == "gc_pause"
    assert _conf(findings, "compute_bound") < 0.5


def test_stalls_a_cpu_quota_explains_stay_stops() -> None:
    """The same unreported silences, where cpu_throttling reads them as a quota's, are stops: kept
    (throttled-embedder cpu-throttling: compute_bound 0.91 above cpu_throttling 0.96 without this)."""
    from tailscope.analysis.diagnosis.compute_bound import unreported_stops_left_out
    from tailscope.analysis.diagnosis.model import Context, Finding

    frame = batcher_service(n=400, gc_events=[("scorer/0", 100.0, 100.0), ("scorer/1", 200.0, 200.0)])
    ctx = Context(frame)
    ms = 1_000_000
    episodes = (np.array([0, 1]), np.array([1000 * ms, 1500 * ms]), np.array([1040 * ms, 1540 * ms]))
    assert len(unreported_stops_left_out(ctx, episodes)[0]) == 0  # no collection reported in them
    quota = Finding("cpu_throttling", 0.9, None, None, {"summary": "", "stats": {}}, "")
    ctx.notes["stall_findings"] = [quota]
    assert len(unreported_stops_left_out(ctx, episodes)[0]) == 2
