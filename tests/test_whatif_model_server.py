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


def _pool_rows() -> list[tuple]:
    """A save per request: BEGIN (the wait for a pooled connection), INSERT, COMMIT. For the middle
    third of the run the commits take 40 ms (a slow disk) and the next BEGIN waits for a connection
    (30 ms); otherwise 1 ms each and no wait."""
    rows = []
    for k in range(900):
        t, slow = 10.0 * k, 300 <= k < 600
        begin, commit = (30.5 if slow else 0.5), (40.0 if slow else 1.0 + 0.25 * (k % 3))
        base = len(rows)
        save = begin + 1.0 + commit
        rows += [(k, -1, "POST /", "Server", k % 2, t, save + 2.0),
                 (k, base, "save", "Internal", k % 2, t + 1.0, save),
                 (k, base + 1, "BEGIN", "Client", k % 2, t + 1.0, begin),
                 (k, base + 1, "INSERT", "Client", k % 2, t + 1.0 + begin, 1.0),
                 (k, base + 1, "COMMIT", "Client", k % 2, t + 2.0 + begin, commit)]
    return rows


def test_a_pool_held_long_by_slow_work_is_also_fixed_by_holding_it_as_briefly_as_when_calm() -> None:
    """Connections held through slow commits make the next callers wait: besides no wait (more
    connections, the commits as slow), the pool held as in calm stretches (the steps after taking
    it: the insert and the commit) with no wait, the run's calm latency."""
    from tailscope.analysis.whatif.levers import Inputs
    from tailscope.analysis.whatif.lock_levers import no_lock_wait, pool_held_as_calm
    from tailscope.analysis.whatif.retime import request_latency, retime

    f = hand_frame(_pool_rows())
    x = Inputs(f, layout(f), f.stage, None, [], 0, None)
    finding = {"pattern": "lock_contention", "span_name": "BEGIN"}
    assert no_lock_wait(x, finding) is not None
    lever = pool_held_as_calm(x, finding)
    assert lever is not None and lever.key == "no_lock_wait_held_as_calm:BEGIN"
    after = request_latency(f, retime(f, lever.edit, x.lay).dur, client_side=False) / MS
    assert after.max() <= 5.0 + 1e-6 and 300 <= lever.params["holds_redrawn"] <= 320  # the slow commits


def test_a_model_server_pod_added_mid_run_is_prewarmed_from_its_own_spans() -> None:
    """A third model server pod joins halfway and takes every third call; its first forwards take
    200 ms more, halving each time. The cold-start finding (given without a warm-up count, the pod a
    callee: no request starts on it) names the forward span: the pod's leading slow forwards, and its
    other spans of that time, take warm times."""
    from tailscope.analysis.whatif.cold_levers import cold_spans, prewarmed
    from tailscope.analysis.whatif.levers import Inputs
    from tailscope.analysis.whatif.retime import request_latency, retime

    rows, n_new = [], 0
    for k in range(600):
        t = 20.0 * k
        pod = (1 + k % 3) if k >= 300 else (1 + k % 2)
        extra = 0.0
        if pod == 3:
            extra, n_new = 200.0 / 2 ** n_new, n_new + 1
        fwd = 5.0 + 0.25 * (k % 4) + extra
        base = len(rows)
        rows += [(k, -1, "root", "Server", 0, t, fwd + 3.0),
                 (k, base, "infer", "Client", 0, t + 1.0, fwd + 1.0),
                 (k, base + 1, "model", "Server", pod, t + 1.5, fwd),
                 (k, base + 2, "compute_infer", "Internal", pod, t + 1.5, fwd)]
    f = hand_frame(rows, instances=("api", "model-0", "model-1", "model-new"))
    x = Inputs(f, layout(f), f.stage, None, [], 0, None)
    finding = {"pattern": "cold_start", "span_name": "compute_infer", "evidence": {"stats": {}}}
    cold = cold_spans(x, "compute_infer")
    assert cold is not None and set(f.instance[cold].tolist()) == {3}
    assert 4 <= int((cold & (f.name == f.names.index("compute_infer"))).sum()) <= 10
    lever = prewarmed(x, finding)
    after = request_latency(f, retime(f, lever.edit, x.lay).dur, client_side=False) / MS
    # the last few ms of the warm-up (under 1.5 times the warm time) are left: 8.75 ms the warm maximum
    assert after.max() <= 12.0 and lever.params["cold_spans"] == int(cold.sum())


def test_a_pool_held_by_its_own_slow_queries_is_fixed_by_the_queries_as_when_calm() -> None:
    """The repository span waits for a pooled connection, then runs its query as its child (no
    BEGIN sibling): for the middle third the query takes 40 ms (a plan regression) and the next
    callers wait 30 ms for a connection. Held as calm, the query inside the lock span takes a calm
    one's time too, not only the wait before it."""
    from tailscope.analysis.whatif.levers import Inputs
    from tailscope.analysis.whatif.lock_levers import pool_held_as_calm
    from tailscope.analysis.whatif.retime import request_latency, retime

    rows = []
    for k in range(900):
        t, slow = 10.0 * k, 300 <= k < 600
        wait, query = (30.0 if slow else 0.0), (40.0 if slow else 1.0 + 0.25 * (k % 3))
        base = len(rows)
        rows += [(k, -1, "POST /", "Server", k % 2, t, wait + query + 2.0),
                 (k, base, "GetApplicant", "Internal", k % 2, t + 1.0, wait + query),
                 (k, base + 1, "EXECUTE", "Client", k % 2, t + 1.0 + wait, query)]
    f = hand_frame(rows)
    x = Inputs(f, layout(f), f.stage, None, [], 0, None)
    lever = pool_held_as_calm(x, {"pattern": "lock_contention", "span_name": "GetApplicant"})
    assert lever is not None
    after = request_latency(f, retime(f, lever.edit, x.lay).dur, client_side=False) / MS
    assert after.max() <= 3.5 + 1e-6
