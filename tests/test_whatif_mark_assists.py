"""A concurrent collector stops no process (Go's GC): while it marks, a goroutine that allocates is
parked until the mark ends and the others run on, so no stretch without span boundaries shows the
pause and no runtime report gives it. The pause lever re-times the process's own steps stretched far
past their usual time, and leaves its calls out alone (a slow callee is no collection)."""

from __future__ import annotations

from tailscope.analysis.whatif.engine import evaluate
from tests.hand_frames import hand_frame

MARKS = [(400.0 * k + 150.0, 400.0 * k + 250.0) for k in range(10)]  # 100 ms marks every 400 ms


def _run(marking: bool) -> list[tuple]:
    """1,000 requests every 4 ms on two instances: a 0.4 ms parse (every other one on an instance that
    starts in a mark drafted into assist and parked until the mark's end; the rest run on), a 5 ms
    call out (every 50th 60 ms: a slow callee, in both runs), a 0.9 ms encode."""
    rows: list[tuple] = []
    for k in range(1000):
        t = 4.0 * k
        parse_end = t + 0.4
        for a, b in MARKS if marking else ():
            if a <= t < b and (k // 2) % 2 == 0:
                parse_end = b + 0.4
        call = 60.0 if k % 50 == 7 else 5.0
        root = len(rows)
        end = parse_end + call + 0.9
        rows.append((k, -1, "POST /search", "Server", k % 2, t, end - t + 0.1))
        rows.append((k, root, "search.parse", "Internal", k % 2, t, parse_end - t))
        rows.append((k, root, "GET /features", "Client", k % 2, parse_end, call))
        rows.append((k, root, "search.encode", "Internal", k % 2, parse_end + call, 0.9))
    return rows


def test_steps_a_concurrent_mark_stretched_take_their_usual_time() -> None:
    finding = {"pattern": "gc_pause", "confidence": 1.0, "span_name": "POST /search",
               "evidence": {"stats": {"services": ["svc"]}}}
    result = evaluate(hand_frame(_run(True)), [finding])
    healthy = evaluate(hand_frame(_run(False)), [])
    assert result.measured.p99_ms > 1.4 * healthy.measured.p99_ms, (result.measured.p99_ms,
                                                                     healthy.measured.p99_ms)
    hits = [o for o in result.outcomes if o.key == "no_gc_stalls"]
    assert hits, [o.key for o in result.outcomes]
    # the slow calls out stay: the healthy run's p99 is theirs
    assert abs(hits[0].p99_ms - healthy.measured.p99_ms) < 0.05 * healthy.measured.p99_ms, (
        hits[0].p99_ms, healthy.measured.p99_ms)


def test_a_run_whose_runtime_reports_its_pauses_keeps_the_stall_lever_alone() -> None:
    import numpy as np

    from tailscope.analysis.whatif.engine import inputs
    from tailscope.analysis.whatif.process_levers import stretched_steps

    frame = hand_frame(_run(True))
    frame.gc_instance = np.array([0])
    frame.gc_time = np.array([150_000_000])
    frame.gc_dur = np.array([100_000_000])
    finding = {"pattern": "gc_pause", "confidence": 1.0, "evidence": {"stats": {"services": ["svc"]}}}
    assert stretched_steps(inputs(frame, [finding]), finding) is None
