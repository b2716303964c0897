"""unexplained_tail: where a material tail goes when no recognised mechanism accounts for it.

"No cause found" is only right when there is no material tail (p99 ≥ 1.5 × p50, or a tail excess of
more than a few ms, counts as material). Otherwise the report must still say where the tail excess
goes. After every detector has run, the share of the tail excess that their findings at confidence
≥ 0.5 account for is summed (capped at 1); the span names carrying the rest (each name's exclusive
time, tail requests minus the others, over the latency excess) become findings of their own, largest
first, as long as each carries a material share and the shares of all findings stay within 100 %.

Each names the span and its stage, how much of the excess it carries and what is known of it without
a mechanism: whether it is cut by a deadline (its slow calls end at one duration, its longest, in
error: the expiry shows, and what held them past it is the cause), a conditional path (present in
the slow requests more often than in the others: a fallback after a miss, a retry, a recompute, a
lazy load), heavy-tailed (its own p99 far
above its p50), or simply slower in the tail. Confidence is that of a measurement, not of a cause:
the share times how severe the tail is ((p99/p50 - 1) / 3, at most 1), kept below 0.5 and listed
after the named causes: an accounting, never a cause that outranks one. A span that a finding names,
however weakly, or that wraps or sits inside one named at 0.3 or more, is left to that finding.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from tailscope.analysis.diagnosis.attributes import error_flags
from tailscope.analysis.diagnosis.model import Context, Finding
from tailscope.analysis.diagnosis.shares import apportion
from tailscope.analysis.diagnosis.stats import ms
from tailscope.vocabulary import ALL_STAGES

PATTERN = "unexplained_tail"
MATERIAL_RATIO = 1.5  # p99 / p50 of request latency
MATERIAL_EXCESS_NS = 3_000_000  # or a tail excess above 3 ms
MIN_SHARE = 0.15  # a span name must carry this much of the excess to be reported
MAX_CONFIDENCE = 0.45
MAX_FINDINGS = 3
CUT_TIGHT, CUT_TIGHT_NS = 0.03, 500_000  # spans ending within 3 % (0.5 ms) of the longest: at the deadline
CUT_MIN, CUT_SHARE = 20, 0.2  # at least this many, and this share of the slow spans
ADVICE = (
    "No recognised mechanism (GC pause, lock, queue, cache miss, cold start, slow dependency, network, "
    "the forward pass) explains this part of the tail. Look at what the slow requests do in '{span}' that "
    "the others do not: {hint}. Add a span or an attribute where the time goes (a cache-hit flag, the "
    "branch taken, the retry count) and the diagnosis can name it next time."
)
QUEUE_HINT = (
    "it is time waiting in a queue with no burst behind it (random arrivals against a server near its "
    "capacity queue now and then), so more capacity, a shorter batch wait or admission control shortens it"
)
HINTS = {
    "conditional": "it runs in more of the slow requests than of the others, so find what triggers it "
    "(a miss, a fallback, a retry, a recompute) and make that rarer or cheaper",
    "heavy_tailed": "its own duration is heavy-tailed, so compare its slow and fast calls' attributes and "
    "inputs (size, tenant, key), and bound it with a deadline",
    "slower": "it takes longer in the slow requests, so compare their inputs and attributes with the "
    "others' (the Tail vs body page ranks them)",
    "deadline": "its slow calls end at its deadline in error and the request goes on without them (a "
    "fallback or an error answer), so the tail is the deadline's value: find what held those calls past "
    "it (what else was slow over the same moments: a pause, a queue, a cold instance, a slow callee "
    "behind it) and fix that, or lower the deadline where the fallback is good enough",
}


def tail_ratio(ctx: Context) -> float:
    """p99 / p50 of request latency."""
    p50, p99 = np.percentile(ctx.frame.requests.latency, [50, 99])
    return float(p99 / max(p50, 1))


def material(ctx: Context) -> bool:
    if len(ctx.frame.requests.latency) < 50:
        return False
    return tail_ratio(ctx) >= MATERIAL_RATIO or ctx.split.excess_ns >= MATERIAL_EXCESS_NS


def explained_share(findings: list[Finding]) -> float:
    """The share of the tail excess the named causes account for (at most 1; see shares.py)."""
    return apportion([fd for fd in findings if fd.pattern != PATTERN])


def _occurrence(ctx: Context, name: int) -> tuple[float, float, np.ndarray]:
    """Share of tail and of body requests that contain the name, and per-request exclusive ns of it."""
    f, sp = ctx.frame, ctx.split
    spans = (f.name == name) & (f.request >= 0)
    n = ctx.n_requests
    per_request = np.bincount(f.request[spans], weights=f.excl[spans], minlength=n)
    present = np.bincount(f.request[spans], minlength=n) > 0
    return float(present[sp.tail].mean()), float(present[sp.body].mean()), per_request


def _describe(ctx: Context, name: int) -> tuple[str, dict]:
    f = ctx.frame
    in_tail, in_body, per_request = _occurrence(ctx, name)
    durations = f.dur[(f.name == name) & (f.request >= 0)]
    p50, p99 = np.percentile(durations, [50, 99]) if len(durations) else (0.0, 0.0)
    stats = {
        "present_in_tail": round(in_tail, 3),
        "present_in_body": round(in_body, 3),
        "span_p50_ms": round(ms(p50), 3),
        "span_p99_ms": round(ms(p99), 3),
        "tail_ms_per_request": round(ms(per_request[ctx.split.tail].mean()), 3),
        "body_ms_per_request": round(ms(per_request[ctx.split.body].mean()), 3),
    }
    if (cut := deadline_cut(f, name)) is not None:
        stats |= cut
        return "deadline", stats
    if in_body < 0.9 and in_tail >= max(1.5 * in_body, in_body + 0.1):
        return "conditional", stats
    if p99 >= 5 * max(p50, 1):
        return "heavy_tailed", stats
    return "slower", stats


def deadline_cut(f, name: int) -> dict | None:
    """Whether the slow spans of `name` are cut by a deadline whose expiry shows: many of them end at
    one duration, the name's longest (nothing lasts longer), in error, where its fast spans do not
    fail. The calls waited the deadline and an error or a fallback answered; what held them past it
    is the cause, not this span. Their deadline, share and error rate, or None."""
    spans = np.nonzero((f.name == name) & (f.request >= 0))[0]
    if len(spans) < 100:
        return None
    d = f.dur[spans].astype(np.float64)
    p50 = float(np.median(d))
    slow = (d > np.quantile(d, 0.9)) & (d >= 3 * p50)
    top = float(d.max())
    at = np.abs(d - top) <= max(CUT_TIGHT * top, CUT_TIGHT_NS)
    if at.sum() < CUT_MIN or not slow.any() or at[slow].mean() < CUT_SHARE:
        return None
    flags = error_flags(f, name)
    if flags is None:
        return None
    err = np.zeros(len(f), bool)
    err[np.asarray(flags[0])[np.asarray(flags[1], bool)]] = True
    cut_err, fast_err = float(err[spans[at]].mean()), float(err[spans[~slow]].mean())
    if cut_err < 0.5 or fast_err > 0.1:
        return None
    return {"deadline_ms": round(ms(top), 3), "slow_at_deadline": round(float(at[slow].mean()), 3),
            "at_deadline_in_error": round(cut_err, 3)}


def _chart(ctx: Context, reported: set[int], shares: np.ndarray) -> dict:
    f = ctx.frame
    top = np.argsort(-shares)[:8]
    rows = []
    for k in top:
        if shares[k] <= 0:
            continue
        in_tail, in_body, _ = _occurrence(ctx, int(k))
        rows.append((f.names[k], float(shares[k]), in_tail, in_body, int(k) in reported))
    return {
        "kind": "tail_excess_by_span",
        "span": [r[0] for r in rows],
        "share": [round(r[1], 4) for r in rows],
        "present_in_tail": [round(r[2], 3) for r in rows],
        "present_in_body": [round(r[3], 3) for r in rows],
        "unexplained": [r[4] for r in rows],
    }


def account(
    ctx: Context, findings: list[Finding], covered: Callable[[str], bool] = lambda name: False
) -> list[Finding]:
    """Findings for the part of a material tail that `findings` leave unexplained (maybe none).
    `covered(name)`: whether a finding already speaks for that span name (its span, or one it wraps
    or is wrapped by)."""
    if not material(ctx) or ctx.split.excess_ns <= 0:
        return []
    room = 1.0 - explained_share(findings)
    if room < MIN_SHARE:
        return []
    f = ctx.frame
    named = {fd.span_name for fd in findings if fd.span_name}  # a named cause, however weak, speaks for it
    severity = min(1.0, max(0.0, (tail_ratio(ctx) - 1.0) / 3.0))  # 1.6x: 0.2; 4x and more: 1
    shares = np.clip(ctx.name_share, 0.0, None)
    order = np.argsort(-shares)
    candidates = [
        int(k)
        for k in order
        if shares[k] >= MIN_SHARE and f.names[k] not in named and not covered(f.names[k])
    ]
    out: list[Finding] = []
    for k in candidates[:MAX_FINDINGS]:
        share = min(float(shares[k]), room)
        if share < MIN_SHARE:
            break
        room -= share
        kind, stats = _describe(ctx, k)
        stage_code = int(ctx.name_stage[k])
        stage = ALL_STAGES[stage_code] if stage_code >= 0 else None
        hint = QUEUE_HINT if stage == "queue" else HINTS[kind]
        span = f.names[k]
        what = {
            "conditional": (
                f"present in {stats['present_in_tail']:.0%} of the slow requests but "
                f"{stats['present_in_body']:.0%} of the others (a conditional path)"
            ),
            "heavy_tailed": (
                f"heavy-tailed (p99 {stats['span_p99_ms']:g} ms vs p50 {stats['span_p50_ms']:g} ms)"
            ),
            "slower": (
                f"{stats['tail_ms_per_request']:g} ms per slow request vs "
                f"{stats['body_ms_per_request']:g} ms per other request"
            ),
            "deadline": (
                f"cut by a deadline: {stats.get('slow_at_deadline', 0):.0%} of its slow calls end at "
                f"{stats.get('deadline_ms', 0):g} ms, its longest, "
                f"{stats.get('at_deadline_in_error', 0):.0%} of those in error (the expiry; what held them "
                "past it is the cause)"
            ),
        }[kind]
        stats |= {
            "tail_excess_share": round(share, 4),
            "character": kind,
            "excess_ms": round(ms(ctx.split.excess_ns), 3),
        }
        where = f"'{span}'" + (f" ({stage})" if stage else "")
        summary = (
            f"The slowest requests take {ms(ctx.split.excess_ns):.1f} ms more than the others; "
            f"{share:.0%} of that is spent in {where}, {what}. No recognised mechanism explains it."
        )
        out.append(
            Finding(
                pattern=PATTERN,
                confidence=min(MAX_CONFIDENCE, share * severity),
                stage=stage,
                span_name=span,
                evidence={"summary": summary, "stats": stats},
                advice=ADVICE.format(span=span, hint=hint),
            )
        )
    if out:  # one chart for all of them, the spans they name marked
        chart = _chart(ctx, {f.names.index(fd.span_name) for fd in out}, shares)
        for fd in out:
            fd.evidence["chart"] = chart
    return out
