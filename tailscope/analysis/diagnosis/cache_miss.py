"""cache_miss: a stage with two modes in log duration, the slow one explained by a miss.

Statistic. For every span name (outside the request root, the queue and the model's forward pass), a
two-component Gaussian mixture is fitted to log duration by EM. Two clean modes (Ashman's D > 2, BIC
in favour of two components, a slow-mode weight between 0.5 % and 60 % (up to 95 % where the miss
rate changed during the run: a flushed cache), the slow mode at least 1.5x the fast one) make a
candidate; its weight in the tail is the share of the tail excess carried by the name (with its
child spans). Then we look for what explains the slow mode: a span attribute value (e.g.
cache.hit=false) or a child span name that appears in the slow mode and not in the fast one. Two
modes are named a cache miss only where something says there is a cache: a call made on the slow
path only (the store behind it), a cache system (`db.system` redis, memcached, ...), a cache name or
a hit/miss attribute on the span or its children; named (>= 0.5) only where a slow-path call or a
hit/miss value marks the slow mode as the misses. A deadline and a retry, a payload whose size
varies, a heavy-tailed dependency or a pause make two modes too. The miss rate is the slow-mode
weight; misses are "synchronised" when their counts per time bin are over-dispersed (keys expiring
together), and a "cold cache" when the miss rate in the first tenth of the run is far above the
rest. A miss rate that stays the same all run (none of these, nor a higher rate on instances' first
requests) is how the service runs: a cache that works (misses below 10 %), one whose hits answer the
whole request (a semantic cache in front of an LLM misses most questions by design), or, at any rate,
misses that carry little of the tail excess (a per-location cache's ordinary expiries: two modes as
stationary as the service, costing every request alike) or that fall on the tail's requests no more
often than their number of lookups and chance make them (miss_mix.py: a loop of many steps meets many
misses; the request's shape, not the cache): a possible cause, below 0.5.
"""

from __future__ import annotations

import math

import numpy as np

from tailscope.analysis.diagnosis.cache_evidence import (
    RESPONSE_CACHE_CAP,
    WORKING_MISS_RATE,
    cache_evidence,
    cut_by_deadline,
    explained_by_request_kind,
    name_share,
    section_crowd,
    shows_a_miss_path,
    slow_in_cache_calls,
    slow_mode_in_pauses,
    slow_mode_is_gap,
    slow_path_cover,
)
from tailscope.analysis.diagnosis.extra_calls import beyond_usual, failed_before, retries, waited_before
from tailscope.analysis.diagnosis.fallback_path import sets_up_next_call
from tailscope.analysis.diagnosis.frame import KIND_CLIENT, KIND_SERVER
from tailscope.analysis.diagnosis.lock_contention import concurrency_at_start
from tailscope.analysis.diagnosis.miss_mix import mix_explains_tail, tail_miss_shares
from tailscope.analysis.diagnosis.model import Context, Finding
from tailscope.analysis.diagnosis.poll_loops import waits_on_polls
from tailscope.analysis.diagnosis.stats import clamp01, excess_share, gmm2, logistic, ms, spearman
from tailscope.vocabulary import ALL_STAGES

PATTERN = "cache_miss"
ADVICE = (
    "{where} is bimodal: a fast path and a slow path taken {rate:.1%} of the time{explained}. Fix the cache "
    "policy, not its size: {specific}prefetch or refresh hot keys ahead of expiry (refresh-ahead), add "
    "jitter to TTLs so keys do not expire together, serve stale while revalidating, and coalesce "
    "concurrent misses for one key (single-flight). More cache memory only helps if evictions, not "
    "expiry or cold start, cause the misses."
)
SKIP = {ALL_STAGES.index(s) for s in ("queue", "model_forward")}
MIN_SPANS, MAX_FIT = 100, 5_000
MAX_RATE = 0.95  # a slow mode of up to 95 % of spans: after a flush nearly every lookup misses
USUAL_MAX_RATE = 0.6  # above it the slow mode is a miss path only where the miss rate changed
MIN_LOG_RATIO = math.log(1.5)  # the slow mode at least 1.5x the fast one
STEADY_CAP = 0.45  # misses at one rate all run: the cache's ordinary cost, a possible cause
STEADY_TAIL_SHARE = 0.15  # ... at any rate where they carry less of the tail excess than this
UNMARKED_CAP = 0.45  # a cache nearby whose misses nothing ties to the slow mode: a possible cause
INTERNAL_KEYS = ("score", "slow_path", "slow_path_labels")  # _explain's, not for the evidence


def _explain(ctx: Context, code: int, spans: np.ndarray, slow: np.ndarray) -> dict | None:
    """The attribute value or child name that best separates the slow mode from the fast one."""
    f = ctx.frame
    best = None
    pos = np.full(len(f), -1)
    pos[spans] = np.arange(len(spans))
    n_slow, n_fast = int(slow.sum()), int((~slow).sum())
    if n_slow == 0 or n_fast == 0:
        return None

    slow_path: list[int] = []  # child spans made on the slow path (a store call on misses)
    slow_labels: dict[int, str] = {}  # how each was found (the child, or its extra copies)
    abandoned = ctx.notes.get("abandoned_attempts")  # a call made again after a deadline: a retry

    def consider(label: str, present: np.ndarray, child: int = -1) -> None:
        nonlocal best
        in_slow = float(present[slow].mean())
        in_fast = float(present[~slow].mean())
        score = in_slow - in_fast
        # (a call that sets up the next one every request makes, as a new connection does, is no miss)
        if child >= 0 and score > 0.5 and not sets_up_next_call(ctx, child):
            slow_path.append(child)
            slow_labels.setdefault(child, label)
        if abs(score) > 0.5 and (best is None or abs(score) > abs(best["score"])):
            best = {
                "explained_by": label,
                "in_slow_mode": round(in_slow, 3),
                "in_fast_mode": round(in_fast, 3),
                "score": score,
            }

    # child spans present only on one path (a store lookup made on misses); a call out's own are its making
    call = float((f.kind[spans] == KIND_CLIENT).mean()) > 0.5
    child = np.nonzero((f.parent >= 0) & (pos[np.maximum(f.parent, 0)] >= 0))[0]
    for c in np.unique(f.name[child]):
        mine = child[f.name[child] == c]
        present = np.zeros(len(spans), bool)
        present[pos[f.parent[mine]]] = True
        # the callee's SERVER span is the same call seen from the peer that answered (one CLIENT name
        # for calls to several peers, as HTTP clients name spans by method): which peer, not a miss path
        callee = float((f.kind[mine] == KIND_SERVER).mean()) > 0.5
        consider(f"child span '{f.names[int(c)]}'", present, -1 if callee or call else int(c))
        # a call every span makes, made again on some (a store query per missing key under one
        # database span name): the extra copies are the slow path's (extra_calls.py). Only calls out
        # of the process: more copies of in-process work are more items (a bigger batch), not a miss
        extra = mine[beyond_usual(f.parent, f.start, mine) & ~retries(f, mine, abandoned)]
        out = float((f.kind[mine] == KIND_CLIENT).mean()) > 0.5
        if len(extra) and out and not callee and not call and not failed_before(f, int(c), mine, extra) \
                and not waited_before(f, mine, extra):
            present = np.zeros(len(spans), bool)
            present[pos[f.parent[extra]]] = True
            consider(f"extra '{f.names[int(c)]}' calls", present, int(c))
    for key, (idx, values) in ctx.frame.attributes(code).items():
        p = pos[idx]
        ok = p >= 0
        if ok.sum() < 0.5 * len(spans):
            continue
        vals = np.array(values, dtype=object)[ok]
        uniq, inv = np.unique(vals.astype(str), return_inverse=True)
        if len(uniq) > 8:
            continue
        for u in range(len(uniq)):
            present = np.zeros(len(spans), bool)
            present[p[ok][inv == u]] = True
            consider(f"{key}={uniq[u]}", present)
    if best is not None:
        best["slow_path"] = slow_path
        best["slow_path_labels"] = slow_labels
    if best is not None and best["score"] < 0:
        # the value marks the fast path (e.g. cache.hit=true): say so from the slow path's side
        best["in_slow_mode"], best["in_fast_mode"] = 1 - best["in_slow_mode"], 1 - best["in_fast_mode"]
        best["explained_by"] = "not " + best["explained_by"]
    return best


def detect(ctx: Context) -> list[Finding]:
    f = ctx.frame
    reqs = f.requests
    if len(reqs) < 50:
        return []
    root_depth = f.depth[reqs.root][np.maximum(f.request, 0)]
    inside = (f.request >= 0) & (f.depth > root_depth)
    counts = np.bincount(f.name[inside], minlength=len(f.names))
    findings = []
    ctx.notes["bimodal_names"] = {}
    for code in np.nonzero(counts >= MIN_SPANS)[0]:
        stage = int(ctx.name_stage[code])
        if stage in SKIP:
            continue
        spans = np.nonzero(inside & (f.name == code))[0]
        d = np.maximum(f.dur[spans].astype(np.float64), 1.0)
        x = np.log(d)
        fit_x = x if len(x) <= MAX_FIT else ctx.rng.choice(x, MAX_FIT, replace=False)
        mix = gmm2(fit_x)
        if mix is None or mix.bic_gain < 10 or mix.separation < 2.0 or not (0.005 <= mix.w[1] <= MAX_RATE):
            continue
        # a miss takes another path and costs a multiple of a hit; two halves of one narrow spread
        # (a uniform 6-7 ms passes Ashman's D) are not two paths
        if mix.mu[1] - mix.mu[0] < MIN_LOG_RATIO:
            continue
        slow = x >= mix.threshold
        rate = float(slow.mean())
        # a slow mode made of GC pauses (allocation-heavy code triggers them) is the gc_pause finding's
        if slow_mode_in_pauses(ctx, spans, slow):
            continue
        if slow_mode_is_gap(ctx, spans, slow):  # time outside the callee's span: the network's, no miss
            continue
        if waits_on_polls(ctx, int(code), spans, slow):  # a poll loop's longer wait: no miss path
            continue
        why = _explain(ctx, code, spans, slow)
        # a slow mode that comes with a crowd in the same span is contention (a lock), not a miss; so is
        # one that comes with a crowd in the enclosing section (a lock wait inside it). Unless the slow
        # spans spend their extra time in a call out of the process made on the slow path only: a
        # miss going to the store. Misses that come together (a stampede) hold their spans longer,
        # so they overlap more: the crowd is then what the misses make, not what makes them slow
        crowd = spearman(concurrency_at_start(ctx, spans).astype(np.float64), slow.astype(np.float64))
        crowded = crowd > 0.3 or section_crowd(ctx, spans, slow) > 0.5
        if crowded and slow_path_cover(ctx, spans, slow, (why or {}).get("slow_path") or []) < 0.5:
            continue
        ratio = math.exp(mix.mu[1] - mix.mu[0])
        share = name_share(ctx, code)
        # two modes are a cache only where something says there is a cache (cache_evidence)
        sign, marked = cache_evidence(ctx, code, spans, why, slow)
        # no path of the slow mode only, the slow mode inside the cache's own calls: a slow cache, no miss
        cache_slow = not shows_a_miss_path(why) and slow_in_cache_calls(ctx, code, spans, slow) > 0.5
        if sign is None or cache_slow or explained_by_request_kind(why):
            ctx.notes.setdefault("bimodal_without_cache", {})[int(code)] = rate
            continue
        ctx.notes["bimodal_names"][int(code)] = rate
        missed = np.zeros(len(reqs), bool)  # the requests that took the miss path (held_slots.py)
        missed[f.request[spans[slow]]] = True
        ctx.notes.setdefault("miss_requests", {})[f.names[code]] = missed
        # misses over time: synchronised expiry and cold cache
        t = f.start[spans]
        nb = 50
        tb = np.minimum((t - t.min()) * nb // max(int(t.max() - t.min()), 1), nb - 1)
        per_bin = np.bincount(tb, minlength=nb).astype(np.float64)
        miss_bin = np.bincount(tb[slow], minlength=nb).astype(np.float64)
        expected = per_bin * rate
        dispersion = float(((miss_bin - expected) ** 2).sum() / max(expected.sum() * (1 - rate), 1e-9))
        # ~1 for independent misses (binomial variance per bin), >> 1 when misses come in storms
        early = t < t.min() + (t.max() - t.min()) * 0.1
        early_rate = float(slow[early].mean()) if early.any() else rate
        late_rate = float(slow[~early].mean()) if (~early).any() else rate
        cold = early_rate > 3 * max(late_rate, 1e-3) and early_rate > 0.2
        # misses in the warm-up of each instance (its first requests after a (re)start)
        from tailscope.analysis.diagnosis.long_stalls import warm_up_mask

        in_warm = warm_up_mask(ctx)[np.maximum(f.request[spans], 0)]
        warm_rate = float(slow[in_warm].mean()) if in_warm.any() else rate
        settled_rate = float(slow[~in_warm].mean()) if (~in_warm).any() else rate
        # onset: misses that start together at one moment (every key expiring at once) and then go on
        # (each key refetched on its next use): a one-sided Kolmogorov-Smirnov distance between the
        # times of misses and of all spans, scaled to a z; positive when misses come late
        order_t = np.argsort(t, kind="stable")
        cum_all = np.arange(1, len(t) + 1) / len(t)
        cum_miss = np.cumsum(slow[order_t]) / max(int(slow.sum()), 1)
        n_miss = int(slow.sum())
        onset_z = float((cum_all - cum_miss).max()) * np.sqrt(n_miss * len(t) / max(n_miss + len(t), 1))
        k = int(np.argmax(cum_all - cum_miss))
        before_rate = float(slow[order_t[: k + 1]].mean()) if k >= 0 else rate
        onset = onset_z > 2.5 and before_rate < 0.25 * rate and not cold  # one-sided KS: p < 1e-5
        synced = (dispersion > 4 and not cold) or onset
        # a slow path most spans take is a miss path only where it became one: a cache flushed or
        # expired at one moment sends nearly every request to the store until refilled (the slow
        # mode then outweighs the fast one); a slow path most spans always take is the normal one
        if rate > USUAL_MAX_RATE and not (synced or cold):
            continue
        sync_strength = max(
            logistic(dispersion, 5.0, 1.5) if dispersion > 4 else 0.0,
            logistic(onset_z, 2.5, 0.5) if onset else 0.0,
        )

        strength = logistic(mix.separation, 2.5, 0.3) * logistic(mix.bic_gain, 30, 10)
        # the weight: the tail excess it carries, or (capped below a tail carrier) what the misses add
        # to the mean request
        added = rate * (math.exp(mix.mu[1]) - math.exp(mix.mu[0]))
        relative = added / max(float(np.median(reqs.latency)), 1.0)
        weight = max(logistic(share, 0.2, 0.06), 0.9 * logistic(relative, 0.02, 0.006))
        if synced:  # a miss storm (keys expiring together) stampedes the store even when cheap on average
            weight = max(weight, 0.85 * sync_strength)
        confidence = strength * weight * (1.0 if why else 0.85)
        # a steady miss rate (at random moments, the same all run and on instances' first requests) is how
        # the service runs where the cache works (misses < 10 %), where its hits answer the whole request
        # (a response or semantic cache), where the misses carry little of the tail excess, or where they
        # fall on the tail's requests no more often than the requests' number of lookups and chance make
        # them (miss_mix.py: more lookups meet more misses; the request's shape): a possible cause
        answers_request = float((f.kind[spans] == KIND_SERVER).mean()) > 0.5
        rewarmed = warm_rate > 3 * max(settled_rate, 1e-3) and warm_rate > 0.2
        n_early = max(int(early.sum()), 1)  # ... nor falling from the start far beyond chance (warming)
        warming = early_rate > 1.25 * late_rate and early_rate - late_rate > 4 * math.sqrt(
            late_rate * (1 - late_rate) / n_early)
        stationary = not synced and not cold and not rewarmed and not warming
        # the tail excess the misses' own cost carries (their count per request x the modes' gap), not
        # all the time of the span holding them (a pause inside it lands there whatever the cache did)
        per_req = np.bincount(f.request[spans], weights=slow * (math.exp(mix.mu[1]) - math.exp(mix.mu[0])),
                              minlength=len(reqs))
        miss_share = excess_share(per_req, ctx.split)
        tail_rate, null_rate, null_sd, more = tail_miss_shares(ctx, spans, slow) if stationary else (0,) * 4
        mixed = stationary and mix_explains_tail(tail_rate, null_rate, null_sd, more)
        trickle = stationary and (rate < WORKING_MISS_RATE or answers_request or mixed
                                  or min(share, miss_share) < STEADY_TAIL_SHARE)
        if trickle:  # (at a response cache's rate: which requests do the work, not why it is slow)
            confidence = min(confidence, RESPONSE_CACHE_CAP if answers_request and rate >= WORKING_MISS_RATE
                             else STEADY_CAP)
        # a cache nearby, nothing marking the slow mode as its misses (cache_evidence): a possible cause
        if not marked:
            confidence = min(confidence, UNMARKED_CAP)
        # the call that marks the slow path is one a client deadline cuts and makes again
        # (timeout_retry): its first attempts end at one duration in error and a second call follows,
        # which makes the two modes on its own; a miss path is not shown beside it
        deadline = cut_by_deadline(ctx, why)
        if deadline is not None:
            confidence = min(confidence, UNMARKED_CAP)
        name = f.names[code]
        stage_name = ALL_STAGES[stage] if stage >= 0 else None
        explained = (
            f", explained by {why['explained_by']} ({why['in_slow_mode']:.0%} of slow vs "
            f"{why['in_fast_mode']:.0%} of fast spans)"
            if why
            else ""
        )
        summary = (
            f"'{name}' has two duration modes: {ms(math.exp(mix.mu[0])):.2f} ms and "
            f"{ms(math.exp(mix.mu[1])):.2f} ms "
            f"({ratio:.0f}x), the slow one {rate:.1%} of spans{explained}; misses add {ms(added):.2f} "
            "ms to the mean request "
            f"({relative:.1%} of the median latency) and carry {share:.0%} of the tail excess; "
            f"a cache: {sign}"
            + (
                f"; misses come in bursts (dispersion {dispersion:.1f}x chance: keys expiring together)"
                if synced and not onset
                else ""
            )
            + (
                f"; misses start together: {before_rate:.0%} before one moment, {rate:.0%} overall "
                f"(onset z {onset_z:.1f}: keys expiring at once)"
                if onset
                else ""
            )
            + (
                f"; cold cache: miss rate {early_rate:.0%} in the first tenth of the run vs "
                f"{late_rate:.0%} after"
                if cold
                else ""
            )
            + (f"; but '{deadline}', the call on the slow path, is cut by a client deadline and made again "
               "(see timeout_retry): the deadline and the retry make the two modes, not shown to be misses"
               if deadline is not None else "")
            + ("; but nothing marks the slow mode as the misses (no call made on it only, no hit/miss "
               "value telling the modes apart): two modes beside a cache, not shown to be its misses"
               if not marked else "")
            + (f"; a steady miss rate of {rate:.1%} at random moments all run"
               + (" of a cache in front of the whole request (its misses are the requests that do the "
                  "service's work)" if answers_request and rate >= WORKING_MISS_RATE else "")
               + (f", its misses' cost carrying {min(share, miss_share):.0%} of the tail excess"
                  if min(share, miss_share) < STEADY_TAIL_SHARE else "")
               + (f", the tail's requests making {more:.1f}x the body's lookups, which miss {tail_rate:.0%} "
                  f"(by chance and their number {null_rate:.0%} ± {null_sd:.0%})" if mixed else "")
               + ": what the service's normal misses cost, not a change" if trickle else "")
            + "."
        )
        stats = {
            "miss_rate": round(rate, 4),
            "fast_ms": ms(math.exp(mix.mu[0])),
            "slow_ms": ms(math.exp(mix.mu[1])),
            "separation": round(mix.separation, 2),
            "bic_gain": round(mix.bic_gain, 1),
            "tail_excess_share": round(share, 3),
            "added_ms_per_request": ms(added),
            "added_share_of_median_latency": round(relative, 4),
            "miss_dispersion": round(dispersion, 2),
            "synchronised_expiry": synced,
            "miss_onset_z": round(onset_z, 2),
            "miss_rate_before_onset": round(before_rate, 4),
            "cold_cache": cold,
            "early_miss_rate": round(early_rate, 4),
            "late_miss_rate": round(late_rate, 4),
            "cache_evidence": sign,
            "warm_up_miss_rate": round(warm_rate, 4),
            "settled_miss_rate": round(settled_rate, 4),
            "steady_trickle": trickle,
            "tail_lookup_miss_rate": round(tail_rate, 4),
            "tail_lookup_miss_rate_by_chance": [round(null_rate, 4), round(null_sd, 4)],
            "tail_lookups_over_body": round(more, 2),
            "misses_cost_tail_share": round(miss_share, 3),
            "slow_mode_marked_as_misses": marked,
            "slow_path_cut_by_deadline": deadline,
        }
        if why:
            stats.update({k: v for k, v in why.items() if k not in INTERNAL_KEYS})
            stats["slow_path_spans"] = [f.names[c] for c in why["slow_path"]]
            if confidence >= 0.3:  # the calls made on the slow path are the misses' cost, not a dependency
                ctx.notes.setdefault("miss_path_names", set()).update(why["slow_path"])
        hist, edges = np.histogram(x / math.log(10) - 6, bins=60)
        grid = (edges[:-1] + edges[1:]) / 2
        chart = {
            "kind": "log_duration_histogram",
            "log10_ms": grid.round(4).tolist(),
            "count": hist.tolist(),
            "modes_ms": [ms(math.exp(mix.mu[0])), ms(math.exp(mix.mu[1]))],
            "threshold_ms": ms(math.exp(mix.threshold)),
            "miss_per_bin": miss_bin.tolist(),
            "spans_per_bin": per_bin.tolist(),
        }
        specific = ("misses arrive together, so jitter the TTLs first; " if synced else "misses are "
                    "concentrated after start, so warm the cache before taking traffic; " if cold else "")
        advice = ADVICE.format(where=f"'{name}'" + (f" ({stage_name})" if stage_name else ""), rate=rate,
                               explained=f" ({why['explained_by']})" if why else "", specific=specific)
        findings.append(Finding(PATTERN, clamp01(confidence), stage_name, name,
                                {"summary": summary, "stats": stats, "chart": chart}, advice))
    findings.sort(key=lambda x: -x.confidence)
    return _dedupe(ctx, findings)[:2]


def _dedupe(ctx: Context, findings: list[Finding]) -> list[Finding]:
    """A miss path shows in the parent and in its child; keep the outer span (it carries the mode)."""
    out, seen = [], set()
    for fd in findings:
        key = fd.stage or fd.span_name
        if key in seen:
            continue
        seen.add(key)
        out.append(fd)
    return out
