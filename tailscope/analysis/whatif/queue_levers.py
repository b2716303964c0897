"""The levers on the queue before the model and on the model itself: no wait beyond the batching
window, the queue as in calm stretches, more replicas, a faster forward pass (see levers.py)."""

from __future__ import annotations

import numpy as np

from tailscope.analysis.whatif.levers import CAPACITY, HARDWARE, SOFTWARE, Inputs, Lever
from tailscope.analysis.whatif.retime import Edit
from tailscope.analysis.whatif.served import FORWARD


def queue_within_window(x: Inputs) -> Lever | None:
    s = x.served
    if s is None:
        return None
    f = x.frame
    edit = Edit.none(len(f))
    wait = s.wait(f, x.lay)
    span = s.queue >= 0
    edit.dur[s.queue[span]] = np.minimum(wait[span], s.window_ns)
    edit.cut_before[s.forward[~span]] = np.maximum(wait[~span] - s.window_ns, 0)
    return Lever(
        "queue_within_window",
        f"No queue wait beyond the batching window ({s.window_ns / 1e6:.1f} ms)",
        SOFTWARE,
        "each request's wait before the model is cut to the batching window",
        edit,
        pattern="queueing",
        params={"window_ms": round(s.window_ns / 1e6, 3)},
    )


CALM_BINS = 100
CALM_RATIO = 2.0  # a stretch of time whose mean wait is over twice the typical stretch's is disturbed
CALM_QUANTILE = 0.25  # handler queues: the typical stretch's wait


def queue_as_calm(x: Inputs) -> Lever | None:
    s = x.served
    if s is None or len(s.request) < 2 * CALM_BINS:
        return None
    f = x.frame
    wait = s.wait(f, x.lay)
    arrival = f.start[s.forward] - wait
    span = float(arrival.max() - arrival.min()) or 1.0
    b = np.minimum(((arrival - arrival.min()) / span * CALM_BINS).astype(np.int64), CALM_BINS - 1)
    count = np.bincount(b, minlength=CALM_BINS)
    mean = np.bincount(b, weights=wait, minlength=CALM_BINS) / np.maximum(count, 1)
    typical = float(np.median(mean[count > 0]))
    calm = mean[b] <= CALM_RATIO * max(typical, 1.0)
    if calm.all() or calm.sum() < 20:
        return None
    # a disturbed request waits and is served as a request of a calm stretch (one drawn: wait and
    # forward together, so a full batch's longer forward comes with its shorter wait)
    pick = np.nonzero(calm)[0][x.rng(7).integers(0, int(calm.sum()), int((~calm).sum()))]
    rows = np.nonzero(~calm)[0]
    edit = Edit.none(len(f))
    new_wait = wait[pick]
    span_rows = s.queue[rows] >= 0
    edit.dur[s.queue[rows[span_rows]]] = new_wait[span_rows]
    edit.cut_before[s.forward[rows[~span_rows]]] = wait[rows[~span_rows]] - new_wait[~span_rows]
    edit.dur[s.forward[rows]] = f.dur[s.forward[pick]]
    return Lever(
        "queue_as_calm",
        "The queue as in calm stretches (peaks absorbed)",
        CAPACITY,
        "each request of a stretch whose mean wait is over twice the typical stretch's waits and is served "
        "as a request of a calm stretch (drawn from the run): the peaks met with capacity or admission",
        edit,
        pattern="queueing",
        params={"disturbed_share": round(float((~calm).mean()), 4)},
    )


def more_replicas(x: Inputs, extra: int = 1) -> Lever | None:
    if x.served is None or extra < 1:
        return None
    return Lever(
        f"replicas+{extra}",
        f"{extra} more replica(s) of the model",
        CAPACITY,
        "the run's arrivals replayed through a queue with more servers and the measured service "
        "times (a model: requests spread evenly at random over the replicas)",
        Edit.none(len(x.frame)),
        requeue=True,
        extra_servers=extra,
        params={"extra": extra},
    )


def forward_scaled(x: Inputs, k: float, label: str | None = None, key: str | None = None) -> Lever | None:
    f = x.frame
    edit = Edit.none(len(f))
    if x.served is None:  # no queue in front of it: the forward spans alone get faster
        fwd = np.nonzero((x.stage == FORWARD) & (f.request >= 0))[0]
        if len(fwd) == 0:
            return None
        edit.dur[fwd] = f.dur[fwd] * k
    return Lever(
        key or f"forward_x{k:g}",
        label or f"Model forward × {k:g} (faster accelerator or quantisation)",
        HARDWARE,
        "every forward pass takes k times as long; the queue before it is replayed",
        edit,
        pattern="compute_bound",
        requeue=x.served is not None,
        scale=k,
        params={"k": k},
    )


def handlers_as_calm(x: Inputs) -> Lever | None:
    """The wait for a handler thread as in calm stretches: each call of a stretch whose mean wait is
    over twice the typical stretch's waits as a call of a calm stretch on the same instances."""
    h = x.handlers
    if h is None or len(h.server) < 2 * CALM_BINS:
        return None
    f = x.frame
    wait = h.wait(f)
    arrival = (f.start[h.client] + h.net).astype(np.float64)
    span = float(arrival.max() - arrival.min()) or 1.0
    b = np.minimum(((arrival - arrival.min()) / span * CALM_BINS).astype(np.int64), CALM_BINS - 1)
    count = np.bincount(b, minlength=CALM_BINS)
    mean = np.bincount(b, weights=wait, minlength=CALM_BINS) / np.maximum(count, 1)
    # the typical stretch: the quieter quarter's (a backlog can outlast half the run: the median
    # stretch is then a backlogged one)
    typical = float(np.quantile(mean[count > 0], CALM_QUANTILE))
    calm = mean[b] <= CALM_RATIO * max(typical, 1.0)
    if calm.all() or calm.sum() < 20:
        return None
    pick = np.nonzero(calm)[0][x.rng(8).integers(0, int(calm.sum()), int((~calm).sum()))]
    rows = np.nonzero(~calm)[0]
    edit = Edit.none(len(f))
    edit.cut_before[h.server[rows]] = wait[rows] - wait[pick]
    names = sorted({f.names[k] for k in f.name[h.server].tolist()})
    return Lever(
        "queue_as_calm:handlers",
        "The wait for a handler thread as in calm stretches (peaks absorbed)",
        CAPACITY,
        "each call of a stretch whose mean wait for a handler thread is over twice the typical stretch's "
        "waits as a call of a calm stretch (drawn from the run): the peaks met with threads or admission",
        edit,
        pattern="queueing",
        span_name=names[0] if len(names) == 1 else None,
        handlers_set=True,
        params={"disturbed_share": round(float((~calm).mean()), 4)},
    )
