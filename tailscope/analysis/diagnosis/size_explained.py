"""Slowness a span's own input explains: a long input takes long to process on every instance, paused
or not (tokens through an encoder, rows through a scan). gc_pause reads a run of slow spans of several
names on one instance as a stall; a long job on a single worker makes the same picture (the job's span
is slow, the requests queued behind it wait), yet nothing stopped. So, for the few span names that are
slow most often, the size-like numeric attributes of the span or of the span holding it (its parent:
a server span recording the request's input) are compared with its duration: where one predicts it
closely (Spearman >= 0.8), a span no slower than 1.5 x what its size predicts (Theil-Sen line) was
not stretched, and is not counted slow. A paused span lasts its work plus the pause: far above the
line."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from tailscope.analysis.diagnosis.large_payload import span_sizes
from tailscope.analysis.diagnosis.model import Context
from tailscope.analysis.diagnosis.stats import spearman, theil_sen

MIN_RHO = 0.8
STRETCH = 1.5  # a span above 1.5 x its size's prediction was stretched by something else
NAMES = 3  # span names read (each an attribute query): the ones slow most often
MIN_SLOW = 20


def input_sizes(ctx: Context, code: int, spans: np.ndarray) -> Iterator[tuple[str, np.ndarray]]:
    """(key, value per span) of the size-like attributes of `spans` (of name `code`) and of the spans
    holding them (their most common parent name: a server span recording its input, the call that sent
    it); nan where absent."""
    f = ctx.frame
    yield from span_sizes(ctx, code, spans)
    parents = f.parent[spans]
    has = parents >= 0
    if has.mean() < 0.5:
        return
    p_code = int(np.bincount(f.name[parents[has]]).argmax())
    mine = has & (f.name[np.maximum(parents, 0)] == p_code)
    for key, pv in span_sizes(ctx, p_code, parents[mine]):
        v = np.full(len(spans), np.nan)
        v[mine] = pv
        yield key, v


def size_explained(ctx: Context, spans: np.ndarray, slow: np.ndarray) -> np.ndarray:
    """Per span of `spans` (leaves, with their `slow` flags): whether its duration is what its input's
    size predicts (see the module docstring)."""
    f = ctx.frame
    out = np.zeros(len(spans), bool)
    if f.attribute_source is None or not slow.any():
        return out
    codes = f.name[spans]
    slow_counts = np.bincount(codes[slow], minlength=len(f.names))
    for code in np.argsort(-slow_counts)[:NAMES].tolist():
        if slow_counts[code] < MIN_SLOW:
            break
        sel = np.nonzero(codes == code)[0]
        d = f.dur[spans[sel]].astype(np.float64)
        best, best_rho = None, MIN_RHO
        for _, v in input_sizes(ctx, code, spans[sel]):
            ok = np.isfinite(v)
            if ok.mean() < 0.5 or len(np.unique(v[ok])) < 10:
                continue
            rho = spearman(v[ok], d[ok])
            if rho >= best_rho:
                best, best_rho = v, rho
        if best is None:
            continue
        ok = np.isfinite(best)
        slope, intercept = theil_sen(best[ok], d[ok], ctx.rng)
        predicted = np.maximum(intercept + slope * np.nan_to_num(best), 1.0)
        out[sel] = ok & (d <= STRETCH * predicted)
    return out
