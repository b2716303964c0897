"""Whether an untraced callee's slow episode follows what its callers asked of it.

A callee whose spans are not traced shows only as the caller's CLIENT span. Where its calls get slow
for a while (slow_dependency's episode), the caller cannot see why inside the callee; what it can see is
whether it asked for more at the same time. A callee slow by itself (a degraded host, a background job,
a restart) is slow whatever it is asked; a callee whose capacity ran short because its work grew (more
calls a second, longer inputs, another kind of request that costs more, such as a model adapter to
load) is slow exactly while the demand is up: its calls queue for its capacity, and naming the callee
as "slow" blames its speed for the callers' load (queueing, a payload or a cache inside it: the
caller's side cannot tell which).

Test, over WINDOWS slices of the run by the calls' send time (slices with >= MIN_CALLS calls): the
share of slow calls (over the call's p95) per slice against each measure of demand per slice: the calls
sent in it (their rate), the mean of each numeric attribute of the call that names a size or a count
(tokens, bytes, rows, items; not a time) and the share of each value of each attribute with 2..64 values
(an operation, a model; not the peer the call went to: an address, host, port or URL says who answered,
not what was asked). A measure follows the episode where its mean over the slowest quarter of the
slices (by slow share) stands >= Z standard deviations of the calm slices above their mean, and
materially so (>= RISE x for rates and sizes; >= SHIFT more of the calls and 1.5 x for a value's share).
The calm slices are the run's first quarter, those of them at or under the median slow share (>= 3):
the demand before anything changed. The queue that heavier work builds lags the work and comes and goes
while the heavier work lasts (a cache fills, a backlog grows and drains), so the slowest slices are
compared with the demand before the change, not ranked with every slice.
"""

from __future__ import annotations

import re

import numpy as np

from tailscope.analysis.diagnosis.dependency_tail import EPISODE

WINDOWS = 16
MIN_CALLS = 10
Z = 3.0
RISE = 1.1
SHIFT = 0.03
SIZE = re.compile(r"token|size|bytes|length|count|rows|items|chars|batch", re.IGNORECASE)
# who answered, not what was asked: a call routed to another peer (a replica out, a fallback host)
PEER = re.compile(r"peer|address|host|port|url|server\.|endpoint|instance", re.IGNORECASE)
TIME = re.compile(r"time|latency|duration|wait|delay|elapsed|(^|[._])(ms|us|ns|s)$", re.IGNORECASE)


def _numbers(values: list) -> np.ndarray | None:
    try:
        out = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError):
        return None
    return out if np.isfinite(out).mean() > 0.9 else None


def follows_demand(f, code: int, spans: np.ndarray, d: np.ndarray) -> tuple[str, float, float] | None:
    """(what the callers asked more of, z, its level in the slowest slices over the calm ones)
    where an untraced call's slow share over the run's slices follows a measure of demand; None
    otherwise. `spans` the calls (span indices of name `code`), `d` their durations."""
    if len(spans) < WINDOWS * MIN_CALLS:
        return None
    start = f.start[spans].astype(np.float64)
    window = np.minimum(((start - start.min()) / (np.ptp(start) + 1.0) * WINDOWS).astype(np.int64),
                        WINDOWS - 1)
    calls = np.bincount(window, minlength=WINDOWS).astype(np.float64)
    used = calls >= MIN_CALLS
    if used.sum() < WINDOWS // 2:
        return None
    slow = np.bincount(window, weights=(d > np.quantile(d, 0.95)).astype(np.float64), minlength=WINDOWS)
    rate = (slow / np.maximum(calls, 1.0))[used]
    if np.ptp(rate) <= 0:
        return None
    top = rate >= np.quantile(rate, 0.75)
    measures: list[tuple[str, np.ndarray, bool]] = [("calls sent", calls[used], False)]
    at = np.full(len(f), -1, np.int64)
    at[spans] = np.arange(len(spans))
    for key, (idx, values) in f.attributes(code).items():
        if PEER.search(key):
            continue
        n = min(len(idx), len(values))
        mine = at[np.asarray(idx, np.int64)[:n]]
        keep = mine >= 0
        if keep.sum() < 0.5 * len(spans):
            continue
        w = window[mine[keep]]
        vals = [v for v, k in zip(values[:n], keep, strict=True) if k]
        nums = _numbers(vals)
        if nums is not None:
            if SIZE.search(key) and not TIME.search(key) and len(np.unique(nums[:5000])) >= 10:
                ok = np.isfinite(nums)
                mean = np.bincount(w[ok], weights=nums[ok], minlength=WINDOWS) / np.maximum(
                    np.bincount(w[ok], minlength=WINDOWS), 1)
                measures.append((f"'{key}'", mean[used], False))
            continue
        text = np.asarray([str(v) for v in vals])
        kinds, codes = np.unique(text, return_inverse=True)
        if not 2 <= len(kinds) <= 64:
            continue
        per = np.bincount(w, minlength=WINDOWS).astype(np.float64)
        for k in range(len(kinds)):
            share = np.bincount(w[codes == k], minlength=WINDOWS) / np.maximum(per, 1.0)
            if 0.01 <= float((codes == k).mean()) <= 0.9:
                measures.append((f"'{key}' = {kinds[k]}", share[used], True))
    calm = np.zeros(len(rate), bool)
    calm[: len(rate) // 4] = True  # the run's first slices: the callee's demand before any change
    calm &= ~top & (rate <= np.median(rate))
    if top.sum() < 2 or calm.sum() < 3:
        return None
    best = None
    for what, level, is_share in measures:
        high, low = float(level[top].mean()), float(level[calm].mean())
        spread = float(level[calm].std(ddof=1))
        z = (high - low) / max(spread, 1e-9 * max(abs(low), 1.0))
        risen = (high - low >= SHIFT and high >= 1.5 * max(low, 1e-9)) if is_share else high >= RISE * low
        if z >= Z and risen and (best is None or z > best[1]):
            best = (what, float(z), float(high / max(low, 1e-9)))
    return best


def asked_more(f, code: int, spans: np.ndarray, d: np.ndarray, kind: str | None,
               traced: bool) -> tuple[str, float, float] | None:
    """follows_demand for a call whose callee is not traced and whose tail is an episode; else None."""
    return follows_demand(f, code, spans, d) if kind == EPISODE and not traced else None


def sentence(asked: tuple[str, float, float]) -> str:
    """What slow_dependency says of an episode that follows the callers' demand."""
    what, z, level = asked
    return (f" But its slow calls come while its callers ask more of it ({what}: {level:.2f}x in the slowest "
            f"slices of the run against the calm ones, z {z:.1f}): the callee's capacity ran "
            "short for the work sent (a queue, a payload or a cache inside it, which the caller's side "
            "cannot tell apart), not a callee slow by itself: a possible cause.")
