"""What says that a span name's two duration modes are a cache (cache_miss needs it): a call made on
the slow path only (the store behind the cache, as a child or one level further down), or a cache
system (`db.system` redis, memcached, ...), a cache name or a hit/miss attribute on the span or its
children (attributes.cache_signs). A deadline and a retry, a payload whose size varies, a
heavy-tailed dependency or a pause make two modes too, with none of these.
Beside it, what else makes two modes (slow_mode_in_pauses: a slow mode made of process pauses;
slow_mode_is_gap: a call's slow mode outside the callee's span) and how much of a slow mode is spent
in the calls made on the slow path (slow_path_cover)."""

from __future__ import annotations

import numpy as np

from tailscope.analysis.diagnosis.attributes import (
    HIT_MISS_VALUES,
    cache_signs,
    has_cache_system,
    key_is_cache,
)
from tailscope.analysis.diagnosis.extra_calls import on_slow_path
from tailscope.analysis.diagnosis.frame import KIND_CLIENT, KIND_SERVER
from tailscope.analysis.diagnosis.model import NAMED, Context
from tailscope.analysis.diagnosis.stats import spearman

# a cache that works misses at a steady rate below this (a hit ratio of 90 % or more): its misses are
# the service's normal cost, not a cause (cache_miss, fallback_path)
WORKING_MISS_RATE = 0.10
# a steady miss rate of a cache whose hits answer the whole request (a response or semantic cache):
# its misses are the requests that do the service's work, which ones are slow, not why (both too)
RESPONSE_CACHE_CAP = 0.3


def cache_evidence(
    ctx: Context, code: int, spans: np.ndarray, why: dict | None, slow: np.ndarray
) -> tuple[str | None, bool]:
    """What says the two modes of a span name are a cache, and whether it marks the slow mode as the
    misses: a call made on the slow path only (a miss going to the store), as its child or one level
    further down, or a hit/miss attribute that tells the modes apart (marks them), else a cache
    system, cache name or hit/miss attribute on the span or on its children (says a cache is there,
    not that its misses are the slow mode: a cache's own writes, a slow store beside it, a call
    inside the same parent are bimodal with a cache nearby). (None, False) where nothing does."""
    f = ctx.frame
    slow_path = (why or {}).get("slow_path") or []
    if slow_path:
        label = (why or {}).get("slow_path_labels", {}).get(slow_path[0], "")
        if label.startswith("extra "):
            return f"{label} are made on the slow path only", True
        return f"'{f.names[slow_path[0]]}' is called on the slow path only", True
    below = _slow_path_below(ctx, spans, slow)
    if below is not None:
        return f"'{f.names[below]}' (below it) is called on the slow path only", True
    child = np.isin(f.parent, spans)
    kids = np.bincount(f.name[child], minlength=len(f.names))
    order = [int(c) for c in np.argsort(-kids)[:6] if kids[c] > 0]
    return cache_signs(f, [code, *order]), shows_a_miss_path(why)


def explained_by_request_kind(why: dict | None) -> bool:
    """Whether what tells the slow mode from the fast one is an attribute of the span that names a
    kind of request (a surface, a tenant, a variant of the endpoint), with no call made on the slow
    path only: two kinds of requests doing different amounts of work, not a cache's two paths (a
    cache nearby, in a child, does not make them its hits and misses)."""
    if not why or why.get("slow_path"):
        return False
    label = why["explained_by"].removeprefix("not ")
    if label.startswith(("child span ", "extra ")):
        return False
    key, _, value = label.partition("=")
    words = value.strip().lower().split()
    return not key_is_cache(key) and not (words and words[0] in HIT_MISS_VALUES)


def shows_a_miss_path(why: dict | None) -> bool:
    """Whether what tells the slow mode from the fast one is a path: a call made on the slow path only,
    or a hit/miss attribute (a cache-named key, a hit/miss value)."""
    if not why:
        return False
    if why.get("slow_path"):
        return True
    key, _, value = why["explained_by"].removeprefix("not ").partition("=")
    words = value.strip().lower().split()
    return bool(value) and (key_is_cache(key) or bool(words and words[0] in HIT_MISS_VALUES))


def slow_in_cache_calls(ctx: Context, code: int, spans: np.ndarray, slow: np.ndarray) -> float:
    """The share of the slow mode's extra time (its mean duration over the fast mode's) spent inside the
    cache's own calls: the spans themselves where they are calls to a cache system, else their CLIENT
    children that are. A miss answers fast (the key is not there) and its cost is the fallback the
    caller makes after it; a cache call that takes longer is the cache server (or the way to it) being
    slow: a redirect to another shard, a blocked shard, a stalled caller, not a miss."""
    f = ctx.frame
    if not slow.any() or slow.all():
        return 0.0
    d = f.dur[spans].astype(np.float64)
    extra = float(d[slow].mean() - d[~slow].mean())
    if extra <= 0:
        return 0.0
    if has_cache_system(f, code):
        return 1.0
    pos = np.full(len(f), -1)
    pos[spans] = np.arange(len(spans))
    child = np.nonzero((f.parent >= 0) & (f.kind == KIND_CLIENT))[0]
    child = child[pos[f.parent[child]] >= 0]
    names = [int(c) for c in np.unique(f.name[child]) if has_cache_system(f, int(c))]
    if not names:
        return 0.0
    child = child[np.isin(f.name[child], names)]
    inside = np.bincount(pos[f.parent[child]], weights=f.dur[child].astype(np.float64), minlength=len(spans))
    return float(inside[slow].mean() - inside[~slow].mean()) / extra


def _slow_path_below(ctx: Context, spans: np.ndarray, slow: np.ndarray) -> int | None:
    """A span name two levels below that the slow mode has and the fast one lacks (a lookup span
    whose store call on a miss sits inside it). Not inside a call out of the process: what a CLIENT
    span holds is that call's own making (a name lookup, a connect, a handshake on a new connection)
    or its callee's side, never a store the miss falls back to."""
    f = ctx.frame
    pos = np.full(len(f), -1)
    pos[spans] = np.arange(len(spans))
    up = f.parent
    grand = np.where(up >= 0, up[np.maximum(up, 0)], -1)
    sel = np.nonzero((grand >= 0) & (pos[np.maximum(grand, 0)] >= 0))[0]
    sel = sel[f.kind[up[sel]] != KIND_CLIENT]
    for c in np.unique(f.name[sel]).tolist():
        present = np.zeros(len(spans), bool)
        present[pos[grand[sel[f.name[sel] == c]]]] = True
        if float(present[slow].mean()) - float(present[~slow].mean()) > 0.5:
            return int(c)
    return None


def slow_path_cover(ctx: Context, spans: np.ndarray, slow: np.ndarray, codes: list[int]) -> float:
    """The share of the slow mode's extra time (its mean duration over the fast mode's) spent in CLIENT
    calls named `codes` (the calls made on the slow path) directly below the slow spans, counting of a
    call every span makes only its extra copies (extra_calls.py): a miss waiting on its store, not on
    a lock. 0 where there are none."""
    f = ctx.frame
    if not codes or not slow.any() or slow.all():
        return 0.0
    d = f.dur[spans].astype(np.float64)
    extra = float(d[slow].mean() - d[~slow].mean())
    if extra <= 0:
        return 0.0
    pos = np.full(len(f), -1)
    pos[spans] = np.arange(len(spans))
    calls = np.nonzero((f.parent >= 0) & (f.kind == KIND_CLIENT) & np.isin(f.name, codes))[0]
    calls = calls[pos[f.parent[calls]] >= 0]
    abandoned = ctx.notes.get("abandoned_attempts")
    made = on_slow_path(f, spans, calls, slow, rare=1.0, abandoned=abandoned) & slow[pos[f.parent[calls]]]
    return float(f.dur[calls[made]].sum()) / int(slow.sum()) / extra


def slow_mode_in_pauses(ctx: Context, spans: np.ndarray, slow: np.ndarray) -> bool:
    """Do most slow-mode spans sit through a process pause (gc_pause's stall episodes, or pauses the
    runtime reported) that covers at least half of their extra time?"""
    from tailscope.analysis.diagnosis.long_stalls import stall_overlap

    f = ctx.frame
    s = spans[slow]
    if len(s) == 0:
        return False
    fast_median = float(np.median(f.dur[spans[~slow]])) if (~slow).any() else 0.0
    extra = np.maximum(f.dur[s] - fast_median, 1)
    covered = np.zeros(len(s))
    for pauses in (ctx.notes.get("gc_episodes"), ctx.reported_pauses if len(f.gc_time) else None):
        if pauses is not None:
            covered = np.maximum(covered, stall_overlap(f.instance[s], f.start[s], f.end[s], *pauses))
    return float((covered >= 0.5 * extra).mean()) > 0.5


def slow_mode_is_gap(ctx: Context, spans: np.ndarray, slow: np.ndarray) -> bool:
    """For CLIENT spans whose callee's SERVER span is traced: does the client-minus-server gap, not
    the callee's time, make most of the difference between the slow and the fast mode?"""
    f = ctx.frame
    pos = np.full(len(f), -1)
    pos[spans] = np.arange(len(spans))
    child = np.nonzero((f.parent >= 0) & (f.kind == KIND_SERVER))[0]
    child = child[pos[f.parent[child]] >= 0]
    if len(child) < 0.5 * len(spans) or not slow.any() or slow.all():
        return False
    server = np.zeros(len(spans))
    server[pos[f.parent[child]]] = f.dur[child]
    has = np.zeros(len(spans), bool)
    has[pos[f.parent[child]]] = True
    d = f.dur[spans].astype(np.float64)
    gap = d - server
    s, q = slow & has, ~slow & has
    if not s.any() or not q.any():
        return False
    return float(gap[s].mean() - gap[q].mean()) > 0.5 * float(d[s].mean() - d[q].mean())


def name_share(ctx: Context, code: int) -> float:
    """The tail-excess share of a span name's spans (not counting those nested in the same name)."""
    f = ctx.frame
    mask = f.name == code
    nested = np.zeros(len(f), bool)
    has_p = f.parent >= 0
    nested[has_p] = f.name[f.parent[has_p]] == code
    return ctx.share_of(mask & ~nested, f.dur)


def cut_by_deadline(ctx: Context, why: dict | None) -> str | None:
    """The name of the call on the slow path (what tells the slow mode apart: a child made on it only,
    or its extra copies) that timeout_retry named (>= 0.5) as cut by a client deadline and made again;
    None where the slow mode is told apart otherwise (a hit/miss value) or no deadline cuts it."""
    retried = ctx.notes.get("retried_names") or {}
    if not why or not why.get("slow_path"):
        return None
    if not why["explained_by"].removeprefix("not ").startswith(("child span ", "extra ")):
        return None
    cut = [c for c in why["slow_path"] if retried.get(c, 0.0) >= NAMED]
    return ctx.frame.names[cut[0]] if cut else None


def section_crowd(ctx: Context, spans: np.ndarray, slow: np.ndarray) -> float:
    """Spearman of the slow mode with how many other spans named like the parent were running on the
    same instance when each span started. A lock wait is slow exactly when someone else is inside the
    section that holds it. Only for spans below the request root: everything is inside the root."""
    f = ctx.frame
    par = f.parent[spans]
    root_depth = f.depth[f.requests.root][np.maximum(f.request[spans], 0)]
    ok = (par >= 0) & (f.depth[np.maximum(par, 0)] > root_depth)
    if ok.mean() < 0.9 or len(np.unique(f.name[par[ok]])) != 1:
        return 0.0
    section = np.nonzero((f.name == f.name[par[ok][0]]) & (f.request >= 0))[0]
    horizon = int(f.end.max()) + 2

    def key(inst: np.ndarray, t: np.ndarray) -> np.ndarray:  # instance-major time, one sortable key
        return inst.astype(np.int64) * horizon + t

    starts = np.sort(key(f.instance[section], f.start[section]))
    ends = np.sort(key(f.instance[section], f.end[section]))
    at = key(f.instance[spans[ok]], f.start[spans[ok]])
    running = np.searchsorted(starts, at, side="left") - np.searchsorted(ends, at, side="right")
    others = np.maximum(running - 1, 0).astype(np.float64)  # the span's own section is running
    return spearman(others, slow[ok].astype(np.float64))
