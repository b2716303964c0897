"""slow_dependency: a call to another service whose heavy tail carries a material share of the tail excess.

Statistic. Candidates are span names that are mostly CLIENT spans inside requests, or that the stage
mapping puts in `downstream`, and that most requests make (a call made only on some requests, like a
store lookup on a cache miss, is the cache_miss detector's, unless a circuit breaker stopped every
request's call after its failures: breaker.py; so is a call the fallback_path detector
found running only after a lookup, whatever its rate, and the child call that explains a bimodal
lookup's slow mode). A call whose tail is a client deadline and a retry (timeout_retry at >= 0.5) or its
payload (large_payload at >= 0.5) is reported as part of that finding. Each gets its share of the tail excess
(its duration per request, tail minus body, over the latency excess) and its own tail heaviness
(p99 / p50). When the callee's SERVER span is traced too, the time is split into the callee's own
time and the gap around it (the network detector looks at the gap).
"""

from __future__ import annotations

import numpy as np

from tailscope.analysis.diagnosis.breaker import presence_before_open
from tailscope.analysis.diagnosis.callee_demand import asked_more, sentence
from tailscope.analysis.diagnosis.dependency_tail import (
    USUAL_TAIL_CAP,
    abnormal_tail,
    caller_side,
    grows_with_size,
    queued_below,
    signature_absent,
    straggler,
    usual_without_callers,
)
from tailscope.analysis.diagnosis.extra_calls import extra_mask
from tailscope.analysis.diagnosis.frame import KIND_CLIENT, KIND_SERVER
from tailscope.analysis.diagnosis.large_payload import forward_inside
from tailscope.analysis.diagnosis.model import Context, Finding
from tailscope.analysis.diagnosis.size_spread import sentence as size_sentence
from tailscope.analysis.diagnosis.size_spread import tail_of_size
from tailscope.analysis.diagnosis.stats import clamp01, logistic, material_weight, ms
from tailscope.vocabulary import ALL_STAGES

PATTERN = "slow_dependency"
ADVICE = (
    "The tail comes from a downstream call, {where} (p99 {p99} ms vs p50 {p50} ms). Put a deadline on it "
    "below your latency target and a fallback when it fires, hedge the request (send a second copy after "
    "the dependency's p95), cache or precompute its answer, call it in parallel with other work or off the "
    "request path, and take its p99 up with its owners (a latency SLO on the dependency). Faster local "
    "hardware will not change it."
)


def detect(ctx: Context) -> list[Finding]:
    f = ctx.frame
    reqs = f.requests
    n = len(reqs)
    if n < 50:
        return []
    downstream = ALL_STAGES.index("downstream")
    # the caller's side of each call: CLIENT spans, or downstream-stage spans that are not the callee's
    # SERVER span (that one sits inside the CLIENT span and would report the same call twice)
    inside = f.request >= 0
    total = np.bincount(f.name[inside], minlength=len(f.names))
    server = np.bincount(f.name[inside & (f.kind == KIND_SERVER)], minlength=len(f.names))
    callee = server * 2 > total
    stage_named = np.nonzero((ctx.name_stage == downstream) & ~callee)[0].tolist()
    # a name that both sides of a call use (gRPC instrumentations name the CLIENT and the SERVER span
    # alike) is a call too: its SERVER spans sit inside its CLIENT spans and are left out below
    client = np.bincount(f.name[inside & (f.kind == KIND_CLIENT)], minlength=len(f.names))
    both_sides = np.nonzero((client > 0) & (client * 2 >= total))[0].tolist()
    # and a send to a broker the request waited for (a blocked producer: the broker's latency)
    cands = set(int(c) for c in ctx.client_names) | set(stage_named) | set(both_sides)
    cands |= set(int(c) for c in ctx.send_names)
    cands -= ctx.notes.get("fallback_names", set())  # a miss path after a lookup: cache_miss's
    cands -= ctx.notes.get("miss_path_names", set())  # the call a bimodal lookup makes on its misses
    cands -= attempts_of_calls(f, inside)  # an SDK call's HTTP attempts: the call is the candidate
    findings = []
    for code in sorted(cands):
        mask = (f.name == code) & (f.request >= 0)
        if not mask.any():
            continue
        nested = np.zeros(len(f), bool)
        hp = f.parent >= 0
        nested[hp] = f.name[f.parent[hp]] == code
        # the call every request makes, not its extra copies on a conditional path (the store
        # queries a cache makes on a miss, a retry: extra_calls.py): those are that path's
        top = mask & ~nested & ~extra_mask(f, code)
        per_req = ctx.per_request(top, f.dur)
        presence = float((np.bincount(f.request[top], minlength=n) > 0).mean())
        # a conditional path's call, unless a breaker stopped every request's call
        opened = presence_before_open(ctx, code, top) if presence < 0.4 else None
        if presence < 0.4 and opened is None:
            continue
        # time the caller sat in a process stall (a pause, a CPU quota, a blocked event loop: gc_pause's
        # and cpu_throttling's episodes) while the call ran: the reply is read late, not the callee's
        stalled = stalled_time(ctx, top)
        share = ctx.share_of(top, f.dur - stalled)
        d = (f.dur - stalled)[top].astype(np.float64)
        p50, p99 = float(np.median(d)), float(np.quantile(d, 0.99))
        # the callee's own time, where its SERVER span is traced
        spans = np.nonzero(top)[0]
        child = server_children(f, spans)
        far = far_side(f, spans, child)
        server_share = None
        callee = None
        slow_one = None
        if far is not None:
            server_share = ctx.share_of(np.isin(np.arange(len(f)), far[0]), f.dur) / max(share, 1e-9)
        if len(child) > 0.5 * len(spans):
            callee = _callee(ctx, child)
            slow_one = straggler(f, child)
        # a dependency's tail is the time its side of the call takes: where that side is traced, the
        # rest of the call (the wire, the caller's stall reading the reply late) is not its tail: the
        # call's p99 were only the far side to vary (its spread over the call's median)
        spread = far[2] - far[1] if far is not None else p99 - p50
        heaviness = 1.0 + spread / max(p50, 1.0)
        strength = logistic(np.log10(max(heaviness, 1.0)), 0.45, 0.1)
        weight = material_weight(share)  # a heavy-tailed call is present; is it material?
        confidence = strength * weight
        # a heavy tail alone is every dependency's: a cause needs it out of the ordinary (abnormal_tail)
        far_d = f.dur[far[0]].astype(np.float64) if far is not None else d
        kind, unusual = abnormal_tail(f.start[top], d, far_d, slow_one is not None) or (None, None)
        absent = signature_absent(kind)  # no episode, straggler or slow mode: its usual tail, or any call's
        confidence = confidence if absent is None else min(confidence, USUAL_TAIL_CAP)
        # an untraced callee slow while its callers ask more of it: its capacity, not its speed
        asked = asked_more(f, code, spans, d, kind, far is not None)
        # its long calls wait for a pooled connection others hold (lock_contention's pool_release test)
        if pool_wait := ctx.notes.get("pool_wait_names", {}).get(code, 0.0) >= 0.5:
            confidence = min(confidence, USUAL_TAIL_CAP)
        # ... or queue behind an earlier reply on their process's shared connection (head_of_line.py)
        if behind := ctx.notes.get("behind_reply_names", {}).get(code, 0.0) >= 0.5:
            confidence = min(confidence, USUAL_TAIL_CAP)
        name = f.names[code]
        stage = ctx.stage_of_name(code)
        summary = (
            f"'{name}' (a call to another service, made by {presence:.0%} of requests) has a heavy tail: p50 "
            f"{ms(p50):.1f} ms, p99 {ms(p99):.1f} ms ({p99 / max(p50, 1.0):.1f}x), and carries {share:.0%} "
            "of the tail excess"
            + (
                f"; {min(server_share, 1):.0%} of that is the callee's own time"
                if server_share is not None
                else ""
            )
            + (f"; its far side (the callee's span) p50 {ms(far[1]):.1f} ms, p99 {ms(far[2]):.1f} ms: "
               f"{heaviness:.1f}x the call's median were only that side to vary (the rest of the call is "
               "the wire's or its caller's)"
               if far is not None else "")
            + (f"; the calls to {callee[0]} carry most of it ({', '.join(callee[1])})" if callee else "")
            + (f"; one instance is a straggler: {slow_one[0]} answers in {slow_one[1]:.1f} ms at the "
               f"{slow_one[3]} against {slow_one[2]:.1f} ms for the others" if slow_one else "")
            + "."
        )
        stats = {
            "callee_service": callee[0] if callee else None,
            "callee_instances": callee[1] if callee else [],
            "p50_ms": ms(p50),
            "p99_ms": ms(p99),
            "p99_over_p50": round(heaviness, 2),  # the far side's, where traced
            "far_side_p50_ms": ms(far[1]) if far is not None else None,
            "far_side_p99_ms": ms(far[2]) if far is not None else None,
            "tail_excess_share": round(share, 3),
            "presence": round(presence, 3),
            "callee_share": None if server_share is None else round(float(server_share), 3),
            "straggler_instance": slow_one[0] if slow_one else None,
            "straggler_at": slow_one[3] if slow_one else None,
            "unusual_tail": unusual,
            "unusual_kind": kind,  # which test held (dependency_tail.signature_absent reads it)
        }
        if opened is not None:
            stats["presence_before_breaker_opened"] = round(opened, 3)
            summary += (f" Every request made it ({opened:.0%}) until its calls failed and it stopped being "
                        "made at one moment: a circuit breaker opened and the requests took its fallback.")
        if absent is not None and strength * weight > USUAL_TAIL_CAP:  # the cap acted (calibration.gate)
            stats["signature_absent"] = absent
            stats["confidence_before_cap"] = round(float(strength * weight), 3)
        if pool_wait:
            summary += (" Its long calls wait for a pooled connection others hold (see lock_contention), "
                        "not for the dependency's work.")
        elif behind:
            summary += (" Its long calls wait behind an earlier reply on their process's shared connection "
                        "(see lock_contention), not for the dependency's work.")
        elif absent is None:
            summary += f" Its tail is out of the ordinary: {unusual}." + (sentence(asked) if asked else "")
            stats["episode_follows_demand"] = list(asked) if asked else None
        elif strength * weight > USUAL_TAIL_CAP:
            summary += (f" {absent[0].upper()}{absent[1:]}{f' ({unusual})' if unusual else ''}; nothing says "
                        "the dependency changed (its mechanism's own signature is absent): a possible cause.")
        split = ctx.split
        chart = {
            "kind": "dependency_tail_share",
            "quantiles": [0.5, 0.75, 0.9, 0.95, 0.99, 0.999],
            "dependency_ms": [ms(np.quantile(d, q)) for q in (0.5, 0.75, 0.9, 0.95, 0.99, 0.999)],
            "latency_ms": [ms(np.quantile(reqs.latency, q)) for q in (0.5, 0.75, 0.9, 0.95, 0.99, 0.999)],
            "tail_mean_dependency_ms": ms(per_req[split.tail].mean()) if split.tail.any() else 0.0,
            "body_mean_dependency_ms": ms(per_req[split.body].mean()) if split.body.any() else 0.0,
            "tail_mean_latency_ms": ms(reqs.latency[split.tail].mean()) if split.tail.any() else 0.0,
            "body_mean_latency_ms": ms(reqs.latency[split.body].mean()) if split.body.any() else 0.0,
        }
        # the call's tail is a deadline and a retry, or its payload: part of that finding
        # (its own, or a payload step inside the callee): what is left of its share once that
        # finding's is taken out is what the call itself adds
        for note, pattern, why in (
            ("retried_names", "timeout_retry", "a client deadline and a retry"),
            ("payload_names", "large_payload", "the size of what it carries"),
        ):
            noted = ctx.notes.get(note, {})
            mine = [c for c in noted if c == code or _inside(f, c, code)]
            other = max((noted[c] for c in mine), default=0.0)
            if other >= 0.5 and "part_of" not in stats:
                explained = sum(ctx.notes.get(note + ":share", {}).get(c, 0.0) for c in mine)
                confidence = min(strength * material_weight(max(share - explained, 0.0)), 0.9 * other)
                stats["part_of"] = pattern
                summary += f" Its tail is {why} (see {pattern})."
        # its time per request follows the request's size (the rows of the items another step handles)
        if "part_of" not in stats and (grows := grows_with_size(ctx.notes, per_req)) is not None:
            confidence = min(confidence, 0.9 * max(grows[2], USUAL_TAIL_CAP))
            stats["grows_with_request_size"] = {"size": grows[0], "spearman": round(grows[1], 3)}
            summary += f" It grows with the request {grows[0]} (Spearman {grows[1]:.2f}): see large_payload."
        confidence = confidence if asked is None else min(confidence, USUAL_TAIL_CAP)
        # its slow calls take what their size asks, the time per unit steady: its spread (size_spread.py)
        if confidence > USUAL_TAIL_CAP and (sized := tail_of_size(ctx, code, spans, d)) is not None:
            confidence, stats["tail_of_size"] = USUAL_TAIL_CAP, sized
            summary += size_sentence(sized)
        # where the callee's SERVER span is traced, the dependency is slow only if its own time makes
        # the call's tail: a gap around it is the wire's or the accept queue's (see network), and time
        # the callee spends waiting before its work starts (a queue span, or before its first child) is
        # a queue in the callee (see queueing)
        if server_share is not None and confidence > 0.45:  # (the cap below changes nothing under it)
            own = clamp01(float(server_share))
            waiting = clamp01(_callee_wait_share(ctx, child) / max(share, 1e-9)) if len(child) else 0.0
            # the model's forward pass inside the callee is compute_bound's (a model server's time)
            # (not where one callee instance's own excursions carry it: that host stalls, see straggler)
            forward = 0.0 if slow_one and slow_one[3] == "p99" else \
                clamp01(ctx.share_of(top, forward_inside(ctx)) / max(share, 1e-9))
            work = max(own - waiting - forward, 0.0)
            stats["callee_wait_share"] = round(waiting, 3)
            stats["callee_forward_share"] = round(forward, 3)
            if work < 0.5:
                confidence = min(confidence, strength * material_weight(share * work), 0.45)
                parts = {
                    "the gap around the callee's span (see network)": 1.0 - own,
                    "the callee's wait before its work starts, a queue in the callee (see queueing)": waiting,
                    "the model's forward pass in the callee (see compute_bound)": forward,
                }
                summary += f" The callee's own work carries only {work:.0%} of it; the most is " + (
                    max(parts, key=parts.get) + ".")
        # a dependency serves every caller alike: slow calls from only some calling instances are
        # their path (the network from their node) or their host, not the dependency
        # (looked for too where only the usual-tail cap holds the call under 0.45: where it acts)
        capped = absent is not None and strength * weight > USUAL_TAIL_CAP
        callers = caller_side(f, spans, d) if confidence > 0.45 or capped else None
        if callers is not None:
            confidence = min(confidence, 0.45)
            stats["slow_calls_from_callers"] = callers[2]
            summary += (
                f" Its slowest calls come from {len(callers[2])} of the calling instances "
                f"({', '.join(callers[2][:4])}: {callers[0]:.0%} of them), which make {callers[1]:.0%} "
                "of the calls: those callers' path or host, not the dependency (see network)."
            )
        # the tail is out of the ordinary only in some callers' calls: theirs (their node's network)
        elif (confidence > 0.45 or capped) and unusual and slow_one is None and far is None and (
                few := usual_without_callers(f, spans, d)) is not None:
            confidence = min(confidence, 0.45)
            stats["slow_calls_from_callers"] = few[0]
            summary += (f" But only in the calls of {', '.join(few[0][:4])} ({few[1]:.0%} of the slowest "
                        f"calls from {few[2]:.0%} of the calls): from the other callers its tail is its "
                        "usual one: those callers' path or host, not the dependency (see network).")
        advice = ADVICE.format(where=f"'{name}'", p99=f"{ms(p99):.1f}", p50=f"{ms(p50):.1f}")
        findings.append(Finding(PATTERN, clamp01(confidence), stage or "downstream", name,
                                {"summary": summary, "stats": stats, "chart": chart}, advice))
    findings.sort(key=lambda x: -x.confidence)
    return findings[:2]


def attempts_of_calls(f, inside: np.ndarray) -> set[int]:
    """Names whose spans mostly (>= 50 %) sit directly inside a CLIENT span of their own service with
    another name: the HTTP attempts an SDK call's client library writes under the call (one name,
    such as `HTTP POST`, for every destination). Their time is the call's, and the call is judged as
    a whole (its retries and backoffs included); judged alone, one name mixes fast and slow peers."""
    hp = inside & (f.parent >= 0)
    p = f.parent[hp]
    under = np.zeros(len(f), bool)
    under[np.nonzero(hp)[0]] = (f.kind[p] == KIND_CLIENT) & (f.service[p] == f.service[hp]) & (
        f.name[p] != f.name[hp])
    is_client = inside & (f.kind == KIND_CLIENT)
    total = np.bincount(f.name[is_client], minlength=len(f.names))
    nested = np.bincount(f.name[is_client & under], minlength=len(f.names))
    return set(np.nonzero((total > 0) & (nested * 2 >= total))[0].tolist())


def server_children(f, spans: np.ndarray) -> np.ndarray:
    """The SERVER spans whose parent is one of `spans` (the callee's side of those calls, where traced)."""
    child = np.nonzero((f.parent >= 0) & (f.kind == KIND_SERVER))[0]
    return child[np.isin(f.parent[child], spans)]


def far_side(f, spans: np.ndarray, server: np.ndarray) -> tuple[np.ndarray, float, float] | None:
    """The far side of calls `spans` where most of them have it traced: (its spans, their p50 and p99
    durations in ns). The far side is the callee's SERVER span (`server`), else a child CLIENT span
    of another service: a sidecar proxy's outbound span, which holds the callee's part and the wire
    beyond the proxy. None where fewer than half of the calls have one."""
    if len(server) <= 0.5 * len(spans):
        kids = np.nonzero((f.parent >= 0) & (f.kind == KIND_CLIENT))[0]
        kids = kids[np.isin(f.parent[kids], spans)]
        server = kids[f.service[kids] != f.service[f.parent[kids]]]
        if len(server) <= 0.5 * len(spans):
            return None
    d = f.dur[server].astype(np.float64)
    return server, float(np.median(d)), float(np.quantile(d, 0.99))


def _callee_wait_share(ctx: Context, server: np.ndarray) -> float:
    """The share of the tail excess carried by the callee's wait before its work: per SERVER span, its
    queue-stage descendants inside the callee's process (a model server's queue span sits under the
    model's span, not only directly under the SERVER span: dependency_tail.queued_below) plus the time
    from its start to its first child's start where it has children."""
    f = ctx.frame
    queue = ctx.span_stage_mask("queue")
    is_server = np.zeros(len(f), bool)
    is_server[server] = True
    kids = np.nonzero(is_server[np.maximum(f.parent, 0)] & (f.parent >= 0))[0]
    first = np.full(len(f), np.iinfo(np.int64).max)
    np.minimum.at(first, f.parent[kids], f.start[kids])
    lead = np.where(first[server] < np.iinfo(np.int64).max, first[server] - f.start[server], 0)
    values = np.zeros(len(f))
    values[server] = np.maximum(lead, 0)
    q = queued_below(f, server, queue)
    values[q] = f.dur[q]
    mask = np.zeros(len(f), bool)
    mask[server] = True
    mask[q] = True
    return ctx.share_of(mask, values)


def _callee(ctx: Context, child: np.ndarray) -> tuple[str, list[str]]:
    """The service (and its instances) whose SERVER spans under the call carry most of its tail
    excess: where a slow dependency acts (one CLIENT name may reach several peers)."""
    f = ctx.frame
    shares = {}
    for svc in np.unique(f.service[child]).tolist():
        mine = child[f.service[child] == svc]
        shares[svc] = ctx.share_of(np.isin(np.arange(len(f)), mine), f.dur)
    svc = max(shares, key=shares.get)
    mine = child[f.service[child] == svc]
    # the instances by the time they add over the calls' median (a straggler replica first)
    d = f.dur[mine].astype(np.float64)
    added = np.bincount(f.instance[mine], weights=d - float(np.median(d)), minlength=len(f.instances))
    counts = np.bincount(f.instance[mine], minlength=len(f.instances))
    return f.services[svc], [f.instances[i] for i in np.argsort(-added)[:4] if counts[i] > 0]


def _inside(f, inner: int, outer: int) -> bool:
    """Whether most spans named `inner` run inside a span named `outer` (any ancestor: the payload
    step of the callee, below the callee's SERVER span, is part of the caller's call)."""
    if inner == outer:
        return False
    spans = np.nonzero(f.name == inner)[0]
    hit = np.zeros(len(spans), bool)
    cur = f.parent[spans]
    for _ in range(12):
        alive = cur >= 0
        if not alive.any():
            break
        hit[alive] |= f.name[cur[alive]] == outer
        cur = np.where(alive, f.parent[np.maximum(cur, 0)], -1)
    return bool(len(spans)) and float(hit.mean()) >= 0.5


def stalled_time(ctx: Context, mask: np.ndarray) -> np.ndarray:
    """Per span (0 outside `mask`): the time it spent inside the stall episodes of its own instance
    (ctx.notes['gc_episodes']: gc_pause's and cpu_throttling's) or in the pauses its runtime reported
    (GC events): a stalled caller reads a reply late."""
    from tailscope.analysis.diagnosis.long_stalls import stall_overlap

    f = ctx.frame
    out = np.zeros(len(f), np.int64)
    idx = np.nonzero(mask)[0]
    # the runtime's own pause reports count too: gc_pause keeps as episodes only the stalls its timing
    # test found (or the longest reported ones), and a reply read late in any reported pause is late
    for pauses in (ctx.notes.get("gc_episodes"), ctx.reported_pauses if len(f.gc_time) else None):
        if pauses is not None and len(pauses[0]):
            overlap = stall_overlap(f.instance[idx], f.start[idx], f.end[idx], *pauses)
            out[idx] = np.maximum(out[idx], np.minimum(overlap, f.dur[idx]))
    return out
