"""The calls a timeout_retry finding names, grouped into retried calls (attempts one after the other
by one caller to one peer), and the callee work a re-timed attempt leaves behind (cause_levers.py)."""

from __future__ import annotations

from typing import Any

import numpy as np

from tailscope.analysis.whatif.levers import Inputs
from tailscope.analysis.whatif.retime import Edit

SEQUENTIAL_TOLERANCE_NS = 500_000  # an attempt ends before the next one starts (clock skew allowed)


def retried_calls(x: Inputs, finding: dict[str, Any]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The calls of the finding's span name (made by its service) grouped by caller, in start order:
    (span, group number, position in its group) for the groups of two or more attempts made one after
    the other, and the spans of single calls (group -1)."""
    f = x.frame
    name = finding.get("span_name")
    spans = x.spans_named(name, in_requests=False)
    spans = spans[f.parent[spans] >= 0]
    service = (finding.get("evidence") or {}).get("stats", {}).get("service")
    if service in f.services:
        spans = spans[f.service[spans] == f.services.index(service)]
    if len(spans) == 0:
        return spans, spans, spans
    peers = _peers(x, name, spans)
    order = np.lexsort((f.start[spans], peers, f.parent[spans]))
    s, peer = spans[order], peers[order]
    p = f.parent[s]
    first = np.r_[True, (p[1:] != p[:-1]) | (peer[1:] != peer[:-1])]  # one call: a caller and a peer
    group = np.cumsum(first) - 1
    pos = np.arange(len(s)) - np.nonzero(first)[0][group]
    size = np.bincount(group)[group]
    # attempts one after the other (a fan-out of the same call runs side by side: not a retry)
    overlaps = np.r_[False, f.end[s[:-1]] > f.start[s[1:]] + SEQUENTIAL_TOLERANCE_NS] & ~first
    sequential = ~np.bincount(group, weights=overlaps).astype(bool)[group]
    repeated = (size >= 2) & sequential
    return s, np.where(repeated, group, -1), pos


HEDGE_AT = 0.02  # copies sent at a fixed delay: their offsets within 2 % of the median offset
HEDGE_SHARE = 0.5  # ... for at least this share of them (a fan-out's calls start side by side)


def hedged_pairs(x: Inputs, finding: dict[str, Any], calls: np.ndarray | None = None
                 ) -> tuple[np.ndarray, np.ndarray]:
    """The calls a hedge doubled: (first attempt, copy) span pairs, a copy being the second call of one
    caller sent while the first is in flight, at the hedge's delay (most copies start at one offset
    from their first: a timer, not a fan-out's side-by-side calls; to any peer: a hedge goes to
    another replica). Empty where the run shows no hedge. `calls`: retried_calls' spans where the
    caller has them already."""
    f = x.frame
    none = np.zeros(0, np.int64)
    s = retried_calls(x, finding)[0] if calls is None else calls
    if len(s) < 2:
        return none, none
    s = s[np.lexsort((f.start[s], f.parent[s]))]
    same = f.parent[s[1:]] == f.parent[s[:-1]]
    first_of_call = np.r_[True, ~same]
    second = np.r_[False, same & first_of_call[:-1]]  # the second call of its caller and peer
    idx = np.nonzero(second)[0]
    overlap = f.start[s[idx]] < f.end[s[idx - 1]] - SEQUENTIAL_TOLERANCE_NS
    idx = idx[overlap]
    if len(idx) < 20:
        return none, none
    offset = (f.start[s[idx]] - f.start[s[idx - 1]]).astype(np.float64)
    delay = float(np.median(offset))
    if delay <= 0 or (np.abs(offset - delay) <= HEDGE_AT * delay).mean() < HEDGE_SHARE:
        return none, none
    return s[idx - 1], s[idx]


PEER_KEYS = ("server.address", "net.peer.name", "peer.service", "rpc.service", "http.host")


def _peers(x: Inputs, name: str | None, spans: np.ndarray) -> np.ndarray:
    """Per span (in `spans` order): a code of the peer it calls, so that a fan-out's calls of one name
    to different backends are not taken for attempts of one call (0 for all where the run's
    attributes cannot be read or name no peer)."""
    f = x.frame
    out = np.zeros(len(spans), np.int64)
    if f.attribute_source is None or name not in f.names:
        return out
    attrs = f.attributes(f.names.index(name))
    for key in PEER_KEYS:
        idx, values = attrs.get(key, (np.zeros(0, np.int64), []))
        if len(values) < 0.5 * len(spans):
            continue
        codes = {v: k + 1 for k, v in enumerate(sorted({str(v) for v in values}))}
        pos = np.full(len(f), -1)
        pos[spans] = np.arange(len(spans))
        at = pos[idx]
        ok = at >= 0
        out[at[ok]] = [codes[str(v)] for v, keep in zip(values, ok, strict=True) if keep]
        return out
    return out


def abandoned_work_left(x: Inputs, edit: Edit, calls: np.ndarray) -> Edit:
    """The callee's work under a re-timed call that outlasted it (the client gave up at its deadline
    and the server ran on: laid out in an ancestor, `frame.excl_parent`) is not there once the call
    is answered in time: it no longer holds the request open."""
    f = x.frame
    timed = calls[~np.isnan(edit.dur[calls])]
    if len(timed) == 0:
        return edit
    mark = np.zeros(len(f), bool)
    mark[timed] = True
    child = np.nonzero((f.parent >= 0) & (f.excl_parent != f.parent))[0]
    gone = child[mark[f.parent[child]]]
    edit.dur[gone] = 0.0
    return edit


def back_off_after_last(x: Inputs, edit: Edit, s: np.ndarray, group: np.ndarray, pos: np.ndarray) -> Edit:
    """A client that gives up after its last attempt waits out one more back-off before its fallback
    (a retry loop that sleeps after every failure): the step after a retried call's last attempt
    starts a back-off later than the step after a call answered at once. Once the call is answered
    at its first attempt, that step follows as it does after an answered call: its gap is cut to the
    median gap after the single calls (`group` -1) of the name."""
    lay = x.lay
    rep = group >= 0
    if not rep.any():
        return edit
    last_pos = np.zeros(int(group.max()) + 1, np.int64)
    np.maximum.at(last_pos, group[rep], pos[rep])
    last = s[rep & (pos == last_pos[np.maximum(group, 0)])]
    single = s[~rep]
    nxt_last, nxt_single = _next_step(x, last), _next_step(x, single)
    ok = nxt_single >= 0
    if not ok.any():
        return edit
    typical = float(np.median(lay.gap[nxt_single[ok]]))
    has = nxt_last >= 0
    step = nxt_last[has]
    edit.cut_before[step] = np.maximum(edit.cut_before[step], lay.gap[step] - typical)
    return edit


def _next_step(x: Inputs, calls: np.ndarray) -> np.ndarray:
    """Per call, the first sibling that starts after it ends (-1 where none): the step that waited for
    it."""
    lay = x.lay
    out = np.full(len(calls), -1, np.int64)
    if len(calls) == 0:
        return out
    parents, rank = np.unique(lay.parent[calls], return_inverse=True)
    kid = np.nonzero(np.isin(lay.parent, parents))[0]
    kid_rank = np.searchsorted(parents, lay.parent[kid])
    big = int(max(lay.rel_end[kid].max(initial=0), lay.rel_end[calls].max(initial=0))) + 2
    key = kid_rank.astype(np.int64) * big + lay.rel_start[kid].astype(np.int64)
    order = np.argsort(key, kind="stable")
    key, kid = key[order], kid[order]
    after = np.maximum(lay.rel_end[calls].astype(np.int64) - SEQUENTIAL_TOLERANCE_NS,
                       lay.rel_start[calls].astype(np.int64) + 1)  # not the call itself
    want = rank.astype(np.int64) * big + after
    at = np.searchsorted(key, want, side="left")
    inside = at < len(kid)
    found = np.where(inside, kid[np.minimum(at, len(kid) - 1)], -1)
    same = inside & (lay.parent[np.maximum(found, 0)] == lay.parent[calls]) & (found != calls)
    out[same] = found[same]
    return out
