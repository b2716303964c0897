"""lock_contention: one stage whose duration grows with how many requests are in it at once.

Statistic. For every span name outside the queue and the request root, the *concurrency at start* of a
span is the number of same-name spans on the same instance that started strictly earlier and are still
running (spans that start at the same instant, like the members of one batch, do not count). Under a
mutex each holder in front adds one hold time, so duration ~ own work + concurrency x hold time: a
strong rank correlation (Spearman rho) and a positive robust slope (Theil-Sen) that is the hold time.
The name with the strongest correlation, weighted by its share of the tail excess, is reported; the
slope is the estimated hold time and the intercept the work outside the lock. A span that holds the
model's forward pass below it is no candidate: it holds the batch queue too, which grows with the
crowd without any lock.

Materiality. The modelled wait of a span is slope x concurrency. It must be a real part of the span's
time either on average (share of its mean duration) or in the tail (share of the requests' tail excess
it accounts for): at a low arrival rate the lock is rarely contended, so waits are a small part of
the mean, yet the few requests that queue on it are the tail.
"""

from __future__ import annotations

import numpy as np

from tailscope.analysis.diagnosis.frame import NO_STAGE
from tailscope.analysis.diagnosis.model import Context, Finding
from tailscope.analysis.diagnosis.stats import clamp01, logistic, ms, spearman, theil_sen
from tailscope.vocabulary import ALL_STAGES

PATTERN = "lock_contention"
ADVICE = (
    "Requests serialise on a shared critical section in {where}: each request waits for the others in it "
    "(about {hold} ms per request ahead). Shrink the critical section (move work out of the lock, copy "
    "then release), shard the lock or the shared resource, or give each worker its own instance (per-worker "
    "tokenizer/model/client, thread-local buffers). More hardware will not help while one lock serialises."
)
SKIP_STAGES = {ALL_STAGES.index("queue")}
MIN_SPANS = 60
MAX_FIT = 20_000


def concurrency_at_start(ctx: Context, spans: np.ndarray) -> np.ndarray:
    """Same-name, same-instance spans running when each span starts (started strictly before it)."""
    f = ctx.frame
    group = f.instance[spans].astype(np.int64) * (len(f.names) + 1) + f.name[spans]
    horizon = int(f.end.max()) + 2
    s_key = group * horizon + f.start[spans]
    e_key = group * horizon + f.end[spans]
    starts = np.sort(s_key)
    ends = np.sort(e_key)
    started_before = np.searchsorted(starts, s_key, side="left")
    ended_by = np.searchsorted(ends, s_key, side="right")
    # zero-length spans that start exactly at s ended "by s" without having started before it
    zero = np.sort(s_key[f.dur[spans] == 0])
    ended_by -= np.searchsorted(zero, s_key, side="right") - np.searchsorted(zero, s_key, side="left")
    group_first = np.searchsorted(starts, group * horizon, side="left")
    group_first_end = np.searchsorted(ends, group * horizon, side="left")
    return np.maximum((started_before - group_first) - (ended_by - group_first_end), 0)


def detect(ctx: Context) -> list[Finding]:
    f = ctx.frame
    if len(f.requests) < 50:
        return []
    inside = (f.request >= 0) & (f.depth > f.depth[f.requests.root][np.maximum(f.request, 0)])
    candidates = np.nonzero(np.bincount(f.name[inside], minlength=len(f.names)) >= MIN_SPANS)[0]
    wraps_forward = _wraps_forward(ctx)
    results = []
    for code in candidates:
        stage = int(ctx.name_stage[code])
        if stage in SKIP_STAGES or wraps_forward[code]:
            continue
        spans = np.nonzero(inside & (f.name == code))[0]
        if len(spans) > MAX_FIT:
            spans = np.sort(ctx.rng.choice(spans, MAX_FIT, replace=False))
        conc = concurrency_at_start(ctx, spans).astype(np.float64)
        if conc.max(initial=0) < 2 or np.mean(conc > 0) < 0.05:
            continue
        d = f.dur[spans].astype(np.float64)
        rho = spearman(conc, d)
        slope, intercept = theil_sen(conc, d, ctx.rng)
        results.append((code, stage, spans, conc, d, rho, slope, intercept))
    if not results:
        return []
    findings = []
    for code, stage, spans, conc, d, rho, slope, intercept in results:
        if rho < 0.2 or slope <= 0:
            continue
        share = _inclusive_share(ctx, code)
        explained = slope * conc.mean() / max(d.mean(), 1.0)
        wait = np.minimum(slope * conc, d)  # the modelled wait, never more than the span itself
        in_span = np.zeros(len(f), bool)
        in_span[spans] = True
        values = np.zeros(len(f))
        values[spans] = wait
        tail_wait = ctx.share_of(in_span, values)
        strength = logistic(rho, 0.45, 0.08)
        weight = logistic(share, 0.08, 0.03)
        # a real share of the tail excess, or of the mean with at least a few per cent of the tail
        material = max(
            logistic(tail_wait, 0.2, 0.06), logistic(explained, 0.15, 0.05) * logistic(tail_wait, 0.06, 0.02)
        )
        confidence = strength * weight * material
        name = f.names[code]
        stage_name = ALL_STAGES[stage] if stage != NO_STAGE else None
        summary = (
            f"'{name}' duration rises with the number of requests already in it on the same instance: "
            f"Spearman rho={rho:.2f}, slope {ms(slope):.2f} ms per request ahead (estimated hold time), "
            f"{ms(intercept):.2f} ms of its own work; contention explains {explained:.0%} of its mean "
            f"duration and {tail_wait:.0%} of the requests' tail excess, and the span "
            f"carries {share:.0%} of the tail excess."
        )
        stats = {
            "spearman_rho": round(rho, 3),
            "hold_ms": ms(slope),
            "own_work_ms": ms(intercept),
            "mean_concurrency": round(float(conc.mean()), 2),
            "max_concurrency": int(conc.max()),
            "contention_share_of_duration": round(explained, 3),
            "contention_share_of_tail_excess": round(tail_wait, 3),
            "tail_excess_share": round(share, 3),
            "spans": len(spans),
        }
        pick = np.linspace(0, len(spans) - 1, min(len(spans), 3000)).astype(np.int64)
        chart = {
            "kind": "wait_vs_concurrency",
            "concurrency": conc[pick].tolist(),
            "duration_ms": (d[pick] / 1e6).round(3).tolist(),
            "slope_ms": ms(slope),
            "intercept_ms": ms(intercept),
        }
        advice = ADVICE.format(
            where=f"'{name}'" + (f" ({stage_name})" if stage_name else ""), hold=f"{ms(slope):.1f}"
        )
        findings.append(
            Finding(
                PATTERN,
                clamp01(confidence),
                stage_name,
                name,
                {"summary": summary, "stats": stats, "chart": chart},
                advice,
            )
        )
    findings.sort(key=lambda x: -x.confidence)
    # one finding per stage: a lock's parent span shows the same contention as the lock span itself
    seen, out = set(), []
    for fd in findings:
        if fd.stage in seen and fd.stage is not None:
            continue
        seen.add(fd.stage)
        out.append(fd)
    return out[:2]


def _wraps_forward(ctx: Context) -> np.ndarray:
    """Per span name: most of its spans hold a model_forward span below them. Such a span also holds
    the wait for a batch to fill and a free model, which grows with how many requests are in it
    whether or not a lock is taken (a handler or controller span around the whole request)."""
    f = ctx.frame
    holds = np.zeros(len(f), bool)
    cur = f.parent[np.nonzero(ctx.span_stage_mask("model_forward") & (f.request >= 0))[0]]
    for _ in range(64):
        cur = cur[cur >= 0]
        cur = cur[~holds[cur]]
        if len(cur) == 0:
            break
        holds[cur] = True
        cur = f.parent[cur]
    inside = f.request >= 0
    total = np.bincount(f.name[inside], minlength=len(f.names))
    return np.bincount(f.name[inside & holds], minlength=len(f.names)) * 2 > total


def _inclusive_share(ctx: Context, code: int) -> float:
    """Tail-excess share of a name's spans counted with their descendants (top-level occurrences)."""
    f = ctx.frame
    mask = f.name == code
    p = f.parent
    nested = np.zeros(len(f), bool)
    has_p = p >= 0
    nested[has_p] = f.name[p[has_p]] == code
    return ctx.share_of(mask & ~nested, f.dur)
