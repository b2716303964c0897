"""A compile for a new kind of input in a running process (new_kinds.py): from 40 % of the run a new
sequence bucket arrives; the first batch of it on each instance compiles for 1.5 s while every request
behind it waits, then that bucket runs as fast as the others. The same stops at random moments (a
pause, whatever the input) and a kind that is slow every time (longer inputs) are not it."""

from __future__ import annotations

from batcher_frames import batcher_service
from mechanism_frames import TraceBuilder, lognormal

from tailscope.analysis.diagnosis import new_kinds
from tailscope.analysis.diagnosis.model import Context
from tailscope.analysis.diagnosis.runner import diagnose_frame


def _new_kind(frame) -> float:
    return max((fd.confidence for fd in new_kinds.detect(Context(frame), "{where}")), default=0.0)


def test_a_compile_for_a_new_kind_mid_run_is_a_cold_start() -> None:
    frame = batcher_service(new_kind_from=0.4, compile_ms=1500.0)
    assert _new_kind(frame) >= 0.8
    findings = diagnose_frame(frame).findings
    assert findings[0].pattern == "cold_start"  # none before new_kinds (gc_pause 0.45-0.48 on gpu-torch)
    assert findings[0].evidence["stats"]["kind_attribute"] == "seq.bucket"
    # the stalls the compile makes are not a pause nor an interpreter lock (lock_contention 0.74 before)
    stalls = ("gc_pause", "lock_contention")
    assert not [fd for fd in findings if fd.pattern in stalls and fd.confidence >= 0.5]


def test_stops_as_long_at_random_moments_are_not_a_new_kind() -> None:
    stops = {f"scorer/{i}": [(t, t + 1500.0) for t in (8000.0 + 3000 * i, 17000.0 + 2000 * i)]
             for i in range(3)}
    assert _new_kind(batcher_service(new_kind_from=0.4, stops=stops)) < 0.5


def test_a_kind_slow_every_time_is_not_a_compile() -> None:
    assert _new_kind(batcher_service(new_kind_from=0.4, kind_cost=8.0)) < 0.5


def _views_service(seed: int, n: int = 6000, rps: float = 100.0, new: int = 60):
    """A feature service (three instances) whose `fetch` step (attribute `feature.view`) holds one call to
    a store. From half of the run new views arrive (a third of the requests, 60 of them) and the store,
    grown by them, stalls (~400 ms at a time, half of the time: a fork's page-table copy): calls sent
    inside a stall wait for its end (diag37, feast-redis class 4: bgsave-fork s0 read a cold_start 0.61)."""
    b = TraceBuilder(seed)
    run = n / rps * 1000.0
    stalls, t = [], 0.5 * run + b.rng.uniform(0, 400.0)
    while t < run + 2000.0:
        stalls.append((t, t + lognormal(b.rng, 400.0, 0.2)))
        t = stalls[-1][1] + b.rng.exponential(400.0)
    for t in b.arrivals(n, rps):
        b.new_trace()
        inst = f"api/{int(b.rng.integers(3))}"
        fresh = t >= 0.5 * run and b.rng.random() < 0.3
        view = f"v{int(b.rng.integers(new)) + 3}" if fresh else f"v{int(b.rng.integers(3))}"
        root = b.span(None, "GET /features", "Server", inst, t, 0.0)
        sent = t + 0.15
        reply = sent + lognormal(b.rng, 0.8, 0.3)
        held = next((e for a, e in stalls if a <= sent < e), None)
        if held is not None:
            reply = held + lognormal(b.rng, 0.8, 0.3)
        fetch = b.span(root, "fetch", "Internal", inst, t + 0.1, 0.0, **{"feature.view": view})
        b.span(fetch, "HMGET", "Client", inst, sent, reply - sent, db__system="redis")
        end = reply + lognormal(b.rng, 0.3, 0.2)
        b.set_end(fetch, end)
        b.set_end(root, end + lognormal(b.rng, 1.0, 0.3))
    return b.frame()


def test_a_callee_stalling_while_new_kinds_arrive_is_no_compile() -> None:
    """The new views' first fetches are slow far more often than the earlier steps were (p ~ 1e-8: 0.998
    before), yet most of the name's one-off steps are not the first of a kind: the slowness recurs."""
    found = new_kinds.detect(Context(_views_service(3)), "{where}")
    assert all(fd.confidence < 0.5 for fd in found), [fd.evidence["stats"] for fd in found]
