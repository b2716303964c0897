"""What says that a span name's two duration modes are a cache (cache_miss needs it): a call made on
the slow path only (the store behind the cache, as a child or one level further down), or a cache
system (`db.system` redis, memcached, ...), a cache name or a hit/miss attribute on the span or its
children (attributes.cache_signs). A deadline and a retry, a payload whose size varies, a
heavy-tailed dependency or a pause make two modes too, with none of these."""

from __future__ import annotations

import numpy as np

from tailscope.analysis.diagnosis.attributes import cache_signs
from tailscope.analysis.diagnosis.frame import KIND_CLIENT
from tailscope.analysis.diagnosis.model import Context


def cache_evidence(
    ctx: Context, code: int, spans: np.ndarray, why: dict | None, slow: np.ndarray
) -> str | None:
    """What says the two modes of a span name are a cache: a call made on the slow path only (a miss
    going to the store), as its child or one level further down, or a cache system, cache name or
    hit/miss attribute on the span or on its children. None where nothing does."""
    f = ctx.frame
    slow_path = (why or {}).get("slow_path") or []
    if slow_path:
        return f"'{f.names[slow_path[0]]}' is called on the slow path only"
    below = _slow_path_below(ctx, spans, slow)
    if below is not None:
        return f"'{f.names[below]}' (below it) is called on the slow path only"
    child = np.isin(f.parent, spans)
    kids = np.bincount(f.name[child], minlength=len(f.names))
    order = [int(c) for c in np.argsort(-kids)[:6] if kids[c] > 0]
    return cache_signs(f, [code, *order])


def _slow_path_below(ctx: Context, spans: np.ndarray, slow: np.ndarray) -> int | None:
    """A span name two levels below that the slow mode has and the fast one lacks (a lookup span
    whose store call on a miss sits inside it)."""
    f = ctx.frame
    pos = np.full(len(f), -1)
    pos[spans] = np.arange(len(spans))
    up = f.parent
    grand = np.where(up >= 0, up[np.maximum(up, 0)], -1)
    sel = np.nonzero((grand >= 0) & (pos[np.maximum(grand, 0)] >= 0))[0]
    for c in np.unique(f.name[sel]).tolist():
        present = np.zeros(len(spans), bool)
        present[pos[grand[sel[f.name[sel] == c]]]] = True
        if float(present[slow].mean()) - float(present[~slow].mean()) > 0.5:
            return int(c)
    return None


def slow_path_cover(ctx: Context, spans: np.ndarray, slow: np.ndarray, codes: list[int]) -> float:
    """The share of the slow mode's extra time (its mean duration over the fast mode's) spent in CLIENT
    calls named `codes` (the calls made on the slow path only) directly below the slow spans: a miss
    waiting on its store, not on a lock. 0 where there are none."""
    f = ctx.frame
    if not codes or not slow.any() or slow.all():
        return 0.0
    d = f.dur[spans].astype(np.float64)
    extra = float(d[slow].mean() - d[~slow].mean())
    if extra <= 0:
        return 0.0
    mine = np.zeros(len(f), bool)
    mine[spans[slow]] = True
    calls = np.nonzero((f.parent >= 0) & (f.kind == KIND_CLIENT) & np.isin(f.name, codes))[0]
    calls = calls[mine[f.parent[calls]]]
    return float(f.dur[calls].sum()) / int(slow.sum()) / extra
