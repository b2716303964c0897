"""A poll loop: a span that waits for work done elsewhere by asking again at a fixed interval.

A client that waits for a result it cannot be pushed (a task queue's result backend, a job's status
endpoint, a lock it retries) calls the same peer again and again with a sleep between the calls:
its children are copies of one call, each a short round trip, separated by idle gaps of one length
(the poll interval), much longer than the calls. How many copies a span holds follows how long it
waited (its duration is the awaited work's, rounded up to the next poll), so the copies beyond the
usual number are the wait's consequence, not a slow path taken: a span with more polls waited
longer for something else, it did not miss a cache. What tells the loop: the gaps between
consecutive same-name siblings pile up at one length (≥ 30 % of them within ±5 % of the modal gap),
that length is ≥ 1 ms and ≥ 3 × the calls' median duration.
"""

from __future__ import annotations

import numpy as np

MODE_WIDTH = np.log(1.05)  # gaps within ±5 % of one another: one interval (a timer's jitter)
MEMBER_WIDTH = np.log(1.10)  # a gap counted as one poll interval: within ±10 % of the modal one
MIN_MODE_SHARE = 0.3  # the modal interval holds this share of the gaps at least
MIN_GAPS = 20
MIN_INTERVAL_NS = 1_000_000  # 1 ms: a sleep, not the next line of code
MIN_GAP_OVER_CALL = 3.0  # the sleep is long next to the call itself: the caller idles between calls


def poll_gaps(f, calls: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
    """For `calls` (spans of one name): the gap before each from its previous same-name sibling (end
    to start; -1 for a parent's first), whether that gap is the loop's poll interval, and the
    interval (ns; 0 where the calls are no poll loop)."""
    n = len(calls)
    gap = np.full(n, -1, np.int64)
    polled = np.zeros(n, bool)
    if n < MIN_GAPS + 1:
        return gap, polled, 0.0
    par = f.parent[calls]
    order = np.lexsort((f.start[calls], par))
    same = par[order][1:] == par[order][:-1]
    between = f.start[calls][order][1:] - f.end[calls][order][:-1]
    gap[order[1:][same]] = between[same]
    ok = gap > 0
    if int(ok.sum()) < MIN_GAPS:
        return gap, polled, 0.0
    lg = np.sort(np.log(gap[ok].astype(np.float64)))
    near = np.searchsorted(lg, lg + MODE_WIDTH, side="right") - np.searchsorted(lg, lg - MODE_WIDTH)
    best = int(np.argmax(near))
    interval = float(np.exp(lg[best]))
    call_median = float(np.median(f.dur[calls]))
    if (
        near[best] < MIN_MODE_SHARE * len(lg)
        or interval < MIN_INTERVAL_NS
        or interval < MIN_GAP_OVER_CALL * max(call_median, 1.0)
    ):
        return gap, polled, 0.0
    polled[ok] = np.abs(np.log(gap[ok].astype(np.float64)) - np.log(interval)) <= MEMBER_WIDTH
    return gap, polled, interval


def poll_wait(f, spans: np.ndarray, slow: np.ndarray) -> tuple[float, str | None, float]:
    """The share of the slow mode's extra time (its mean duration over the fast mode's) that its spans
    spend idle between the polls of a poll loop among their children, the polled call's name and the
    interval (ns). (0, None, 0) where no child name polls."""
    if not slow.any() or slow.all():
        return 0.0, None, 0.0
    d = f.dur[spans].astype(np.float64)
    extra = float(d[slow].mean() - d[~slow].mean())
    if extra <= 0:
        return 0.0, None, 0.0
    pos = np.full(len(f), -1)
    pos[spans] = np.arange(len(spans))
    kids = np.nonzero(f.parent >= 0)[0]
    kids = kids[pos[f.parent[kids]] >= 0]
    best = (0.0, None, 0.0)
    for code in np.unique(f.name[kids]).tolist():
        calls = kids[f.name[kids] == code]
        gap, polled, interval = poll_gaps(f, calls)
        if interval <= 0:
            continue
        idle = np.bincount(pos[f.parent[calls[polled]]], weights=gap[polled].astype(np.float64),
                           minlength=len(spans))
        share = float(idle[slow].mean() - idle[~slow].mean()) / extra
        if share > best[0]:
            best = (share, f.names[code], interval)
    return best


def waits_on_polls(ctx, code: int, spans: np.ndarray, slow: np.ndarray) -> bool:
    """Whether the slow mode of a span name (`slow`, a mask over `spans`) is mostly (>= 50 %) idle time
    between the polls of a poll loop: a longer wait for work done elsewhere (a task's result, a job's
    status), whose extra polls are no miss path. Noted in ctx.notes["poll_waits"]."""
    polled, poll_name, interval = poll_wait(ctx.frame, spans, slow)
    if polled < 0.5:
        return False
    ctx.notes.setdefault("poll_waits", {})[code] = (poll_name, interval, polled)
    return True
