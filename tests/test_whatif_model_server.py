"""The what-if on a model server's own spans (a Triton-like server: per composing model a queue, an
input copy, the forward, an output copy), hand-built traces."""

from __future__ import annotations

import numpy as np

from tailscope.analysis.whatif.retime import layout
from tailscope.analysis.whatif.served import FORWARD, QUEUE, served
from tests.hand_frames import MS, hand_frame


def _model_server_rows(n: int = 300) -> tuple[list[tuple], list[str]]:
    """Per request: root > model (SERVER) > queue (a surge: 40 ms in every tenth request, else 1-3
    ms), compute_input 0.25 ms, compute_infer 5 ms, compute_output 0.125 ms. Returns (rows, stage per
    row)."""
    rows, stages = [], []
    for k in range(n):
        t = 20.0 * k
        wait = 40.0 if k % 10 == 0 else 1.0 + k % 3
        base = len(rows)
        end = t + 1 + wait + 0.25 + 5 + 0.125
        rows += [
            (k, -1, "root", "Server", 0, t, end + 1 - t),
            (k, base, "model", "Server", 1, t + 1, end - t - 1),
            (k, base + 1, "queue", "Internal", 1, t + 1, wait),
            (k, base + 1, "compute_input", "Internal", 1, t + 1 + wait, 0.25),
            (k, base + 1, "compute_infer", "Internal", 1, t + 1 + wait + 0.25, 5.0),
            (k, base + 1, "compute_output", "Internal", 1, t + 1 + wait + 5.25, 0.125),
        ]
        stages += ["ingress", "unattributed", "queue", "preprocessing", "model_forward", "postprocessing"]
    return rows, stages


def test_the_queue_before_an_input_copy_is_the_wait_for_the_model() -> None:
    """The queue span ends where the input copy starts, not where the forward does: it is still the
    request's wait for the model (the copy between is a step of the batch)."""
    from tailscope.vocabulary import ALL_STAGES

    rows, stages = _model_server_rows()
    f = hand_frame(rows, instances=("api", "model"))
    stage = np.array([ALL_STAGES.index(s) for s in stages])
    s = served(f, stage, layout(f))
    assert s is not None and len(s.request) == 300
    assert (s.queue >= 0).all() and (stage[s.queue] == QUEUE).all() and (stage[s.forward] == FORWARD).all()
    assert np.sort(f.dur[s.queue] / MS)[-30:].tolist() == [40.0] * 30


def test_two_fixes_that_both_set_a_spans_time_leave_it_at_the_shorter() -> None:
    """A database call slowed by two causes (a wait for a pooled connection, a lossy node's
    retransmissions): each fix sets the call's time without its own cause; both at once, whichever
    order they are composed in, the call takes the shorter (the other cause's part is gone too)."""
    from tailscope.analysis.whatif.compose import combined
    from tailscope.analysis.whatif.levers import Lever
    from tailscope.analysis.whatif.retime import Edit

    pool, lossy = Edit.none(3), Edit.none(3)
    pool.dur[:] = [1.0, np.nan, 5.0]  # the wait for the pool gone
    lossy.dur[:] = [3.0, 2.0, 400.0]  # drawn from another node's calls (one of which waited)
    a = Lever("no_lock_wait:BEGIN", "a", "software", "", pool)
    b = Lever("network_p50:BEGIN", "b", "software", "", lossy)
    for pair in ([a, b], [b, a]):
        assert combined(pair).edit.dur.tolist() == [1.0, 2.0, 5.0]
