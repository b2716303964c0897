"""A request whose rows spill over several batches (Nx.Serving: a long candidate list fills the open
batch, the rest runs in the next): its forward spans run back to back under one span that covers
the wait too; the wait is before the first of them, however long the later ones are."""

from __future__ import annotations

import numpy as np

from tailscope.analysis.whatif.retime import layout
from tailscope.analysis.whatif.served import FORWARD, served
from tests.hand_frames import hand_frame


def test_a_spilled_requests_wait_is_before_its_first_batch() -> None:
    rows: list[tuple] = []
    for t in range(60):
        t0, wait = 200.0 * t, 20.0 + t % 7
        root = len(rows)
        chunks = [8.0, 12.0] if t % 2 else [10.0]  # every other request spills, its second batch longer
        rows.append((t, -1, "GET /recs", "Server", 0, t0, wait + sum(chunks) + 1.0))
        rows.append((t, root, "serving.batched_run", "Internal", 0, t0 + 0.5, wait + sum(chunks)))
        at = t0 + 0.5 + wait
        for d in chunks:
            rows.append((t, root + 1, "serving.execute", "Internal", 0, at, d))
            at += d
    f = hand_frame(rows)
    stage = np.full(len(f), -1)
    stage[f.name == f.names.index("serving.execute")] = FORWARD
    lay = layout(f)
    s = served(f, stage, lay)
    assert s is not None and len(s.request) == 60
    wait = s.wait(f, lay)
    # every request's wait is its 20-26 ms before the first batch (not the nothing before the second)
    assert np.allclose(np.sort(wait / 1e6), np.sort([20.0 + t % 7 for t in range(60)]), atol=0.01)
