"""cold_start at a callee whose own spans are not traced: a replica that joins mid-run answers its
first calls slowly.

Mechanism. A replica added by a scale-up (or restarted) loads its model, creates its CUDA context,
fills its caches on the first requests it serves; the callers' load balancer sends it its share of
the calls from the moment it is ready, so those calls are slow, then settle. Where the callee's
spans are traced, its own request index shows the warm-up (cold_start.py); where they are not, the
callers' CLIENT spans still name the peer that answered (`server.address`, `net.peer.name`, ...): a
peer first seen mid-run whose first calls are slower than its later ones, and slower than the calls
to the other peers at the same time (a burst would slow every peer), is a cold replica. So is a peer
called from the start that went silent (its longest gap between calls >= SILENT x its median gap,
while the other peers took >= 10 calls: it was out, not the callers) and came back so, where its
calls before the silence ran at the other peers' level (a restarted database replica reads its pages
from disk until its buffer pool and page cache are warm again; a peer ejected for being slow and let
back is no restart): its calls after the silence are judged as a new peer's, their weight what they
add over its own level before it.

Statistic, per CLIENT span name whose callee is untraced and that names its peer (2-64 peers): for
each peer first called after the first tenth of the run with >= MIN_CALLS calls, its first FIRST
calls against its calls after the first third of its life (AUC and ratio of medians) and against
the other peers' calls over the same stretch of time (ratio of medians); strength from the AUC and
the smaller ratio. Weight: the first third of its calls' time over its plateau (what the warm-up and
the calls queued behind it add), as a share of the tail excess.
"""

from __future__ import annotations

import numpy as np

from tailscope.analysis.diagnosis.frame import KIND_CLIENT, KIND_SERVER
from tailscope.analysis.diagnosis.model import Context, Finding
from tailscope.analysis.diagnosis.stats import clamp01, excess_share, logistic, material_weight, ranks
from tailscope.analysis.diagnosis.where import busiest, main_service

PEER_KEYS = ("server.address", "net.peer.name", "net.peer.ip", "server.socket.address", "net.sock.peer.addr")
MIN_CALLS = 30
FIRST = 10
FRESH = 0.1  # a peer first called after this share of the run joined mid-run
SILENT = 30.0  # a peer silent for this many of its median gaps between calls was out (restarted)
CAP = 0.95
MECHANISM = "a replica that joined mid-run, cold"


def _peers(ctx: Context, code: int, spans: np.ndarray) -> tuple[np.ndarray, list[str]] | None:
    """(per span of `spans`: a code of the peer it called, -1 unknown; the peers' labels), from the
    first peer key that names 2-64 peers on most of them; None where none does."""
    attrs = ctx.frame.attributes(code)
    for key in PEER_KEYS:
        if key not in attrs:
            continue
        idx, values = attrs[key]
        names, codes = np.unique(np.asarray([str(v) for v in values]), return_inverse=True)
        if not 2 <= len(names) <= 64:
            continue
        out = np.full(len(ctx.frame), -1, np.int64)
        out[np.asarray(idx, np.int64)] = codes
        peer = out[spans]
        if (peer >= 0).mean() >= 0.8:
            return peer, [f"{key}={n}" for n in names]
    return None


def _back_after_silence(f, spans: np.ndarray, peer: np.ndarray, dur: np.ndarray, mine: np.ndarray):
    """A peer called from the start that went silent and came back (a restart, a failover and back):
    (its calls after the silence, its median before it, the silence in ns), where the silence is its
    longest gap between calls, >= SILENT x its median gap, while the other peers took >= 10 calls (the
    callers kept calling: the peer was out), and its calls before it ran at the others' level (a peer
    ejected for being slow and let back is no restart); None otherwise."""
    starts = f.start[spans[mine]].astype(np.float64)
    gaps = np.diff(starts)
    if len(gaps) < MIN_CALLS:
        return None
    j = int(np.argmax(gaps))
    typical = max(float(np.median(gaps)), 1.0)
    if gaps[j] < SILENT * typical or j + 1 < MIN_CALLS // 3:
        return None
    t = f.start[spans]
    others = peer != peer[mine[0]]
    if int((others & (t > starts[j]) & (t < starts[j + 1])).sum()) < 10:
        return None
    warm = float(np.median(dur[mine[: j + 1]]))
    alongside = others & (t <= starts[j])
    if not alongside.any() or warm > 1.5 * float(np.median(dur[alongside])):
        return None
    return mine[j + 1:], warm, float(gaps[j])


def _auc(early: np.ndarray, late: np.ndarray) -> float:
    r = ranks(np.r_[early, late])
    return float((r[: len(early)].sum() - len(early) * (len(early) - 1) / 2) / (len(early) * len(late)))


def _sources(ctx: Context):
    """(call name code, spans whose durations are judged, peer code per span, peer label per code):
    an untraced callee's calls by the peer they name; a traced callee's SERVER spans by its instance
    (a worker restarted mid-run is a new instance: its own time, not the wait before it), also where
    a sidecar's outbound CLIENT span sits between the call and them (a service mesh)."""
    f = ctx.frame
    child = np.nonzero((f.kind == KIND_SERVER) & (f.parent >= 0) & (f.request >= 0))[0]
    child = child[f.kind[f.parent[child]] == KIND_CLIENT]
    caller = f.parent[child]
    # a sidecar's outbound CLIENT span between the call and the callee's SERVER span: the call's too
    up = f.parent[caller]
    via = (up >= 0) & (f.kind[np.maximum(up, 0)] == KIND_CLIENT)
    child, caller = np.r_[child, child[via]], np.r_[caller, up[via]]
    answered = np.zeros(len(f), bool)
    answered[caller] = True
    for code in ctx.client_names.tolist():
        spans = np.nonzero((f.name == code) & (f.kind == KIND_CLIENT) & (f.request >= 0))[0]
        if len(spans) < 200:
            continue
        if answered[spans].mean() <= 0.1:
            found = _peers(ctx, code, spans)
            if found is not None:
                yield code, spans, *found
        elif answered[spans].mean() >= 0.9:
            srv = child[f.name[caller] == code]
            yield code, srv, f.instance[srv], [f.instances[i] for i in range(len(f.instances))]


def detect(ctx: Context, advice: str) -> list[Finding]:
    """`advice`: cold_start's advice text, with a `{where}` field (passed in, so this module does not
    import its caller)."""
    f = ctx.frame
    if ctx.n_requests < 100:
        return []
    run0, run1 = float(f.start.min()), float(f.end.max())
    best = None
    for code, spans, peer, labels in _sources(ctx):
        dur = f.dur[spans].astype(np.float64)
        cold, extra, strengths, group = [], np.zeros(ctx.n_requests), [], np.zeros(0, np.int64)
        for p in np.unique(peer[peer >= 0]).tolist():
            mine = np.nonzero(peer == p)[0]
            mine = mine[np.argsort(f.start[spans[mine]], kind="stable")]
            warm, silence = None, 0.0
            if len(mine) >= MIN_CALLS and f.start[spans[mine[0]]] < run0 + FRESH * (run1 - run0):
                back = _back_after_silence(f, spans, peer, dur, mine)
                if back is None:
                    continue
                mine, warm, silence = back
            if len(mine) < MIN_CALLS:
                continue
            first, late = mine[:FIRST], mine[len(mine) // 3:]
            t0, t1 = f.start[spans[first[0]]], f.start[spans[first[-1]]]
            others = (peer != p) & (f.start[spans] >= t0) & (f.start[spans] <= t1)
            if others.sum() < 5:  # its first calls came close together: the others over its first few dozen
                t1 = f.start[spans[mine[min(3 * FIRST, len(mine)) - 1]]]
                others = (peer != p) & (f.start[spans] >= t0) & (f.start[spans] <= t1)
            if others.sum() < 5:
                continue
            plateau = float(np.median(dur[late]))
            ratio = float(np.median(dur[first]) / max(plateau, 1.0))
            ratio_others = float(np.median(dur[first]) / max(np.median(dur[others]), 1.0))
            auc = _auc(dur[first], dur[late])
            strength = logistic(auc, 0.72, 0.05) * logistic(min(ratio, ratio_others), 1.4, 0.15)
            if strength < 0.5:
                continue
            # each peer that joined cold: what its first third of calls add over its plateau; one back
            # from a restart: what its calls since add over its own level before it (warm, as the others)
            young = mine[: len(mine) // 3] if warm is None else mine
            level = plateau if warm is None else warm
            extra += np.bincount(f.request[spans[young]], weights=np.maximum(dur[young] - level, 0.0),
                                 minlength=ctx.n_requests)
            strengths.append(strength)
            group = np.r_[group, young]
            cold.append((labels[p], (t0 - run0) / 1e9, float(np.median(dur[first])), plateau, ratio,
                         ratio_others, auc, len(mine), silence))
        if not cold:
            continue
        share = excess_share(extra, ctx.split)
        confidence = CAP * float(np.median(strengths)) * material_weight(share)
        # the calls' tail beyond the cold peers' first ones: a callee slow on its own as well
        rest = np.ones(len(spans), bool)
        rest[group] = False
        over = np.where(rest, np.maximum(dur - float(np.median(dur)), 0.0), 0.0)
        rest_share = excess_share(np.bincount(f.request[spans], weights=over, minlength=ctx.n_requests),
                                  ctx.split)
        if best is None or confidence > best[0]:
            k = int(np.argmax(strengths))
            label, seen, first_ms, plateau, ratio, ratio_others, auc, calls, silence = cold[k]
            best = (confidence, code, spans, group, label, {
                "peer_first_seen_s": round(seen, 2), "silent_before_s": round(silence / 1e9, 3),
                "first_calls_median_ms": round(first_ms / 1e6, 3),
                "settled_median_ms": round(plateau / 1e6, 3), "ratio": round(ratio, 2),
                "ratio_to_other_peers": round(ratio_others, 2), "auc": round(auc, 3), "calls": calls,
                "cold_peers": len(cold), "tail_excess_share": round(share, 3),
                "call_tail_excess_share_beyond_them": round(rest_share, 3)})
    if best is None or best[0] < 0.05:
        return []
    if best[0] >= 0.3:  # compute_bound leaves the forward time of requests a cold peer served to this
        served = np.zeros(ctx.n_requests, bool)
        served[f.request[best[2][best[3]]]] = True
        warm = ctx.notes.get("warm_up_requests")
        ctx.notes["warm_up_requests"] = served if warm is None else warm | served
    return [_finding(ctx, advice, *best)]


def _finding(ctx: Context, advice: str, confidence: float, code: int, spans: np.ndarray, mine: np.ndarray,
             peer_name: str, st: dict) -> Finding:
    f = ctx.frame
    callers = f.parent[spans[mine]] if f.kind[spans[0]] == KIND_SERVER else spans[mine]
    where = busiest(f, f.instance[callers])
    service = main_service(f, callers)
    callee = f.services[int(np.bincount(f.service[spans[mine]]).argmax())]
    name = f.names[code]
    summary = (
        f"The calls '{name}' from {service} to {peer_name}"
        + (f" (and {st['cold_peers'] - 1} more that joined later)" if st["cold_peers"] > 1 else "")
        + (f", a peer back {st['peer_first_seen_s']} s into the run after {st['silent_before_s']} s "
           "without a call while the others took them (a replica restarted: its caches empty), were slow at "
           "first: "
           if st["silent_before_s"] else
           f", a peer first called {st['peer_first_seen_s']} s into the run (a replica that joined), were "
           "slow at first: ")
        + "median "
        f"{st['first_calls_median_ms']} ms for its first {FIRST} vs {st['settled_median_ms']} ms once "
        f"settled ({st['ratio']}x, AUC {st['auc']}) and {st['ratio_to_other_peers']}x the calls to the "
        f"other peers meanwhile; its first calls carry {st['tail_excess_share']:.0%} of the tail excess. "
        + ("The callee is not traced: its warm-up shows in the calls only." if callee == service else
           f"Its own spans ({callee}) show it: a worker or replica started mid-run, its first requests slow.")
    )
    if callee != service:
        where = [peer_name, *where]
    # the names of the calls that carry it: the caller's, and a sidecar's outbound span between
    calls = [name, *sorted({f.names[c] for c in np.unique(f.name[callers])} - {name})]
    stats = {"services": sorted({service, callee}), "instances": where, "peer": peer_name, **st,
             "mechanism": MECHANISM, "call_names": calls}
    stage = ctx.stage_of_name(code)
    return Finding("cold_start", clamp01(confidence), stage, name, {"summary": summary, "stats": stats},
                   advice.format(where=f"the new replica behind '{name}' ({peer_name})"))
