"""timeout_retry below one call: attempts a proxy (a sidecar, a client library's retry policy) cut at its
per-try timeout and sent again, seen as one CLIENT span holding two or more SERVER spans of its callee.

Mechanism. A mesh sidecar or a retrying HTTP/gRPC client below the application's instrumentation
gives each attempt a per-try timeout; when it passes, the attempt is abandoned (the callee's handler
runs on: nothing tells it) and the call is sent again, to another instance, after a backoff. The
caller's span covers every attempt and ends with the last answer; the callee traced each attempt as a
SERVER span of its own under that one CLIENT span. So:

- some CLIENT spans hold two or more SERVER children of one callee service, one starting after the
  other (an application never sends one call to two servers at once by itself),
- the later attempt starts while the earlier still runs in most of them (it was given up, not
  answered with an error and retried at once),
- no retry starts before a floor well above the callee's usual time (>= 1.5x its median): the per-try
  timeout, plus a backoff (the start offsets sit close above that floor),
- where an earlier attempt still ends before the later one, the call waits for the later one (it was
  abandoned); a hedged request instead takes whichever answer comes first.

Weight: the time the requests lose to the abandoned attempts (from the first attempt's start to the
last one's start), as a share of the tail excess. slow_dependency on the call is then part of this
finding (ctx.notes["retried_names"], as for the attempts timeout_retry.py sees as spans of their own).
"""

from __future__ import annotations

import numpy as np

from tailscope.analysis.diagnosis.frame import KIND_CLIENT, KIND_SERVER
from tailscope.analysis.diagnosis.model import Context, Finding
from tailscope.analysis.diagnosis.stats import clamp01, excess_share, logistic, material_weight, ms
from tailscope.analysis.diagnosis.where import busiest, main_service

PATTERN = "timeout_retry"
MIN_RETRIED = 20
ABOVE_MEDIAN = 1.5  # the earliest retries come this many times the callee's median after the first
FLOOR_SPREAD = 0.5  # the retries' start offsets: median within this much of their floor (p5) above it
TOLERANCE_NS = 1_000_000
CUT_ALL = 0.5  # as timeout_retry's: a straggler whose calls are mostly cut is the retries' case
ADVICE = (
    "{where} is cut below the application, by a proxy or a client library's retry policy, at about "
    "{timeout:.0f} ms per try in {rate:.1%} of calls and sent again to another instance: each of those "
    "requests pays the whole per-try timeout before its next attempt starts, while the abandoned attempt "
    "still runs on {slow}. Find why the first attempts are slow there (an instance of the callee that is "
    "slow: outlier detection ejects it); set the per-try timeout from the callee's own p99, and hedge "
    "instead of waiting where the callee is idempotent; keep a retry budget so retries do not multiply "
    "the load when the callee is the problem."
)


def hidden_retries(ctx: Context) -> list[Finding]:
    f = ctx.frame
    srv = np.nonzero((f.kind == KIND_SERVER) & (f.parent >= 0) & (f.request >= 0))[0]
    srv = srv[f.kind[f.parent[srv]] == KIND_CLIENT]
    if len(srv) < 50:
        return []
    # attempts: SERVER children of one CLIENT span in one callee service, in order of start
    key = f.parent[srv].astype(np.int64) * (len(f.services) + 1) + f.service[srv]
    order = np.lexsort((f.start[srv], key))
    s, k = srv[order], key[order]
    first_of = np.r_[True, k[1:] != k[:-1]]
    second = np.nonzero(~first_of & np.r_[False, first_of[:-1]])[0]
    if len(second) < MIN_RETRIED:
        return []
    group_start = np.nonzero(first_of)[0]
    group_end = np.r_[group_start[1:], len(s)] - 1
    findings = []
    calls = f.name[f.parent[s[second]]]
    for code in np.unique(calls).tolist():
        mine = calls == code
        if mine.sum() < MIN_RETRIED:
            continue
        a2 = s[second[mine]]
        a1 = s[second[mine] - 1]
        last = s[group_end[np.searchsorted(group_start, second[mine], side="right") - 1]]
        single = s[group_start[group_end == group_start]]  # calls answered by one attempt
        single = single[f.name[f.parent[single]] == code]
        finding = _judge(ctx, int(code), a1, a2, last, single)
        if finding is not None:
            findings.append(finding)
    return findings


def _judge(
    ctx: Context, code: int, a1: np.ndarray, a2: np.ndarray, last: np.ndarray, single: np.ndarray
) -> Finding | None:
    f = ctx.frame
    call = f.parent[a2]
    offset = (f.start[a2] - f.start[a1]).astype(np.float64)
    if len(single) < 50:
        return None
    usual = float(np.median(f.dur[single]))
    floor, middle = np.quantile(offset, [0.05, 0.5])
    if floor < ABOVE_MEDIAN * usual or middle - floor > FLOOR_SPREAD * floor:
        return None
    abandoned = float((f.end[a1] > f.start[a2]).mean())
    # where the first attempt still answered before the retry did, the call waited for the retry
    early = f.end[a1] + TOLERANCE_NS < f.end[a2]
    waited = (
        float((f.end[call[early]] + TOLERANCE_NS >= f.end[a2[early]]).mean()) if early.sum() >= 10 else None
    )
    strength = logistic(abandoned, 0.5, 0.1) * logistic(floor / max(usual, 1.0), 2.0, 0.3)
    if waited is not None:
        strength *= logistic(waited, 0.7, 0.08)
    else:
        strength = min(strength, 0.45)  # a hedge and a retry look alike where no first answer came early
    straggler = _straggler(f, a1, np.concatenate([single, a1, a2]))
    if straggler is not None:  # the replica's slow answers, not the cut attempts, make the tail
        strength = min(strength, 0.45)
    lost = (f.start[last] - f.start[a1]).astype(np.float64)
    per_request = np.zeros(ctx.n_requests)
    np.maximum.at(per_request, f.request[a1], lost)
    share = clamp01(excess_share(per_request, ctx.split))
    confidence = strength * material_weight(share)
    if confidence < 0.05:
        return None
    calls_total = int((f.name == code).sum())
    rate = len(a2) / max(calls_total, 1)
    caller = main_service(f, call)
    callee = main_service(f, a1)
    inst = np.bincount(f.instance[a1], minlength=len(f.instances))
    slow = [f.instances[i] for i in np.argsort(-inst)[:2] if inst[i] > 0]
    instances = busiest(f, f.instance[call])
    name = f.names[code]
    summary = (
        f"'{name}' from {caller} to {callee}: {len(a2)} calls ({rate:.1%}) hold two or more attempts of "
        f"{callee} (its SERVER spans under one call): a proxy or client library below the call cut an "
        f"attempt and sent it again. The retries start at least {ms(floor):.1f} ms after the first "
        f"attempt (p5; median {ms(middle):.1f} ms), {floor / max(usual, 1.0):.1f}x {callee}'s usual "
        f"{ms(usual):.1f} ms: a per-try timeout; {abandoned:.0%} of the first attempts were still running "
        "when their retry started (abandoned, not failed)"
        + (
            f"; where a first attempt answered before its retry, the call still waited for the retry in "
            f"{waited:.0%}"
            if waited is not None
            else ""
        )
        + f". The first attempts ran on {', '.join(slow)}; the time lost to them carries {share:.0%} of "
        f"the tail excess."
        + (
            f" But {straggler} is slow on every call and answers most of them (they are not cut): the "
            "straggler's answers make the tail (see slow_dependency)."
            if straggler
            else ""
        )
    )
    stats = {
        "retried_calls": len(a2),
        "retry_rate": round(rate, 4),
        "per_try_timeout_ms": ms(floor),
        "retry_offset_p50_ms": ms(middle),
        "callee_usual_ms": ms(usual),
        "first_attempts_abandoned": round(abandoned, 3),
        "waited_for_the_retry": None if waited is None else round(waited, 3),
        "first_attempt_instances": slow,
        "callee_service": callee,
        "tail_excess_share": round(share, 3),
        "service": caller,
        "instances": instances,
        "span_code": code,
        "abandoned": a1,
        "attempts_below_one_call": True,
        "straggler_answering": straggler,
    }
    stage = ctx.stage_of_name(code)
    where = f"'{name}'" + (f" ({stage})" if stage else "")
    advice = ADVICE.format(where=where, timeout=ms(floor), rate=rate, slow=", ".join(slow))
    return Finding(PATTERN, clamp01(confidence), stage, name, {"summary": summary, "stats": stats}, advice)


def _straggler(f, first: np.ndarray, attempts: np.ndarray) -> str | None:
    """The callee instance most first attempts ran on (>= 75 %) where it is slow on every call (median
    >= 2x the other instances') and answers most of its calls (fewer than 50 % cut): a straggler whose
    answers, not the retries, make the tail. None otherwise."""
    worst = int(np.bincount(f.instance[first]).argmax())
    if float((f.instance[first] == worst).mean()) < 0.75:
        return None
    mine = f.instance[attempts] == worst
    if mine.sum() < 20 or mine.all() or (f.instance[first] == worst).sum() >= CUT_ALL * mine.sum():
        return None
    own, rest = float(np.median(f.dur[attempts[mine]])), float(np.median(f.dur[attempts[~mine]]))
    return f.instances[worst] if own >= 2.0 * rest else None
