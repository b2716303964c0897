"""timeout_retry where the first attempt is refused, not cut: answered at once with an error (429 Too
Many Requests, a 503 with Retry-After, a throttling error) and made again after the client waits.

Mechanism. A server that sheds load or enforces a quota answers a call at once with an error status and
says when to come back (Retry-After), or the client's policy backs off; the client sleeps, then sends the
same call again. The request loses the refused attempt and the wait, a gap in which nothing of the call
runs. A deadline ends the first attempt late at one duration (timeout_retry.py); a refusal ends it early,
and the time goes into the gap. So, for a span name whose parents hold two or more of it one after the
other (timeout_retry.retry_groups):

- the first attempts of the repeated groups end in error (where the spans carry a status), far more often
  than the name's other calls (a refusal is what makes the client call again),
- the wait from a first attempt's end to the next one's start is long against the call itself: its median
  at least the call's median duration and 1 ms (a client sleeping, not the next line of code).

Strength = logistic(first attempts' error rate - the other calls', 0.6, 0.1) x logistic(the wait over the
call's median, 1, 0.25); weight: the time lost (the first attempt's start to the last one's) as a share of
the tail excess.
"""

from __future__ import annotations

import numpy as np

from tailscope.analysis.diagnosis.model import Context, Finding
from tailscope.analysis.diagnosis.stats import clamp01, excess_share, logistic, material_weight, ms
from tailscope.analysis.diagnosis.where import busiest, main_service

PATTERN = "timeout_retry"
MIN_WAIT_NS = 1_000_000
ADVICE = (
    "{where} is refused with an error at once in {rate:.1%} of calls and made again after a wait of about "
    "{wait:.0f} ms (the server's Retry-After or the client's back-off), so each of those requests pays the "
    "wait. Stay under the peer's limit instead of hitting it: a client-side rate limiter (a token bucket "
    "below the quota), fewer calls (batching, caching the answers), a higher quota; where a refusal comes, "
    "degrade or fail over rather than sleep past the latency target, and bound retries with a retry budget."
)


def refused_retries(ctx: Context, code: int, g: dict, errors: tuple[float, float] | None) -> Finding | None:
    """A finding for span name `code` whose retry groups `g` (timeout_retry.retry_groups) start with a
    refused attempt and a wait; `errors`: the first attempts' and the other calls' error rates."""
    if errors is None:
        return None
    f = ctx.frame
    a1, a2 = g["first"], g["second"]
    wait = (f.start[a2] - f.end[a1]).astype(np.float64)
    median = float(np.median(f.dur[g["spans"]]))
    typical = float(np.median(wait))
    if typical < max(median, MIN_WAIT_NS):
        return None
    refused = errors[0] - errors[1]
    strength = logistic(refused, 0.6, 0.1) * logistic(typical / max(median, 1.0), 1.0, 0.25)
    lost = (f.start[g["last"]] - f.start[a1]).astype(np.float64)
    per_request = np.bincount(f.request[a1], weights=lost, minlength=ctx.n_requests)
    share = excess_share(per_request, ctx.split)
    confidence = strength * material_weight(share) * 0.95
    if confidence < 0.05:
        return None
    name = f.names[code]
    rate = g["retried_parents"] / max(g["parents"], 1)
    service = main_service(f, a1)
    top = busiest(f, f.instance[a1])
    summary = (
        f"'{name}' (from {service}) is made again after a first attempt in {rate:.1%} of the calls that make "
        f"it; {errors[0]:.0%} of the first attempts end in error vs {errors[1]:.0%} of the other calls, "
        f"after {ms(float(np.median(f.dur[a1]))):.1f} ms (the call's median is {ms(median):.1f} ms), and the "
        f"next attempt starts {ms(typical):.1f} ms later: refused, then a back-off (a rate limit's "
        f"Retry-After, a load-shedding peer), not a deadline. The time lost to the refused attempts and "
        f"the waits is {share:.0%} of the tail excess (instances: {', '.join(top)})."
    )
    stats = {
        "span_code": code, "abandoned": g["abandoned"], "mechanism": "refused, then a back-off",
        "back_off_ms": ms(typical), "first_attempt_ms": ms(float(np.median(f.dur[a1]))),
        "call_median_ms": ms(median), "retry_rate": round(rate, 4), "retried_calls": g["retried_parents"],
        "first_attempt_error_rate": round(errors[0], 3), "other_call_error_rate": round(errors[1], 3),
        "tail_excess_share": round(share, 3), "service": service, "instances": top,
    }
    advice = ADVICE.format(where=f"'{name}'", rate=rate, wait=ms(typical))
    return Finding(PATTERN, clamp01(confidence), ctx.stage_of_name(code) or "downstream", name,
                   {"summary": summary, "stats": stats}, advice)
