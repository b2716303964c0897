"""A batcher whose window is what its requests wait for (a max queue delay of 25 ms for a traffic that
fills a batch of 3 once in four windows): the batches leave unfilled when the window closes, and the
lever "no batching delay" replays the arrivals with batches leaving as soon as a server is free."""

from __future__ import annotations

import numpy as np

from tailscope.analysis.whatif import levers as lv
from tailscope.analysis.whatif.engine import _latency
from tailscope.analysis.whatif.queue_levers import queue_no_window, queue_within_window
from tailscope.analysis.whatif.retime import layout, unit_latency
from tailscope.analysis.whatif.served import FORWARD, QUEUE, served
from tests.hand_frames import MS, hand_frame


def _served_inputs(rows: list[tuple]) -> lv.Inputs:
    """The lever inputs of hand-built rows whose `queue` and `forward` spans are the batcher's stages."""
    f = hand_frame(rows)
    stage = np.full(len(f), -1)
    stage[f.name == f.names.index("queue")] = QUEUE
    stage[f.name == f.names.index("forward")] = FORWARD
    lay = layout(f)
    return lv.Inputs(f, lay, stage, served(f, stage, lay), [])


def _inputs() -> lv.Inputs:
    rows: list[tuple] = []
    trace = 0
    for g in range(150):
        dispatch = 40.0 * g + 25.0
        members = [40.0 * g, 40.0 * g + 10.0] + ([40.0 * g + 20.0] if g % 4 == 0 else [])
        cost = 5.0 + len(members)
        for arrival in members:
            root = len(rows)
            rows.append((trace, -1, "POST /score", "Server", 0, arrival, dispatch + cost - arrival))
            rows.append((trace, root, "queue", "Internal", 0, arrival, dispatch - arrival))
            rows.append((trace, root, "forward", "Internal", 0, dispatch, cost))
            trace += 1
    return _served_inputs(rows)


def test_a_window_the_batches_wait_out_goes_with_no_batching_delay() -> None:
    x = _inputs()
    assert x.served is not None and x.served.window_ns == 25 * MS
    before = np.percentile(unit_latency(x.frame, None, None, False), 99) / MS
    assert before > 30
    # cutting each wait to the window changes nothing: the window is the wait
    within = queue_within_window(x)
    assert within is not None
    assert np.percentile(_latency(x, within, False), 99) / MS > 30
    lever = queue_no_window(x)
    assert lever is not None and lever.key == "queue_no_window"
    after = np.percentile(_latency(x, lever, False), 99) / MS
    assert after < 6.5, after  # each request alone, served at once: 5 ms + 1 ms an item


def test_batches_that_fill_before_the_window_closes_keep_it() -> None:
    x = _inputs()
    assert x.served is not None
    x.served.max_batch = 2  # every batch full: the window is not what they wait for
    assert queue_no_window(x) is None


def _alone(window: float | None) -> lv.Inputs:
    """A request every 300 ms (Poisson-free, so never two in a window): each waits out a 100 ms
    window alone (`window` None: no window, it waits 0-3 ms for the server), then a 16 ms forward."""
    rows: list[tuple] = []
    rng = np.random.default_rng(2)
    for k in range(200):
        arrival = 300.0 * k
        wait = window - float(rng.uniform(0, 0.05)) if window else float(rng.uniform(0, 3))
        root = len(rows)
        rows.append((k, -1, "POST /embed", "Server", 0, arrival, wait + 16.0))
        rows.append((k, root, "queue", "Internal", 0, arrival, wait))
        rows.append((k, root, "forward", "Internal", 0, arrival + wait, 16.0))
    return _served_inputs(rows)


def test_a_window_every_request_waits_out_alone_is_read_from_the_waits_ceiling() -> None:
    """No batch ever has two members (the batch size tells nothing of a window), yet every wait sits
    at the same ceiling: a timer, the window; the fix replays the arrivals with none."""
    x = _alone(100.0)
    assert x.served is not None and x.served.max_batch == 1
    assert abs(x.served.window_ns - 100 * MS) < 0.1 * MS
    lever = queue_no_window(x)
    assert lever is not None
    assert np.percentile(_latency(x, lever, False), 99) / MS < 17.0
    spread = _alone(None)  # waits spread under no ceiling: a queue, no window
    assert spread.served is not None and spread.served.window_ns == 0.0
