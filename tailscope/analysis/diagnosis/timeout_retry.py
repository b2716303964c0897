"""timeout_retry: a call cut short by a client deadline and made again.

Mechanism. A client deadline ends an attempt at the same elapsed time whatever the callee was doing,
with an error status, and a retry policy then sends the same call again, one after the other. So, for
a span name made by requests (a call to another service, usually a CLIENT span):

- some parents hold two or more spans of the name, one after the other (a fan-out runs side by side:
  the earlier attempt must end before the next one starts in >= 90 % of the repeated groups),
- the first attempts of the repeated groups end at nearly one duration: >= 70 % of them within 3 %
  (at least 0.5 ms) of their median, the timeout value, which sits above the call's median
  (>= 1.5x: a callee that slowed down may bring its median up to half the deadline, while a call of
  one fixed duration made twice has its median at that duration),
- no attempt of the name lasts much longer than that value (a deadline caps every attempt; a
  retried call whose first attempts merely vary does not have one),
- the first attempts end in error more often than the calls that were not retried (where the spans
  carry a status): confirmation, not required.

Weight: the time the requests lose to the failed attempts (from the first attempt's start to the
last attempt's start), as a share of the tail excess. The evidence names the caller's service and
its instances, the peer (server.address or the span name), the timeout value, the retry rate and the
share of tail requests that retried.
"""

from __future__ import annotations

import numpy as np

from tailscope.analysis.diagnosis.attributes import error_flags
from tailscope.analysis.diagnosis.frame import KIND_SERVER
from tailscope.analysis.diagnosis.hidden_retries import hidden_retries
from tailscope.analysis.diagnosis.long_stalls import stall_overlap
from tailscope.analysis.diagnosis.model import Context, Finding
from tailscope.analysis.diagnosis.refused_retries import refused_retries
from tailscope.analysis.diagnosis.stats import clamp01, excess_share, logistic, material_weight, ms
from tailscope.analysis.diagnosis.where import busiest, main_service

PATTERN = "timeout_retry"
MIN_RETRIED = 20
TIGHT = 0.03  # first attempts within 3 % of the timeout value ...
TIGHT_NS = 500_000  # ... or 0.5 ms, whichever is larger
CUT_ALL = 0.5  # the deadline cuts most of a straggler's calls: the retries, not its answers, set the latency
ABOVE_MEDIAN = 1.5  # a deadline sits above the call's median (most calls end before it)
ADVICE = (
    "{where} is cut by a client deadline at about {timeout:.0f} ms in {rate:.1%} of calls and then made "
    "again, so each of those requests pays the whole deadline before the second attempt starts. Set the "
    "deadline from the latency target, not above it: a deadline of {timeout:.0f} ms plus a second attempt "
    "cannot fit a target below that. Hedge instead of waiting: send a second copy after the call's own "
    "p95 ({p95:.1f} ms) and take the first answer. Bound retries with a retry budget (e.g. at most 10 % "
    "extra calls per client) so that retries do not multiply load when the callee is the problem, and "
    "find with the callee's owners why the first attempts hang (the attempts that time out, by instance "
    "and input)."
)


def call_group(f) -> np.ndarray:
    """Per span: its parent and what answered it (the service and operation of its SERVER child, where
    traced) in one key. A retry is the same call to the same peer again; calls of one name to several
    peers (HTTP clients name a span by its method) under one parent are a fan-out, one per peer, and
    calls of one name to two operations of one peer (an HTTP client's every call named alike: an embed
    then a search) are two calls, not an attempt and its retry."""
    peer = np.full(len(f), -1, np.int64)
    child = np.nonzero((f.parent >= 0) & (f.kind == KIND_SERVER))[0]
    peer[f.parent[child]] = f.service[child].astype(np.int64) * len(f.names) + f.name[child]
    return f.parent.astype(np.int64) * (len(f.services) * len(f.names) + 1) + peer + 1


PEER_KEYS = ("server.address", "net.peer.name", "peer.service", "rpc.service", "http.host")


def _same_call(ctx: Context, code: int, spans: np.ndarray, group: np.ndarray) -> np.ndarray:
    """Per span of `spans`: its call group (call_group) refined by the peer its own attributes name
    (the first of PEER_KEYS it carries): a cache read and an HTTP call that one client convention
    names alike (`get`) under one parent are two calls to two peers, not an attempt and its retry."""
    pos = np.full(len(ctx.frame), -1, np.int64)
    pos[spans] = np.arange(len(spans))
    label = np.full(len(spans), "", dtype=object)
    for key in reversed(PEER_KEYS):  # the first key a span carries wins
        idx, values = ctx.frame.attributes(code).get(key, (np.zeros(0, np.int64), []))
        at = pos[np.asarray(idx, np.int64)]
        ok = at >= 0
        if ok.any():
            label[at[ok]] = [f"{key}={v}" for v, keep in zip(values, ok, strict=True) if keep]
    peer = np.unique(label.astype(str), return_inverse=True)[1].reshape(-1).astype(np.int64)
    dense = np.unique(group, return_inverse=True)[1].reshape(-1).astype(np.int64)
    return dense * (int(peer.max()) + 1) + peer


def retry_groups(ctx: Context, code: int) -> dict | None:
    """The repeated calls of a span name under one parent: first and second attempt per parent."""
    f = ctx.frame
    spans = np.nonzero((f.name == code) & (f.request >= 0) & (f.parent >= 0))[0]
    if len(spans) < 50:
        return None
    key = np.zeros(len(f), np.int64)
    key[spans] = _same_call(ctx, code, spans, call_group(f)[spans])
    order = np.lexsort((f.start[spans], key[spans]))
    s = spans[order]
    p = key[s]
    first_of = np.r_[True, p[1:] != p[:-1]]
    second = np.nonzero(~first_of & np.r_[False, first_of[:-1]])[0]  # the second span under a parent
    if len(second) < MIN_RETRIED:
        return None
    a1, a2 = s[second - 1], s[second]
    group_start = np.nonzero(first_of)[0]
    group_end = np.r_[group_start[1:], len(s)] - 1
    retried = group_end > group_start
    last = s[group_end[retried]]
    if float((f.end[a1] <= f.start[a2] + TIGHT_NS).mean()) < 0.9:
        # side by side: a fan-out (one call per shard); its retries follow the attempt they replace
        return _fan_out_retries(f, spans, s, key[s])
    return {
        "spans": spans,
        "abandoned": s[np.r_[~first_of[1:], False]],  # every attempt but a parent's last
        "first": a1,
        "second": a2,
        "last": last,
        "parents": int(first_of.sum()),
        "retried_parents": int(retried.sum()),
    }


def _fan_out_retries(f, spans: np.ndarray, s: np.ndarray, group: np.ndarray) -> dict | None:
    """In a fan-out (calls of one name side by side under a parent), a retry is a call that starts
    after another call of the group ended, within that call's own duration (the backoff): the attempt
    it replaces is the one of the group that ended last before it started. `s` is sorted by group and
    start. Each attempt is replaced at most once."""
    horizon = int(f.end.max()) + 2
    group = np.unique(group, return_inverse=True)[1].reshape(-1).astype(np.int64)  # dense: no overflow
    order = np.lexsort((f.end[s], group))
    by_end = s[order]
    e_key = group[order] * horizon + f.end[by_end]
    k = np.searchsorted(e_key, group * horizon + f.start[s] + TIGHT_NS, side="right") - 1
    kk = np.maximum(k, 0)
    prev = by_end[kk]
    ok = (k >= 0) & (group[order][kk] == group) & (prev != s)  # an earlier call of the same parent
    ok &= f.start[s] - f.end[prev] <= f.dur[prev]  # a backoff shorter than the attempt it follows
    a1, a2 = prev[ok], s[ok]
    a1, first_use = np.unique(a1, return_index=True)
    a2 = a2[first_use]
    if len(a2) < MIN_RETRIED:
        return None
    return {
        "spans": spans,
        "abandoned": a1,
        "first": a1,
        "second": a2,
        "last": a2,
        "parents": int((np.bincount(group)[group] >= 2).sum()) - len(a2),  # the calls, one per shard
        "retried_parents": len(a2),
        "fan_out": True,
    }


def _repeated_names(ctx: Context) -> list[int]:
    """Span names with at least MIN_RETRIED parents holding two or more spans of the name (one sort
    of all spans by name, parent and start)."""
    f = ctx.frame
    spans = np.nonzero((f.request >= 0) & (f.parent >= 0))[0]
    if len(spans) < 2:
        return []
    name, parent = f.name[spans], call_group(f)[spans]
    order = np.lexsort((parent, name))
    name, parent = name[order], parent[order]
    second = (name[1:] == name[:-1]) & (parent[1:] == parent[:-1])
    second &= ~np.r_[False, second[:-1]]  # one per group: the second span under its parent
    groups = np.bincount(name[1:][second], minlength=len(f.names))
    return np.nonzero(groups >= MIN_RETRIED)[0].tolist()


def detect(ctx: Context) -> list[Finding]:
    if ctx.n_requests < 50 or ctx.split.excess_ns <= 0:
        return []
    findings = []
    for code in _repeated_names(ctx):
        finding = _judge(ctx, code)
        if finding is not None:
            findings.append(finding)
    seen = {fd.span_name for fd in findings}
    findings += [fd for fd in hidden_retries(ctx) if fd.span_name not in seen]  # attempts below a call
    findings.sort(key=lambda x: -x.confidence)
    if findings:
        ctx.notes["retried_names"] = {fd.evidence["stats"]["span_code"]: fd.confidence for fd in findings}
        ctx.notes["retried_names:share"] = {
            fd.evidence["stats"]["span_code"]: fd.evidence["stats"]["tail_excess_share"] for fd in findings
        }
        # the attempts the caller gave up on: their time (and their callees') is this finding's
        given_up = [fd.evidence["stats"]["abandoned"] for fd in findings]
        ctx.notes["abandoned_attempts"] = np.concatenate(given_up)
    for fd in findings:
        fd.evidence["stats"].pop("span_code", None)
        fd.evidence["stats"].pop("abandoned", None)
    return findings[:2]


def _judge(ctx: Context, code: int) -> Finding | None:
    f = ctx.frame
    g = retry_groups(ctx, code)
    if g is None:
        return None
    a1, a2 = g["first"], g["second"]
    sequential = float((f.end[a1] <= f.start[a2] + TIGHT_NS).mean())
    if sequential < 0.9:
        return None  # side by side: a fan-out, not a retry
    d1 = f.dur[a1].astype(np.float64)
    timeout = float(np.median(d1))
    # the deadline caps the caller's attempts, not the callee's work (a callee span of the same name
    # runs on after the caller gave up): the caller's spans are those of the first attempts' service
    # and kind
    caller = (f.service[g["spans"]] == np.bincount(f.service[a1]).argmax()) & (
        f.kind[g["spans"]] == np.bincount(f.kind[a1]).argmax()
    )
    g["spans"] = g["spans"][caller]
    all_d = f.dur[g["spans"]].astype(np.float64)
    median = float(np.median(all_d))
    errors = _error_rates(ctx, code, a1, g["spans"])
    if timeout < ABOVE_MEDIAN * median:  # no deadline: a refusal answered at once, then a back-off?
        return refused_retries(ctx, code, g, errors)
    tol = max(TIGHT * timeout, TIGHT_NS)
    tight = float((np.abs(d1 - timeout) <= tol).mean())
    over = _outlasting(ctx, g["spans"], timeout + 3 * tol)  # attempts that outlast the deadline
    strength = logistic(tight, 0.7, 0.08) * (1 - logistic(over, 0.02, 0.006))
    if errors is not None:
        first_err, other_err = errors
        strength *= 0.8 + 0.2 * logistic(first_err - other_err, 0.5, 0.1)
    # the time lost: from the first attempt's start to the last attempt's start, per request
    lost = (f.start[g["last"]] - f.start[g["first"]]).astype(np.float64)
    req = f.request[a1]
    if g.get("fan_out"):  # retries side by side in a fan-out: the request waits for the longest
        per_request = np.zeros(ctx.n_requests)
        np.maximum.at(per_request, req, lost)
    else:
        per_request = np.bincount(req, weights=lost, minlength=ctx.n_requests)
    split = ctx.split
    share = excess_share(per_request, split)
    retried_req = np.zeros(ctx.n_requests, bool)
    retried_req[req] = True
    tail_retried = float(retried_req[split.tail].mean()) if split.tail.any() else 0.0
    all_retried = float(retried_req.mean())
    confidence = strength * material_weight(share) * 0.95
    # the deadline cuts calls to one replica that is slow on every call it answers (a straggler): the
    # retries are the straggler's symptom (and the policy working), slow_dependency names the cause
    slow_one = _straggler_cut(f, a1, g["spans"])
    if slow_one is not None:
        confidence = min(confidence, 0.45)
    if confidence < 0.05:
        return None
    name = f.names[code]
    rate = g["retried_parents"] / max(g["parents"], 1)
    service = main_service(f, a1)
    top_inst = busiest(f, f.instance[a1])
    peer = _peer(ctx, code, a1)
    p95 = float(np.quantile(all_d, 0.95))
    stage = ctx.stage_of_name(code)
    summary = (
        f"'{name}' (from {service}, to {peer}) is made again after a first attempt in {rate:.1%} of the "
        f"calls that make it; the first attempts end at {ms(timeout):.1f} ms ({tight:.0%} within "
        f"{ms(tol):.1f} ms of it, {ms(timeout) / max(ms(median), 1e-9):.0f}x the call's median), and "
        f"{over:.1%} of all attempts last longer: a client deadline"
        + (
            f"; {errors[0]:.0%} of the first attempts end in error vs {errors[1]:.0%} of the other calls"
            if errors is not None
            else ""
        )
        + f". {tail_retried:.0%} of the tail requests retried vs {all_retried:.1%} of all, and the time "
        f"lost to the failed attempts is {share:.0%} of the tail excess (instances: "
        f"{', '.join(top_inst)})."
        + (f" But {slow_one[1]:.0%} of the attempts cut are calls to {slow_one[0]}, a replica slow on "
           "every call it answers: the deadline cuts a straggler's calls (see slow_dependency)."
           if slow_one is not None else "")
    )
    # the attempts the caller gave up on: every one but a parent's last, and any cut at the deadline
    cut = g["spans"][np.abs(all_d - timeout) <= tol]
    stats = {
        "span_code": code,
        "abandoned": np.union1d(g["abandoned"], cut),
        "timeout_ms": ms(timeout),
        "first_attempts_within_ms": round(ms(tol), 3),
        "first_attempts_at_timeout": round(tight, 3),
        "attempts_over_timeout": round(over, 4),
        "call_median_ms": ms(median),
        "retry_rate": round(rate, 4),
        "retried_calls": g["retried_parents"],
        "sequential": round(sequential, 3),
        "first_attempt_error_rate": None if errors is None else round(errors[0], 3),
        "other_call_error_rate": None if errors is None else round(errors[1], 3),
        "tail_requests_retried": round(tail_retried, 3),
        "all_requests_retried": round(all_retried, 4),
        "tail_excess_share": round(share, 3),
        "service": service,
        "instances": top_inst,
        "peer": peer,
        "cut_calls_to_straggler": slow_one[0] if slow_one is not None else None,
    }
    edges = np.linspace(0, max(timeout * 1.3, float(np.quantile(all_d, 0.999))), 61)
    first_mask = np.zeros(len(f), bool)
    first_mask[a1] = True
    others = g["spans"][~first_mask[g["spans"]]]
    chart = {
        "kind": "attempt_durations",
        "edges_ms": (edges / 1e6).round(3).tolist(),
        "first_attempts": np.histogram(d1, edges)[0].tolist(),
        "other_calls": np.histogram(f.dur[others].astype(np.float64), edges)[0].tolist(),
        "timeout_ms": ms(timeout),
    }
    advice = ADVICE.format(where=f"'{name}'", timeout=ms(timeout), rate=rate, p95=ms(p95))
    evidence = {"summary": summary, "stats": stats, "chart": chart}
    return Finding(PATTERN, clamp01(confidence), stage or "downstream", name, evidence, advice)


def _outlasting(ctx: Context, spans: np.ndarray, limit: float) -> float:
    """The share of `spans` that last longer than `limit`, but for those whose time past it sits in a
    process pause on their instance (gc_pause's stall episodes or the runtime's reported pauses) and
    those that end in error all the same: a deadline's timer cannot fire while the process is stopped
    or its one thread busy, so the attempt is cut when it runs again; a call with no deadline that
    outlasts it ends when the callee answers."""
    f = ctx.frame
    late = spans[f.dur[spans] > limit]
    flags = error_flags(f, int(f.name[spans[0]])) if len(late) else None
    if flags is not None:
        late = late[~np.isin(late, flags[0][flags[1]])]
    if len(late) == 0:
        return 0.0
    paused = np.zeros(len(late))
    for pauses in (ctx.notes.get("gc_episodes"), ctx.reported_pauses if len(f.gc_time) else None):
        if pauses is not None:
            overlap = stall_overlap(f.instance[late], f.start[late], f.end[late], *pauses)
            paused = np.maximum(paused, overlap)
    past = f.dur[late].astype(np.float64) - limit
    return float((paused < past).sum()) / len(spans)


def _error_rates(ctx: Context, code: int, first: np.ndarray, spans: np.ndarray) -> tuple[float, float] | None:
    """Error share of the first attempts and of the calls that were not first attempts, where the
    spans carry a status or error attribute."""
    flags = error_flags(ctx.frame, code)
    if flags is None:
        return None
    idx, bad = flags
    err = np.zeros(len(ctx.frame), bool)
    err[idx[bad]] = True
    is_first = np.zeros(len(ctx.frame), bool)
    is_first[first] = True
    rest = spans[~is_first[spans]]
    return float(err[first].mean()), float(err[rest].mean()) if len(rest) else 0.0


def _peer(ctx: Context, code: int, first: np.ndarray) -> str:
    """The callee of the retried calls (the first attempts'): its server.address (or an older
    convention's peer name), else the span name. One name may cover calls to several peers (HTTP
    clients name a span by its method): the other calls of the name do not say which."""
    for key in ("server.address", "net.peer.name", "peer.service", "rpc.service", "http.host"):
        idx, values = ctx.frame.attributes(code).get(key, (np.zeros(0, np.int64), []))
        mine = np.isin(idx, first)
        if mine.any():
            picked = np.array([str(v) for v in values], dtype=object)[mine]
            uniq, counts = np.unique(picked.astype(str), return_counts=True)
            return str(uniq[int(np.argmax(counts))])
    return f"'{ctx.frame.names[code]}'"


def _straggler_cut(f, first: np.ndarray, spans: np.ndarray) -> tuple[str, float] | None:
    """(instance, share) where the callee's SERVER spans under the cut first attempts are mostly
    (>= 75 %) on one instance whose calls (all those it served, at least 20) take at least twice as long
    at the median as the calls of the other instances of its service: a straggler replica, slow on
    every call, most of its calls answered (not cut: < 50 %). (One client span name may call several
    services, as HTTP clients name spans by method: another service's replicas answering faster make no
    straggler.)"""
    child = np.nonzero((f.parent >= 0) & (f.kind == KIND_SERVER))[0]
    served = child[np.isin(f.parent[child], spans)]
    cut = child[np.isin(f.parent[child], first)]
    if len(cut) < 5 or len(served) < 50:
        return None
    worst = int(np.bincount(f.instance[cut]).argmax())
    share = float((f.instance[cut] == worst).mean())
    service = int(np.bincount(f.service[cut][f.instance[cut] == worst]).argmax())
    served = served[f.service[served] == service]
    mine = f.instance[served] == worst
    if share < 0.75 or mine.sum() < 20 or mine.all():
        return None
    # where the deadline cuts most calls the replica gets, the requests mostly never see its slowness:
    # they see the deadline and the retry elsewhere, which set their latency whatever the replica does
    if float((f.instance[cut] == worst).sum()) >= CUT_ALL * mine.sum():
        return None
    own, rest = float(np.median(f.dur[served[mine]])), float(np.median(f.dur[served[~mine]]))
    return (f.instances[worst], share) if own >= 2.0 * rest else None
