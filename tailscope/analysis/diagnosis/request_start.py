"""When the front proxy took a request, from the header it stamps: a wait before the handler starts
that no span covers.

A load balancer or reverse proxy (nginx's `$msec`, Heroku's router, many ingress controllers) stamps
`X-Request-Start` (or `X-Queue-Start`) with the moment it forwarded the request: `t=<epoch seconds>`,
or the epoch in ms / µs / ns. An instrumentation that records request headers keeps it on the SERVER
span (`http.request.header.x-request-start`). Where the proxy itself is not traced, the time from it
to the handler's span start is the request's wait for a worker (a full thread pool's accept queue):
queueing reads it as a wait and the header's time as the request's arrival.
"""

from __future__ import annotations

import re

import numpy as np

from tailscope.analysis.diagnosis.frame import TraceFrame

KEY = re.compile(r"(^|[._])x[-_](request|queue)[-_]start$", re.IGNORECASE)
SKEW_NS = 5_000_000  # a proxy's clock ahead of the service's by a few ms still reads as no wait
OLDEST_NS = 60_000_000_000  # a header older than a minute is not this request's arrival


def _epoch_ns(text: str) -> float:
    """'t=1767225600.002' (seconds), or an epoch in ms / µs / ns by its size; NaN if unreadable."""
    try:
        value = float(str(text).strip().removeprefix("t=").strip())
    except ValueError:
        return float("nan")
    if value > 1e17:
        return value
    if value > 1e14:
        return value * 1e3
    if value > 1e11:
        return value * 1e6
    return value * 1e9


def header_arrivals(frame: TraceFrame) -> np.ndarray | None:
    """Per request: when its front proxy took it (frame time, ns), NaN where its root has no such
    header or an implausible one; None where no request has one."""
    reqs = frame.requests
    if frame.attribute_source is None or reqs is None or len(reqs) == 0:
        return None
    out = np.full(len(reqs), np.nan)
    for code in np.unique(frame.name[reqs.root]).tolist():
        for key, (idx, values) in frame.attributes(int(code)).items():
            if not KEY.search(key):
                continue
            idx = np.asarray(idx, np.int64)
            is_root = (frame.request[idx] >= 0) & (reqs.root[np.maximum(frame.request[idx], 0)] == idx)
            at = np.array([_epoch_ns(v) for v, ok in zip(values, is_root.tolist(), strict=True) if ok])
            out[frame.request[idx[is_root]]] = at - frame.t0
    start = reqs.start.astype(np.float64)
    out[~((out <= start + SKEW_NS) & (out >= start - OLDEST_NS))] = np.nan
    return out if np.isfinite(out).any() else None
