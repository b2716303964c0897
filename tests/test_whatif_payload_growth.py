"""Payloads that grew through the run (a client rollout: a second, larger size whose share rises), and
back-to-back steps whose times were rounded a few hundred ns out of order (Triton's QUEUE_END after
its COMPUTE_START): the fix takes the size before the growth, and a shorter step moves the next."""

from __future__ import annotations

import numpy as np
import pytest

from tailscope.analysis.whatif.levers import Inputs
from tailscope.analysis.whatif.payload_levers import payload_at_median
from tailscope.analysis.whatif.retime import Edit, layout, request_latency, retime
from tests.hand_frames import MS, hand_frame


def _grown_frame(n: int = 400):
    """n requests a second apart; from a fifth of the run on a growing share sends 2.5x the items (90 %
    from the middle on: more than half the run's requests); `dumps` takes 0.1 ms per item, `send` 1 ms."""
    rng = np.random.default_rng(3)
    rows, dumps, sizes = [], [], []
    for t in range(n):
        late = min(max(0.0, (t / n - 0.2) / 0.3), 1.0)
        size = float(rng.normal(100, 8) * (2.5 if rng.random() < 0.9 * late else 1.0))
        base = len(rows)
        rows.append((t, -1, "root", "Server", 0, 1000.0 * t, 0.1 * size + 1.0))
        dumps.append(len(rows))
        rows.append((t, base, "dumps", "Internal", 0, 1000.0 * t, 0.1 * size))
        rows.append((t, base, "send", "Internal", 0, 1000.0 * t + 0.1 * size, 1.0))
        sizes.append(size)
    f = hand_frame(rows)
    values = {"items": (np.array(dumps), [str(s) for s in sizes])}
    f.attribute_source = lambda name: values if name == "dumps" else {}
    return f, np.array(sizes)


def test_payloads_that_grew_through_the_run_are_fixed_to_the_size_before() -> None:
    f, sizes = _grown_frame()
    assert np.median(sizes) > 110  # the run's median is already a grown size
    x = Inputs(f, layout(f), f.stage, None, [], 0, None)
    finding = {"pattern": "large_payload", "span_name": "dumps",
               "evidence": {"stats": {"size_attribute": "items", "size_on": "span"}}}
    lever = payload_at_median(x, finding)
    assert lever is not None
    assert lever.params["size_p50"] == pytest.approx(100, abs=3)
    new = request_latency(f, retime(f, lever.edit, x.lay).dur, client_side=False) / MS
    assert np.percentile(new, 99) < 0.1 * 125 + 1.0


def test_a_step_that_starts_a_few_hundred_ns_before_the_last_ends_still_follows_it() -> None:
    ns = 1e-6  # a ns in ms
    rows = [(0, -1, "model", "Internal", 0, 0.0, 100.0),
            (0, 0, "queue", "Internal", 0, 0.0, 60.0),
            (0, 0, "infer", "Internal", 0, 60.0 - 256 * ns, 40.0 + 256 * ns)]
    f = hand_frame(rows)
    lay = layout(f)
    edit = Edit.none(len(f))
    edit.dur[1] = 10.0 * MS  # the queue's wait cut to 10 ms
    new = retime(f, edit, lay).dur / MS
    assert new[0] == pytest.approx(50.0, abs=0.01)


def test_a_call_made_once_per_item_is_made_once_for_all() -> None:
    """N+1: a request loads its 3-20 items' prices one query each (1 ms, 0.3 ms of Ruby between),
    after one products query (2 ms): as one query, each request keeps the products query and one
    prices query (its run's longest), the rest and the work between them gone."""
    from tailscope.analysis.whatif.engine import evaluate

    rows: list[tuple] = []
    for t in range(120):
        items = 3 + t % 18
        root = len(rows)
        took = 2.0 + items * 1.3 + 0.5
        rows.append((t, -1, "GET /recs", "Server", 0, 100.0 * t, took))
        rows.append((t, root, "SELECT products", "Client", 0, 100.0 * t, 2.0))
        for k in range(items):
            rows.append((t, root, "SELECT prices", "Client", 0, 100.0 * t + 2.3 + 1.3 * k, 1.0))
    f = hand_frame(rows)
    finding = {"pattern": "large_payload", "confidence": 0.9, "span_name": "SELECT prices",
               "evidence": {"stats": {}}}
    result = evaluate(f, [finding])
    fix = [o for o in result.outcomes if o.pattern == "large_payload"]
    assert fix and fix[0].key == "payload_batched:SELECT prices"
    assert result.measured.p99_ms > 25
    assert fix[0].p99_ms == pytest.approx(2.0 + 0.3 + 1.0 + 0.5, abs=0.05)


def test_the_network_to_an_untraced_callee_is_cut_inside_its_calls() -> None:
    """A managed endpoint is not traced: the wire to it (another zone's, 40 ms more in one call in
    ten) is inside the CLIENT spans. Network at its p50: each call's time above the median goes."""
    from tailscope.analysis.whatif.engine import evaluate

    rows: list[tuple] = []
    for t in range(100):
        took = 20.0 + t % 3 + (40.0 if t % 10 == 0 else 0.0)
        rows.append((t, -1, "handler", "Server", 0, 100.0 * t, took + 2.0))
        rows.append((t, len(rows) - 1, "SageMaker", "Client", 0, 100.0 * t + 1.0, took))
    finding = {"pattern": "network", "confidence": 0.9, "span_name": "SageMaker", "evidence": {"stats": {}}}
    result = evaluate(hand_frame(rows), [finding])
    fix = [o for o in result.outcomes if o.key == "network_p50:SageMaker"]
    assert result.measured.p99_ms > 60
    assert fix and fix[0].p99_ms == pytest.approx(23.0, abs=0.05), [o.key for o in result.outcomes]
