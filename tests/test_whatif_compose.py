"""Two fixes at once: a prefix 'a|b' (either lever answers the cause, as the bench writes a
pattern's levers) picks a lever to compose, and the composed lever keeps a lever's batching window
(queue_no_window replays the queue with none)."""

from __future__ import annotations

import numpy as np

from tailscope.analysis.whatif.compose import combinations
from tailscope.analysis.whatif.levers import Lever
from tailscope.analysis.whatif.retime import Edit


def _lever(key: str, **kw) -> Lever:
    return Lever(key, key, "software", key, Edit.none(3), pattern=key, **kw)


def test_either_prefix_composes_and_the_window_is_kept() -> None:
    levers = [_lever("cache_hits:GET"), _lever("queue_no_window", requeue=True, window_ns=0.0),
              _lever("no_gc_stalls")]
    out = combinations(levers, [("cache_hits", "queue_as_calm|queue_no_window")])
    assert [lv.key for lv in out] == ["cache_hits:GET+queue_no_window"]
    assert out[0].window_ns == 0.0 and out[0].requeue
    assert np.isnan(out[0].edit.dur).all()
