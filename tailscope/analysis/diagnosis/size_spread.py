"""A dependency's heavy tail that is the size of what it is asked (slow_dependency's cap).

Mechanism. A callee whose work is proportional to what a call asks of it (a model generating the
tokens it is asked for, a scan of the rows a query selects, a file of the bytes requested) answers a
large request slowly and a small one fast: its calls are as heavy-tailed as the sizes asked, while
each unit of work takes the same time all run. That is the callee's healthy spread; a dependency is a
cause where the time per unit of what is asked changed (a degraded region, a slow shard: the calls
take longer than their size predicts for a while, or on one host) or grew a tail of its own.

Statistic, per candidate call (>= MIN_CALLS calls): the calls that do the work (where the call has a
fast mode of answers given without it, a cache in front answering in milliseconds, only the slow
mode: stats.gmm2 on log duration, Ashman's D >= 2, a slow mode >= 3x the fast one), the size-like
numeric attribute of the call (large_payload.span_sizes: >= 10 distinct values on >= 90 % of the
calls) that predicts its duration most closely (Spearman >= MIN_RHO), the Theil-Sen line of duration
on it, and each call's duration over the line's prediction (its time per unit asked). The tail is the
size's where that ratio has no unusual tail of its own (dependency_tail.abnormal_tail: no episode, no
costly slow path, no tail without a ceiling, no straggler) and nearly all of the slowest calls (the
call's top 5 %: >= WITHIN_SHARE of them) are within STRETCH x their size's prediction.
"""

from __future__ import annotations

import math

import numpy as np

from tailscope.analysis.diagnosis.dependency_tail import abnormal_tail
from tailscope.analysis.diagnosis.large_payload import span_sizes
from tailscope.analysis.diagnosis.model import Context
from tailscope.analysis.diagnosis.stats import gmm2, spearman, theil_sen

MIN_CALLS = 200
MIN_RHO = 0.8  # the size predicts the call's time at least this closely (rank correlation)
STRETCH = 1.5  # a call above 1.5 x its size's prediction was slowed by something else
WITHIN_SHARE = 0.8  # ... and of the slowest 5 % of the calls this many are within it
FAST_MODE_RATIO = math.log(3.0)  # a fast mode (answers given without the work) 3x below the work's


def tail_of_size(ctx: Context, code: int, spans: np.ndarray, d: np.ndarray) -> dict | None:
    """{size key, Spearman, share of the slowest calls within STRETCH x their size's prediction} where
    the call's tail is the size of what it is asked (module docstring); None otherwise."""
    f = ctx.frame
    if f.attribute_source is None or len(spans) < MIN_CALLS:
        return None
    work = np.ones(len(spans), bool)
    x = np.log(np.maximum(d, 1.0))
    mix = gmm2(x if len(x) <= 5000 else ctx.rng.choice(x, 5000, replace=False))
    if mix is not None and mix.separation >= 2.0 and mix.mu[1] - mix.mu[0] >= FAST_MODE_RATIO:
        work = x >= mix.threshold  # the calls that did the work (a cache in front answered the rest)
    if work.sum() < MIN_CALLS:
        return None
    best, best_rho, best_key = None, MIN_RHO, ""
    for key, v in span_sizes(ctx, code, spans[work]):
        ok = np.isfinite(v)
        if ok.mean() < 0.9 or len(np.unique(v[ok])) < 10:
            continue
        rho = spearman(v[ok], d[work][ok])
        if rho >= best_rho:
            best, best_rho, best_key = v, rho, key
    if best is None:
        return None
    ok = np.isfinite(best)
    dw, sw = d[work][ok], spans[work][ok]
    slope, intercept = theil_sen(best[ok], dw, ctx.rng)
    if slope <= 0:
        return None
    ratio = dw / np.maximum(intercept + slope * best[ok], 1.0)
    top = dw >= np.quantile(d, 0.95)
    within = float((ratio[top] <= STRETCH).mean()) if top.any() else 1.0
    scaled = ratio * float(np.median(dw))  # the time per unit asked, at the calls' scale
    if within < WITHIN_SHARE or abnormal_tail(f.start[sw], scaled, scaled, False) is not None:
        return None
    return {"size": best_key, "spearman": round(best_rho, 3), "slowest_within_prediction": round(within, 3)}


def sentence(sized: dict) -> str:
    """What slow_dependency says of a call whose tail is the size of what it is asked."""
    return (f" But its calls take what their size asks ({sized['size']}: Spearman {sized['spearman']:.2f}; "
            f"{sized['slowest_within_prediction']:.0%} of its slowest calls within {STRETCH}x of what their "
            "size predicts, the time per unit asked steady all run): the callee's healthy spread by the size "
            "of what it is asked, not a slow dependency: a possible cause.")
