"""An instance gone cold mid-run (a new index swapped in: its lists fault in from the volume, not yet
in the page cache): its spans jump at the change and decay as the pages become resident. Pre-warmed,
the spans of that stretch take the time of warm ones."""

from __future__ import annotations

from tailscope.analysis.whatif.engine import evaluate
from tests.hand_frames import hand_frame


def _rows() -> list[tuple]:
    """600 requests 10 ms apart, each a 4 ms search on one instance; from the 200th the index is
    swapped: searches take 40 ms, decaying by a tenth per request (faults fewer and fewer) to 4 ms."""
    rows: list[tuple] = []
    cold = 36.0
    for k in range(600):
        took = 4.0 + (k % 3) * 0.1
        if k >= 200:
            took += cold
            cold *= 0.93
        root = len(rows)
        rows.append((k, -1, "GET /similar", "Server", 0, 10.0 * k, took + 0.2))
        rows.append((k, root, "search", "Internal", 0, 10.0 * k + 0.1, took))
    return rows


def test_an_instance_cold_after_a_change_mid_run_is_prewarmed() -> None:
    finding = {"pattern": "cold_start", "confidence": 0.9, "span_name": "search", "evidence": {"stats": {}}}
    result = evaluate(hand_frame(_rows()), [finding])
    hits = [o.p99_ms for o in result.outcomes if o.key == "prewarmed"]
    assert hits, [o.key for o in result.outcomes]
    assert result.measured.p99_ms > 25
    assert hits[0] < 6.0, hits
