"""One process inside an instance that every request calls (an Erlang GenServer with its own heap)
stops for its own collections, reporting nothing: the calls that arrive meanwhile end together when
it resumes, while the instance's other work runs on. The pause lever removes the pauses from the
calls to it (read from the calls: a stretch with calls in flight and none ending)."""

from __future__ import annotations

from tailscope.analysis.whatif.engine import evaluate
from tests.hand_frames import hand_frame

PAUSES = [(500.0 * k + 200.0, 500.0 * k + 300.0) for k in range(8)]  # 100 ms every 500 ms


def _run(paused: bool) -> list[tuple]:
    """1,000 requests every 4 ms: 0.1 ms, then a 0.05 ms call to the process (its wait for a pause
    included), then 5 ms of other work on the instance."""
    rows: list[tuple] = []
    released = [0] * len(PAUSES)
    for k in range(1000):
        t = 4.0 * k
        ask = t + 0.1
        end = ask + 0.05
        for j, (a, b) in enumerate(PAUSES if paused else ()):
            if a <= ask < b:  # waits for the process to resume; released one by one
                released[j] += 1
                end = b + 0.05 * released[j]
        root = len(rows)
        rows.append((k, -1, "GET /recs", "Server", 0, t, end - t + 5.1))
        rows.append((k, root, "flags.variant", "Internal", 0, ask, end - ask))
        rows.append((k, root, "work", "Internal", 0, end, 5.0))
    return rows


def test_the_called_processs_pauses_are_removed_from_its_calls() -> None:
    finding = {"pattern": "gc_pause", "confidence": 1.0, "span_name": "flags.variant",
               "evidence": {"stats": {}}}
    result = evaluate(hand_frame(_run(True)), [finding])
    healthy = evaluate(hand_frame(_run(False)), [])
    hits = [o for o in result.outcomes if o.key == "no_gc_stalls:flags.variant"]
    assert hits, [o.key for o in result.outcomes]
    assert result.measured.p99_ms > 50
    assert abs(hits[0].p99_ms - healthy.measured.p99_ms) < 0.05 * healthy.measured.p99_ms, (
        hits[0].p99_ms, healthy.measured.p99_ms)
    assert hits[0].params["pauses"] == len(PAUSES)
