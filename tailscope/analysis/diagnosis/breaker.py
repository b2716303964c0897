"""A call every request makes until a circuit breaker stops it: how many requests made it before.

Mechanism. A circuit breaker counts a call's failures (its errors, its deadline's expiries) and, past a
threshold, opens: from then on the requests skip the call and answer from a fallback, until a trial
call after its open interval succeeds. In the spans, a call that nearly every request made stops
being made at one moment, right after its calls began to end in error, and stays (nearly) absent. Its
presence over the whole run is then low, as a call made only on some path's requests (a cache's miss
path) is; but it was every request's call, and its slow and failed calls before the breaker opened are
the dependency's tail. Telling the two apart: a miss path's share of requests does not drop to
nothing in one step after a burst of errors (a cache warming up declines gradually and succeeds).

`presence_before_open`: the call's presence over the stretch before it stopped, where the run shows a
breaker opening (presence >= EVERY in the windows before, <= GONE in every window after, and an error
rate >= FAILING in the last windows before the stop); None where it does not.
"""

from __future__ import annotations

import numpy as np

from tailscope.analysis.diagnosis.attributes import error_flags
from tailscope.analysis.diagnosis.model import Context

WINDOWS = 20
EVERY = 0.8  # made by nearly every request before the stop
GONE = 0.1  # made by hardly any after it (a half-open breaker's trial calls)
FAILING = 0.2  # the calls just before the stop end in error this often (the failures that opened it)
MIN_BEFORE = 2  # windows of the call made by every request before the stop
MIN_AFTER = 3  # windows without it after the stop


def presence_before_open(ctx: Context, code: int, top: np.ndarray) -> float | None:
    """The presence of the call `code` (its spans: the mask `top`) among the requests that arrived
    before a breaker stopped it (see the module docstring), or None where no breaker shows."""
    f = ctx.frame
    n = len(f.requests)
    if n < 100:
        return None
    arrival = f.start[f.requests.root].astype(np.float64)
    edges = np.quantile(arrival, np.linspace(0.0, 1.0, WINDOWS + 1))
    win = np.clip(np.searchsorted(edges, arrival, side="right") - 1, 0, WINDOWS - 1)
    spans = np.nonzero(top)[0]
    has = np.bincount(f.request[spans], minlength=n) > 0
    made = np.bincount(win, weights=has.astype(np.float64), minlength=WINDOWS)
    size = np.maximum(np.bincount(win, minlength=WINDOWS), 1)
    presence = made / size
    low = presence <= GONE
    # the stop: the first window from which the call stays (nearly) absent to the run's end
    tail_low = np.flip(np.logical_and.accumulate(np.flip(low)))
    if not tail_low.any():
        return None
    stop = int(np.argmax(tail_low))
    if WINDOWS - stop < MIN_AFTER or stop < MIN_BEFORE + 1:
        return None
    before = presence[:stop]
    # every request made it before the stop (the stop's own window may be part made)
    if float(np.median(before)) < EVERY or (before[:-1] < 0.5).any():
        return None
    flags = error_flags(f, code)
    if flags is None:
        return None
    err = np.zeros(len(f), bool)
    err[np.asarray(flags[0])[np.asarray(flags[1], bool)]] = True
    last = spans[np.isin(win[f.request[spans]], (stop - 2, stop - 1))]
    if not len(last) or float(err[last].mean()) < FAILING:
        return None
    return float(has[win < stop].mean())
