"""queueing at a callee whose spans are not traced: its workers are busy, the calls wait in its
accept queue, and the wait shows only as a longer call.

Mechanism. A server with a fixed pool of workers (gunicorn sync workers, a thread pool, a model
server's instances) takes a call when a worker is free; while a burst of traffic outruns the pool,
calls wait in its listen backlog. Where the server's SERVER span is traced, the wait is the gap
before it (accept_queue.py); where it is not, the caller's CLIENT span holds it. A slow dependency
is slow at whatever rate the calls come; a queue grows while arrivals outrun its workers and drains
after. So a call whose time rises and falls with the arrival rate of the requests, in a run whose
arrivals come in bursts (index of dispersion >> 1), is a queue at the callee.

Statistic, per CLIENT span name whose callee is untraced (<= 10 % of its calls have a SERVER child)
and that most requests make: per request, its time in the call over the median; its mean over ~100
time bins against the requests' arrivals per bin, correlated at lags 0..MAX_LAG (the queue builds
while the burst lasts and drains after), as queueing.py does for the wait before the work; strength =
logistic(r, 0.5, 0.08) x logistic(dispersion, 2.5, 0.5), weight = logistic(share, 0.3, 0.08) of the
call's time over its median in the tail excess.

A callee that throttles (a provisioned capacity, a rate limit answering "retry later") also slows its
calls while a burst lasts, but not by a wait for a worker: each call is made again and again by the
client's retry policy, with backoff sleeps between the attempts. Where the calls say so (a retry count
on the span: `retry_attempts`, `aws.retries`, `http.request.resend_count`; or one child span per
attempt, >= 2 of one name under the call), the part of the extra time in retried calls is not this
queue's: the confidence keeps (1 - that part). Calls whose long waits end right after another
request's *last* call to the peer (transaction_waits.py: a row lock or a pooler's connection held to
COMMIT) keep (1 - that finding's confidence): a callee's worker is freed by every call's end.
"""

from __future__ import annotations

import re

import numpy as np

from tailscope.analysis.diagnosis.accept_queue import ADVICE
from tailscope.analysis.diagnosis.frame import KIND_CLIENT, KIND_SERVER
from tailscope.analysis.diagnosis.model import Context, Finding
from tailscope.analysis.diagnosis.queueing import MAX_LAG, dispersion, time_bins
from tailscope.analysis.diagnosis.stats import clamp01, excess_share, lagged_correlation, logistic, ms
from tailscope.analysis.diagnosis.where import busiest, main_service

PATTERN = "queueing"
MECHANISM = "a queue at an untraced callee"
PEER_KEYS = ("peer.service", "server.address", "net.peer.name", "rpc.service")
RETRY_KEY = re.compile(r"retr|attempt|resend", re.IGNORECASE)


def retried(ctx: Context, code: int) -> np.ndarray:
    """Per span: whether the call was made more than once (a retry count >= 1 on the span, or >= 2
    child spans of one name under it: one per attempt)."""
    f = ctx.frame
    out = np.zeros(len(f), bool)
    for key, (idx, values) in ctx.frame.attributes(code).items():
        if RETRY_KEY.search(key):
            count = np.asarray([float(v) if str(v).replace(".", "", 1).isdigit() else 0.0 for v in values])
            out[np.asarray(idx, np.int64)[count >= 1]] = True
    kids = np.nonzero((f.parent >= 0) & (f.name[np.maximum(f.parent, 0)] == code))[0]
    kids = kids[f.parent[kids] >= 0]
    if len(kids):
        pair = f.parent[kids].astype(np.int64) * (len(f.names) + 1) + f.name[kids]
        values, counts = np.unique(pair, return_counts=True)
        out[(values[counts >= 2] // (len(f.names) + 1))] = True
    return out


def _callee(ctx: Context, code: int) -> str | None:
    """What the calls name as their callee: the first peer key with one value on most of them."""
    attrs = ctx.frame.attributes(code)
    for key in PEER_KEYS:
        if key in attrs:
            values = np.asarray([str(v) for v in attrs[key][1]])
            names, counts = np.unique(values, return_counts=True)
            if len(names) and counts.max() >= 0.8 * len(values):
                return str(names[counts.argmax()])
    return None


def detect(ctx: Context) -> list[Finding]:
    f = ctx.frame
    reqs = f.requests
    if len(reqs) < 100:
        return []
    b, bins, width = time_bins(reqs.arrival)
    arrivals = np.bincount(b, minlength=bins).astype(np.float64)
    spread = dispersion(arrivals)
    if spread < 1.5:  # a steady load: nothing for a queue to follow
        return []
    answered = np.zeros(len(f), bool)
    child = np.nonzero((f.kind == KIND_SERVER) & (f.parent >= 0))[0]
    answered[f.parent[child]] = True
    best = None
    for code in ctx.client_names.tolist():
        calls = (f.name == code) & (f.kind == KIND_CLIENT) & (f.request >= 0)
        if calls.sum() < 0.5 * len(reqs) or answered[calls].mean() > 0.1:
            continue
        per = ctx.per_request(calls, f.dur.astype(np.float64))
        has = per > 0
        excess = np.where(has, np.maximum(per - float(np.median(per[has])), 0.0), 0.0)
        count = np.bincount(b[has], minlength=bins)
        mean = np.bincount(b, weights=excess, minlength=bins) / np.maximum(count, 1)
        lag, r, _ = lagged_correlation(arrivals[1:-1], mean[1:-1], MAX_LAG)
        share = excess_share(excess, ctx.split)
        again = ctx.per_request(calls & retried(ctx, code), np.ones(len(f))) > 0
        part_retried = float(excess[again].sum() / max(excess.sum(), 1.0))
        confidence = logistic(r, 0.5, 0.08) * logistic(spread, 2.5, 0.5) * logistic(share, 0.3, 0.08)
        confidence *= 1 - part_retried
        # waits that end as another request's transaction ends (transaction_waits.py) are for a lock
        # or a pooled connection that transactions hold, not for a worker that any call's end frees
        confidence *= 1 - ctx.notes.get("transaction_waits", {}).get(int(code), 0.0)
        if best is None or confidence > best[0]:
            best = (confidence, code, r, lag, share, excess, part_retried)
    if best is None or best[0] < 0.05:
        return []
    confidence, code, r, lag, share, excess, part_retried = best
    callee = _callee(ctx, code)
    name = f.names[code]
    calls = np.nonzero((f.name == code) & (f.request >= 0))[0]
    service = main_service(f, calls)
    where = busiest(f, f.instance[calls])
    peak = float(arrivals[1:-1].max()) / (width / 1e9)
    mean_rate = float(arrivals[1:-1].mean()) / (width / 1e9)
    summary = (
        f"The calls '{name}' from {service} to {callee or 'an untraced service'} take longer while more "
        f"requests arrive and recover after (r={r:.2f} at a lag of {ms(lag * width):.0f} ms; arrivals peak "
        f"at {peak:.1f} rps vs {mean_rate:.1f} rps on average, dispersion {spread:.1f}): a queue for the "
        f"callee's workers, not a slower callee. The extra time carries {share:.0%} of the tail excess; "
        "the callee is not traced, so its wait shows inside the call."
        + (f" {part_retried:.0%} of the extra time is in calls made more than once (a throttling callee "
           "and retries would do that too)." if part_retried >= 0.1 else "")
    )
    stats = {"services": [service] + ([callee] if callee else []), "instances": where, "callee": callee,
             "correlation": round(r, 3), "lag_ms": ms(lag * width), "arrival_dispersion": round(spread, 2),
             "peak_arrival_rate_rps": round(peak, 1), "mean_arrival_rate_rps": round(mean_rate, 1),
             "extra_p99_ms": ms(np.quantile(excess, 0.99)), "tail_excess_share": round(share, 3),
             "extra_in_retried_calls": round(part_retried, 3),
             "mechanism": MECHANISM, "call_names": _inside(f, code)}
    server = callee or f"the service behind '{name}'"
    return [Finding(PATTERN, clamp01(confidence), "queue", name, {"summary": summary, "stats": stats},
                    ADVICE.format(server=server))]


def _inside(f, code: int) -> list[str]:
    """The call's name, then the names of the spans inside the calls two levels down (a sidecar's
    outbound and inbound spans): the queue's wait lies inside them too."""
    calls = np.nonzero((f.name == code) & (f.request >= 0))[0]
    kids = np.nonzero((f.parent >= 0) & np.isin(f.parent, calls))[0]
    grand = np.nonzero((f.parent >= 0) & np.isin(f.parent, kids))[0]
    names = {f.names[c] for c in np.unique(f.name[np.r_[kids, grand]]).tolist()} - {f.names[code]}
    return [f.names[code], *sorted(names)]
