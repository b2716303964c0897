"""Triton's timestamps as child spans (`queue`, then `compute` > `compute_input`, `compute_infer`,
`compute_output`): the forward pass (`compute_infer`) is inside a wrapper that starts with the input
copy, and the batcher's queue span is the wrapper's sibling, ending where it starts."""

from __future__ import annotations

import numpy as np

from tailscope.analysis.whatif.retime import layout
from tailscope.analysis.whatif.served import FORWARD, QUEUE, served
from tests.hand_frames import hand_frame


def test_a_queue_span_beside_the_forwards_wrapper_is_its_wait() -> None:
    rows: list[tuple] = []
    for t in range(40):
        t0, wait = 100.0 * t, 1.0 + t % 5
        root = len(rows)
        rows.append((t, -1, "ranker", "Server", 0, t0, wait + 10.0))
        rows.append((t, root, "queue", "Internal", 0, t0, wait))
        rows.append((t, root, "compute", "Internal", 0, t0 + wait, 10.0))
        rows.append((t, root + 2, "compute_input", "Internal", 0, t0 + wait, 0.5))
        rows.append((t, root + 2, "compute_infer", "Internal", 0, t0 + wait + 0.5, 9.0))
        rows.append((t, root + 2, "compute_output", "Internal", 0, t0 + wait + 9.5, 0.5))
    f = hand_frame(rows)
    stage = np.full(len(f), -1)
    stage[f.name == f.names.index("queue")] = QUEUE
    stage[f.name == f.names.index("compute_infer")] = FORWARD
    s = served(f, stage, layout(f))
    assert s is not None and len(s.request) == 40
    assert (f.name[s.queue] == f.names.index("queue")).all()
    assert (f.name[s.forward] == f.names.index("compute_infer")).all()
