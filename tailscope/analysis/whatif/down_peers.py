"""A restart is not only a cold start: the instance that restarts is gone for a while first, its load
moves to its peers (a least-outstanding router sends them everything), and they queue. A lever that
pre-warms the restarted instance leaves that queue; a fix that avoids the restart (a rolling restart
with a spare, a drain before it) removes both.

*Identified* from the run: an instance of the finding's span name whose spans stop for a stretch
(its longest pause between starts over DOWN_GAP times its median and over MIN_DOWN_S) while its peers
of the same service keep serving. *Re-timed*: each peer's spans of that name that start in the
stretch it was down or a stretch as long after it (the drain), in a disturbed stretch of the peer
(queue_levers._calm: over twice the quieter quarter's time), take the duration at their own rank among
the peer's calm spans of that name (a long generation stays long, its queue goes). *Assumptions*: the
disturbed stretches around the outage are the outage's; the peers' calm spans are what they serve at
their usual load; arrivals as in the run."""

from __future__ import annotations

from typing import Any

import numpy as np

from tailscope.analysis.whatif.host_levers import named_instances
from tailscope.analysis.whatif.levers import Inputs, Lever
from tailscope.analysis.whatif.retime import Edit

DOWN_GAP = 20.0  # an instance's longest pause between span starts over this many times its median
MIN_DOWN_S = 1.0  # ... and over this many seconds: it was down
MIN_SPANS = 40


def _down(start: np.ndarray) -> tuple[float, float] | None:
    """The stretch an instance served nothing (from its spans' sorted starts), or None."""
    if len(start) < MIN_SPANS:
        return None
    gap = np.diff(start.astype(np.float64))
    k = int(np.argmax(gap))
    if gap[k] < max(DOWN_GAP * float(np.median(gap)), MIN_DOWN_S * 1e9):
        return None
    return float(start[k]), float(start[k + 1])


def peers_while_down(x: Inputs, finding: dict[str, Any], edit: Edit) -> int:
    """Re-time, in `edit`, the peers' spans of the finding's name while a named instance was down (see
    the module docstring). Returns how many spans changed."""
    from tailscope.analysis.whatif.queue_levers import _calm

    f = x.frame
    spans = x.spans_named(finding.get("span_name"), in_requests=False)
    if len(spans) < MIN_SPANS:
        return 0
    named = named_instances(f.instances, finding)
    changed = 0
    for inst in named:
        mine = spans[f.instance[spans] == inst]
        down = _down(np.sort(f.start[mine]))
        if down is None:
            continue
        a, b = down
        for peer in np.unique(f.instance[spans]).tolist():
            if peer == inst or peer in named:
                continue
            theirs = spans[f.instance[spans] == peer]
            if len(theirs) < MIN_SPANS:
                continue
            dur = f.dur[theirs].astype(np.float64)
            calm = _calm(f.start[theirs], dur, deep=True)
            if calm is None or calm.sum() < MIN_SPANS:
                continue
            near = (f.start[theirs] >= a) & (f.start[theirs] < b + (b - a)) & ~calm
            if not near.any():
                continue
            rank = (np.argsort(np.argsort(dur[near])) + 0.5) / near.sum()
            new = np.quantile(dur[calm], rank)
            rows = theirs[near]
            edit.dur[rows] = np.fmin(edit.dur[rows], np.minimum(new, dur[near]))
            changed += int(near.sum())
    return changed


def with_restart_peers(x: Inputs, lever: Lever | None, finding: dict[str, Any]) -> Lever | None:
    """`prewarmed` with the peers' spans re-timed where a named instance was down first (restarted)."""
    if lever is None:
        return None
    moved = peers_while_down(x, finding, lever.edit)
    if moved:
        lever.model += ("; where a named instance was down first (restarted), its peers' spans in that "
                        "stretch and its drain take their calm times at their own rank")
    lever.params = {**lever.params, "peer_spans_retimed": moved}
    return lever
