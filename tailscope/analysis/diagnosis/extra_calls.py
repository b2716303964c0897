"""Calls made more times than usual under one parent: the conditional copies of a call.

One span name often covers several calls of one kind: an instrumentation names a database span by
its operation and database (`SELECT fraud`), an HTTP client by its method. A request that makes the
call once as a rule, and two or four times on some requests (a read-through cache's store queries
on a miss, one per missing key; a retry; another page), makes the extra copies on a conditional
path. Such copies belong to the mechanism of that path (cache_miss, timeout_retry), not to the
dependency every request calls: by structure only, a span is *extra* where it comes after the usual
number of same-name siblings under its parent (in start order), the usual number being the one that
nearly every parent making the call at all makes (ALWAYS of them: the conditional path may be taken
by most requests, as in a cache emptied by evictions).
"""

from __future__ import annotations

import numpy as np

from tailscope.analysis.diagnosis.attributes import error_flags

ALWAYS = 0.9  # the usual number of calls: as many as this share of the parents make at least
WAIT_RATIO = 4.0  # an idle wait before the extra copies this many times the usual one and the call's
MIN_WAIT_NS = 1e6  # ... and at least 1 ms: a sleep the caller chose (waited_before)

def beyond_usual(
    parent: np.ndarray, start: np.ndarray, spans: np.ndarray, group: np.ndarray | None = None
) -> np.ndarray:
    """Per span of `spans` (one name): whether it comes after the usual number of same-name siblings
    under its parent. With `group` (a value per span of the frame, e.g. its parent's name), the usual
    number is each group's own: a gRPC call's SERVER span sits alone under its CLIENT span of the same
    name, while the CLIENT spans of a fan-out are many under theirs. All False where no parent makes
    more calls than its usual number."""
    if len(spans) == 0:
        return np.zeros(0, bool)
    p = parent[spans]
    order = np.lexsort((start[spans], p))
    keys, first, counts = np.unique(p[order], return_index=True, return_counts=True)
    kinds = np.zeros(len(keys), np.int64) if group is None else group[spans][order][first]
    usual = np.zeros(len(keys), np.int64)
    for g in np.unique(kinds).tolist():
        mine = kinds == g
        usual[mine] = int(np.floor(np.quantile(counts[mine], 1.0 - ALWAYS)))
    if (counts <= usual).all():
        return np.zeros(len(spans), bool)
    ordinal = np.empty(len(spans), np.int64)
    ordinal[order] = np.arange(len(spans)) - np.repeat(first, counts)
    limit = np.empty(len(spans), np.int64)
    limit[order] = np.repeat(usual, counts)
    return ordinal >= limit


def extra_mask(f, code: int, inside: np.ndarray | None = None) -> np.ndarray:
    """A span mask over the frame: spans of name `code` (inside requests, or `inside`) beyond the
    usual count under their parent."""
    sel = (f.name == code) & (f.parent >= 0) & (f.request >= 0 if inside is None else inside)
    spans = np.nonzero(sel)[0]
    out = np.zeros(len(f), bool)
    parent_name = np.where(f.parent >= 0, f.name[np.maximum(f.parent, 0)], -1)
    out[spans[beyond_usual(f.parent, f.start, spans, parent_name)]] = True
    return out


def retries(f, spans: np.ndarray, abandoned: np.ndarray | None) -> np.ndarray:
    """Per span of `spans`: whether its parent holds an attempt of the same name that the caller gave
    up on (timeout_retry's abandoned attempts): the copy is the call made again, not a slow path."""
    if abandoned is None or len(abandoned) == 0 or len(spans) == 0:
        return np.zeros(len(spans), bool)
    width = len(f.names) + 1
    given_up = f.parent[abandoned].astype(np.int64) * width + f.name[abandoned]
    return np.isin(f.parent[spans].astype(np.int64) * width + f.name[spans], given_up)


def on_slow_path(
    f,
    spans: np.ndarray,
    kids: np.ndarray,
    slow: np.ndarray,
    rare: float = 0.6,
    abandoned: np.ndarray | None = None,
) -> np.ndarray:
    """Of `kids` (children of `spans`), the calls made on the slow spans' path: those of a name found
    under at most `rare` of the spans and at least twice as often under the slow ones, and the extra
    copies of a name (beyond its usual count under a parent, not a retry of an `abandoned` attempt)
    found at least twice as often under the slow ones. `slow` is a mask over `spans`."""
    out = np.zeros(len(kids), bool)
    if len(kids) == 0 or not slow.any() or slow.all():
        return out
    pos = np.full(len(f), -1)
    pos[spans] = np.arange(len(spans))
    owner = pos[f.parent[kids]]
    for code in np.unique(f.name[kids]).tolist():
        sel = np.nonzero(f.name[kids] == code)[0]
        extra = beyond_usual(f.parent, f.start, kids[sel]) & ~retries(f, kids[sel], abandoned)
        for part, limit in ((sel, rare), (sel[extra], 1.0)):
            if len(part) == 0:
                continue
            present = np.zeros(len(spans), bool)
            present[owner[part]] = True
            if present.mean() <= limit and present[slow].mean() >= 2.0 * max(present[~slow].mean(), 1e-9):
                out[part] = True
    return out


def failed_before(f, code: int, mine: np.ndarray, extra: np.ndarray) -> bool:
    """Whether the calls made before the extra copies (same name, same parent) ended in error far more
    often than the others: the copy is the call made again after a failure (a retry), not a store
    queried on a miss."""
    flags = error_flags(f, code)
    if flags is None:
        return False
    err = np.zeros(len(f), bool)
    err[flags[0][flags[1]]] = True
    again = np.isin(f.parent[mine], f.parent[extra])
    usual = ~np.isin(mine, extra)
    before, others = mine[usual & again], mine[usual & ~again]
    if len(before) == 0:
        return False
    rate, base = float(err[before].mean()), float(err[others].mean()) if len(others) else 0.0
    return rate >= 0.5 and rate >= 2.0 * base



def waited_before(f, mine: np.ndarray, extra: np.ndarray) -> bool:
    """Whether, under the parents making extra copies of a call (`mine`: its spans, one name), the
    caller sat idle (no child of the parent running) before a copy far longer than the parents making
    the usual number do, and than the call itself takes: the call made again after a back-off sleep
    (a check that found the data stale, a rate limit), not a store queried on a miss, whose queries
    follow the lookup and each other at once."""
    if len(extra) == 0 or len(mine) == 0:
        return False
    kids = np.nonzero(np.isin(f.parent, np.unique(f.parent[mine])))[0]
    kids = kids[np.lexsort((f.start[kids], f.parent[kids]))]
    first = np.r_[True, f.parent[kids][1:] != f.parent[kids][:-1]]
    group = np.cumsum(first) - 1
    t0 = int(min(f.start[kids].min(), f.end[kids].min()))
    width = int(f.end[kids].max()) - t0 + 1
    # the latest end among the earlier children of the same parent (a running maximum per parent)
    ends = np.maximum.accumulate((f.end[kids] - t0).astype(np.int64) + group.astype(np.int64) * width)
    idle = np.zeros(len(kids))
    idle[1:] = np.maximum(f.start[kids][1:] - t0 + group[1:].astype(np.int64) * width - ends[:-1], 0)
    idle[first] = 0.0
    copy = np.isin(kids, mine) & ~first
    longest = np.zeros(group[-1] + 1)
    np.maximum.at(longest, group[copy], idle[copy])
    with_extra = np.zeros(group[-1] + 1, bool)
    with_extra[group[np.isin(kids, extra)]] = True
    made = np.zeros(group[-1] + 1, bool)
    made[group[copy]] = True
    usual = float(np.median(longest[made & ~with_extra])) if (made & ~with_extra).any() else 0.0
    waited = float(np.median(longest[with_extra]))
    return waited > max(WAIT_RATIO * max(usual, float(np.median(f.dur[mine]))), MIN_WAIT_NS)
