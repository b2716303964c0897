"""The large_payload lever on one pipelined connection: replies that come back in the order their
requests were sent (a Redis multiplexer, HTTP/1.1 pipelining, one gRPC stream's ordered frames), so a
large reply delays every reply queued behind it (head-of-line). The payload's size need not be an
attribute: on such a connection a call's own time is the time its reply took after the one ahead of
it arrived, and the large replies are the calls whose own time is well over the usual one."""

from __future__ import annotations

from typing import Any

import numpy as np

from tailscope.analysis.whatif.levers import SOFTWARE, Inputs, Lever, _draw
from tailscope.analysis.whatif.retime import Edit

IN_ORDER = 0.95  # a call started while another was in flight ends after it this often: one ordered pipe
MIN_OVERLAPS = 20  # ... judged on at least this many such calls
LARGE_OVER_MEDIAN = 2.0  # a reply whose own time is over twice the median own time is a large one
END_TOLERANCE_NS = 50_000  # an end this close before the one ahead's still counts as after it


def _pipes(f, spans: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per span (`spans` sorted by instance, then start): the latest end of the spans of its instance
    started before it (-inf: none), its own time (its end less the later of its start and that end),
    and the order of `spans` used."""
    order = np.lexsort((f.start[spans], f.instance[spans]))
    s = spans[order]
    start = f.start[s].astype(np.float64)
    end = start + f.dur[s]
    inst = f.instance[s]
    ahead = np.full(len(s), -np.inf)
    for i in np.unique(inst).tolist():
        sel = np.nonzero(inst == i)[0]
        ahead[sel[1:]] = np.maximum.accumulate(end[sel])[:-1]
    own = end - np.maximum(start, ahead)
    return ahead, own, order


def in_order(f, spans: np.ndarray) -> bool:
    """Whether the spans of each instance finish in the order they started (one ordered pipe): of the
    calls started while an earlier one was in flight, at least IN_ORDER end after it."""
    if len(spans) == 0:
        return False
    ahead, _own, order = _pipes(f, spans)
    s = spans[order]
    end = f.start[s].astype(np.float64) + f.dur[s]
    behind = ahead > f.start[s]
    if behind.sum() < MIN_OVERLAPS:
        return False
    return bool((end[behind] >= ahead[behind] - END_TOLERANCE_NS).mean() >= IN_ORDER)


def payload_in_order(x: Inputs, finding: dict[str, Any]) -> Lever | None:
    """Large replies on an ordered pipe made usual: each call of the finding's span whose own time is
    over LARGE_OVER_MEDIAN x the median own time of the calls that waited for none (a large reply),
    and each call that waited behind another (its own time is then the transfer alone), takes the own
    time of a usual call that waited for none (drawn from the run); then, per instance in the order
    the calls were sent, each call ends at the later of its start plus that time and the new end of
    the one ahead: the waits behind large replies go, those behind usual ones stay. None where the
    calls do not finish in order (a pool of connections, a concurrent client)."""
    name = finding.get("span_name")
    spans = x.spans_named(name, in_requests=False)
    f = x.frame
    if not in_order(f, spans):
        return None
    ahead, own, order = _pipes(f, spans)
    s = spans[order]
    start = f.start[s].astype(np.float64)
    waited = ahead > start
    alone = own[~waited]
    if len(alone) < MIN_OVERLAPS:
        return None
    usual = alone[alone <= LARGE_OVER_MEDIAN * np.median(alone)]
    large = ~waited & (own > LARGE_OVER_MEDIAN * np.median(alone))
    if not large.any():
        return None
    redo = large | waited
    new_own = own.copy()
    new_own[redo] = _draw(x.rng(41), usual, int(redo.sum()))
    inst = f.instance[s]
    new_end = start + new_own
    for i in np.unique(inst).tolist():  # each reply after the one ahead of it (the pipe's order)
        sel = np.nonzero(inst == i)[0]
        new_end[sel] = np.maximum.accumulate(new_end[sel])
    edit = Edit.none(len(f))
    edit.dur[s] = np.minimum(new_end - start, f.dur[s])
    return Lever(
        f"payload_in_order:{name}",
        f"No large replies on '{name}''s ordered connection",
        SOFTWARE,
        f"'{name}' replies come back in the order they were asked for (one pipelined connection): each "
        "large reply (its own time over twice the usual) and each reply that queued behind another takes "
        "a usual reply's time (drawn from the run), and the order is replayed: the waits behind large "
        "replies go (smaller values, a cap, or a separate connection for them)",
        edit,
        pattern="large_payload",
        span_name=name,
        params={"large": int(large.sum()), "behind": int(waited.sum())},
    )
