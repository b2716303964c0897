"""A rate limit's refusals: the peer answers a call over the key's limit at once with 429 and a
Retry-After; the client sleeps that long and calls again. No lever of a slow or hung callee answers it
(the callee is not slow: it refused), nor a hedge (a copy is refused too). The fix (the calls within
the limit: a client-side limiter below the quota, a higher quota), by what the trace shows:

- the refusals as events on the call's one span (retry_events.py; OpenInference's LangChain callbacks:
  a `retry` event with `retry.after_s`): each call loses the time from its first refusal to the end of
  its last Retry-After sleep; what came before the first refusal (the wait for a connection, the
  first attempt's round trip) and after the last sleep (the answered attempt) stays;
- the attempts as spans of their own, the first ones refused (the diagnosis' timeout_retry with the
  mechanism "refused, then a back-off"): each retried call answered by its first attempt in the
  answered attempt's time, the refused attempts and the sleeps gone; and where the attempts take a
  connection from a client pool (pool_waits.py: the waits before them are a full pool's hand-overs),
  the waits replayed through the pool with the calls asking when they first did: the retries that
  came back together after their sleeps (a Retry-After sends them to one window's start) no longer
  crowd the pool.

Assumptions: the limit no longer refuses any call; a sleep is as long as the Retry-After asked (a
client that adds jitter sleeps a little longer: that part stays in); the arrivals as in the run."""

from __future__ import annotations

from typing import Any

import numpy as np

from tailscope.analysis.whatif.levers import SOFTWARE, Inputs, Lever
from tailscope.analysis.whatif.retime import Edit


def refused(frame, name: str | None) -> bool:
    """Whether a span name's spans report refusals with a wait (events the frame can read)."""
    got = frame.retries(name) if name else None
    return got is not None and len(got[0]) > 0


REFUSED = "refused, then a back-off"  # timeout_retry's mechanism for refused attempts (refused_retries.py)


def refused_attempts(finding: dict[str, Any]) -> bool:
    """Whether a timeout_retry finding's attempts were refused (not cut at a deadline)."""
    return ((finding.get("evidence") or {}).get("stats") or {}).get("mechanism") == REFUSED


def _attempts_lever(x: Inputs, finding: dict[str, Any]) -> Lever | None:
    from tailscope.analysis.whatif.cause_levers import _answered_at_once
    from tailscope.analysis.whatif.pool_waits import requeued_name

    edit = _answered_at_once(x, finding, None)
    if edit is None:
        return None
    name = finding.get("span_name")
    calls = x.spans_named(name, in_requests=False)
    pooled = requeued_name(x, edit, calls)
    return Lever(
        f"no_refusals:{name}",
        f"'{name}' within the rate limit (no refused attempts, no back-off)",
        SOFTWARE,
        "each call made again after a refusal is answered at its first attempt in the answered "
        "attempt's time: the refused attempts and the sleeps after them leave the critical path"
        + ("; the waits for the client pool's connections replayed with the calls asking when they first "
           "did" if pooled else ""),
        edit,
        pattern="timeout_retry",
        span_name=name,
        requeue=True,
        params={"pool_waits_retimed": pooled},
    )


def no_refusals(x: Inputs, finding: dict[str, Any]) -> Lever | None:
    """None where the finding's span reports no refusal with a wait (no events read, or none) and its
    attempts are not refused ones."""
    name = finding.get("span_name")
    f = x.frame
    if not refused(f, name):
        return _attempts_lever(x, finding) if refused_attempts(finding) else None
    idx, offset, wait = f.retries(name)
    spans, first = np.unique(idx, return_index=True)  # rows sorted by (span, offset)
    slept_to = np.zeros(len(f), np.int64)
    np.maximum.at(slept_to, idx, offset + wait)
    dur = f.dur[spans].astype(np.float64)
    lost = np.clip(np.minimum(slept_to[spans], dur) - offset[first], 0, None)
    edit = Edit.none(len(f))
    edit.dur[spans] = dur - lost
    return Lever(
        f"no_refusals:{name}",
        f"'{name}' within the rate limit (no 429s, no Retry-After sleeps)",
        SOFTWARE,
        "each call the peer refused (429 with a Retry-After, reported as events on its span) loses the "
        "time from its first refusal to the end of its last Retry-After sleep; the wait before the first "
        "attempt and the answered attempt stay",
        edit,
        pattern="timeout_retry",
        span_name=name,
        requeue=True,
        params={"refused_calls": len(spans), "sleep_s": round(float(wait.sum()) / 1e9, 1)},
    )
