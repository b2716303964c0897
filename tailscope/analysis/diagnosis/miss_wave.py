"""cache_miss from a wave of refetches: entries written at one moment (a bulk preload, a warm-up, a
refill after a flush) expire together a TTL later; from that moment every request misses on them and
fetches them from the store behind the cache in the call it makes for its misses, and each fetched
entry is cached again, so the number of items that call carries surges at one moment and falls back
as the popular entries are refilled first (the rarely read ones keep missing a while).

What tells it apart. A large payload is set by the requests: the sizes a request brings (its root's,
those of the span that makes the call) change with the call's. Data gone cold in the callee
(cold_after_change.py) makes the same calls slower; here the calls are larger. A cold start has new
instances; a burst more calls. Here the calls arrive at their usual rate, each fetching more items,
while the request asks for no more: what it found in its cache changed.

Statistic, per CLIENT call name (>= 200 calls in requests) and size-like numeric attribute of it
(large_payload.span_sizes: >= 10 distinct values) whose value predicts the call's time (Spearman >=
MIN_RHO): per calling instance (>= MIN_CALLS calls), the onset of the size (cold_after_change.onset on
the sizes: the bin after which the size over its median before jumps most, >= 4x any earlier bin's,
the calls' rate 0.7-1.3x), the instances' curves after it pooled and judged with cold_after_change's
decay_strength (a front-loaded fall from a peak at the onset, not a plateau, not episodes). Times
(1 - logistic(follows, 0.5, 0.1)), `follows` the largest Spearman between the call's size and a
size-like attribute of its request's root or of the span holding the call (not a cache's own count:
cache-named keys are the misses). Weight: the size-driven part of the calls' time after the onsets
(Theil-Sen slope x the size over its median before) as a share of the tail excess. Cap CAP_SIGN where
the call or the span holding it names a cache (attributes.cache_signs), CAP without: a memo of fetched
items is a cache whatever it is called, but nothing names it. The finding names the span holding the
call where that span is the cache's (it carries the sign), else the call; large_payload on the call
(or the span holding it) is then part of it (runner.arbitrate), and cold_after_change leaves a
callee whose calls grew with their size.
"""

from __future__ import annotations

import numpy as np

from tailscope.analysis.diagnosis.attributes import cache_signs, key_is_cache
from tailscope.analysis.diagnosis.cold_after_change import BINS, decay_strength, onset
from tailscope.analysis.diagnosis.frame import KIND_CLIENT
from tailscope.analysis.diagnosis.large_payload import span_sizes
from tailscope.analysis.diagnosis.model import Context, Finding
from tailscope.analysis.diagnosis.stats import (
    clamp01,
    excess_share,
    logistic,
    material_weight,
    spearman,
    theil_sen,
)
from tailscope.analysis.diagnosis.where import busiest, main_service

PATTERN = "cache_miss"
MECHANISM = "entries that expired together, refetched in the call for the misses (a wave of misses)"
MIN_CALLS = 100  # per calling instance
MIN_RHO = 0.5  # the size predicts the call's time at least this closely
CAP_SIGN, CAP = 0.95, 0.8
ADVICE = (
    "{where}: the items it fetches surged at one moment and fall back as they are cached again: entries "
    "written together expired together (a bulk preload, a warm-up, a refill after a flush), and every "
    "request missed on them at once. Spread the expiry: add jitter to the TTL of preloaded or refilled "
    "entries, refresh hot entries ahead of expiry (refresh-ahead / refreshAfterWrite), serve stale while "
    "revalidating, and coalesce concurrent loads of one key. The call's size is what the misses ask "
    "for: shrinking the payload will not help."
)


def detect(ctx: Context) -> list[Finding]:
    f = ctx.frame
    if ctx.n_requests < 100 or f.attribute_source is None or ctx.split.excess_ns <= 0:
        return []
    run0, run1 = float(f.start.min()), float(f.end.max())
    best = None
    calls = (f.kind == KIND_CLIENT) & (f.request >= 0)  # (a name both sides of a call share: gRPC)
    counts = np.bincount(f.name[calls], minlength=len(f.names))
    for code in np.nonzero(counts >= 200)[0].tolist():
        spans = np.nonzero(calls & (f.name == code))[0]
        d = f.dur[spans].astype(np.float64)
        for key, v in span_sizes(ctx, code, spans):
            ok = np.isfinite(v)
            if ok.mean() < 0.5 or len(np.unique(v[ok])) < 10:
                continue
            rho = spearman(v[ok], d[ok])
            if rho < MIN_RHO:
                continue
            wave = _wave(ctx, spans[ok], v[ok], run0, run1)
            if wave is None:
                continue
            strength, onsets, over, front, late = wave
            follows = _follows(ctx, spans[ok], v[ok])
            strength *= 1 - logistic(follows, 0.5, 0.1)
            slope, _ = theil_sen(v[ok], d[ok], ctx.rng)
            per_request = np.bincount(f.request[spans[ok]], weights=max(slope, 0.0) * over,
                                      minlength=ctx.n_requests)
            share = clamp01(excess_share(per_request, ctx.split))
            holder, sign = _holder(ctx, spans, code)
            confidence = (CAP_SIGN if sign else CAP) * strength * material_weight(share)
            if best is None or confidence > best[0]:
                best = (confidence, code, spans, key, rho, onsets, share, front, late, follows, holder, sign,
                        slope)
    if best is None or best[0] < 0.05:
        return []
    finding = _finding(ctx, *best)
    ctx.notes["miss_wave"] = {"calls": {f.names[best[1]]}, "spans": {finding.span_name}, "key": best[3],
                              "confidence": finding.confidence}
    return [finding]


def _wave(ctx: Context, spans: np.ndarray, v: np.ndarray, run0: float, run1: float):
    """(strength, [(instance, onset bin, size before)], each call's size over its instance's size
    before its onset (0 before the onset), half over nine tenths, last quarter over the peak); None
    without an onset on any calling instance."""
    f = ctx.frame
    inst = f.instance[spans]
    pooled, weight = np.zeros(BINS), np.zeros(BINS)
    over = np.zeros(len(spans))
    onsets = []
    for i in np.unique(inst).tolist():
        mine = np.nonzero(inst == i)[0]
        if len(mine) < MIN_CALLS:
            continue
        mine = mine[np.argsort(f.start[spans[mine]], kind="stable")]
        found = onset(f.start[spans[mine]].astype(np.float64), v[mine], run0, run1)
        if found is None:
            continue
        k, base, pre, floor, curve, calls, b = found
        pooled[:len(curve)] += np.maximum(curve - floor, 0.0) * calls
        weight[:len(curve)] += calls
        after = b >= k
        over[mine[after]] = np.maximum(v[mine][after] - base * (1.0 + pre), 0.0)
        onsets.append((f.instances[i], k, base))
    if not onsets:
        return None
    used = weight >= 0.5 * weight[0]
    curve = pooled[used] / weight[used]
    if len(curve) < 4:
        return None
    strength, front, _, late = decay_strength(curve)
    return strength, onsets, over, front, late


def _follows(ctx: Context, spans: np.ndarray, v: np.ndarray) -> float:
    """The largest Spearman between the call's size and a size the request brings: a size-like
    attribute of its root or of the span holding the call (cache-named keys left out: a count of
    misses is the call's size itself)."""
    from tailscope.analysis.diagnosis.large_payload import NOT_A_SIZE
    from tailscope.analysis.diagnosis.large_payload import _root_sizes as root_sizes

    f = ctx.frame
    best = 0.0
    candidates = [(key, per_req[f.request[spans]]) for key, per_req in root_sizes(ctx).items()
                  if not NOT_A_SIZE.search(key.lower())]
    parents = f.parent[spans]
    has = parents >= 0
    if has.mean() >= 0.5:
        p_code = int(np.bincount(f.name[parents[has]]).argmax())
        mine = has & (f.name[np.maximum(parents, 0)] == p_code)
        for key, pv in span_sizes(ctx, p_code, parents[mine]):
            full = np.full(len(spans), np.nan)
            full[mine] = pv
            candidates.append((key, full))
    for key, size in candidates:
        if key_is_cache(key.removeprefix("root:")):
            continue
        ok = np.isfinite(size)
        if ok.mean() < 0.5 or len(np.unique(size[ok])) < 10:
            continue
        best = max(best, spearman(size[ok], v[ok]))
    return best


def _holder(ctx: Context, spans: np.ndarray, code: int) -> tuple[int, str | None]:
    """The span name the finding names: the span holding the calls where it (not the call) names a
    cache, else the call; and the cache's sign, if any."""
    f = ctx.frame
    parents = f.parent[spans]
    has = parents >= 0
    if has.mean() >= 0.5:
        p_code = int(np.bincount(f.name[parents[has]]).argmax())
        roots = np.zeros(len(f), bool)
        roots[f.requests.root] = True
        holders = parents[has][f.name[parents[has]] == p_code]
        if (f.kind[holders] != KIND_CLIENT).all() and not roots[holders].any():
            sign = cache_signs(f, [p_code])
            if sign is not None:
                return p_code, sign
    return code, cache_signs(f, [code])


def _finding(ctx: Context, confidence: float, code: int, spans: np.ndarray, key: str, rho: float,
             onsets: list, share: float, front: float, late: float, follows: float, holder: int,
             sign: str | None, slope: float) -> Finding:
    f = ctx.frame
    call, name = f.names[code], f.names[holder]
    span_s = (float(f.end.max()) - float(f.start.min())) / 1e9
    at = [round(k / BINS * span_s, 1) for _, k, _ in onsets]
    before = float(np.median([b for _, _, b in onsets]))
    service = main_service(f, spans)
    where = busiest(f, f.instance[spans])
    summary = (
        f"The items '{call}' fetches ({key}) surged at one moment on {len(onsets)} calling instance(s) "
        f"({', '.join(i for i, _, _ in onsets[:4])}, from {', '.join(str(a) for a in at[:4])} s into the "
        f"run; median {before:,.0f} before) with the calls made at their usual rate, then fell back less "
        f"and less quickly (half of the surge's extra items came in the first {front:.0%} of the time nine "
        f"tenths did; the last quarter at {late:.0%} of the peak), and the call's time follows them "
        f"(Spearman {rho:.2f}, {slope / 1e6:.3f} ms per item), while the request asks for no more (the "
        f"largest rank correlation with a size the request brings: {follows:.2f}): entries that expired "
        "together and are refetched by the requests that miss them, a wave of misses. "
        + (f"A cache: {sign}. " if sign else "Nothing names a cache: a memo of the fetched items. ")
        + f"The refetched items' time carries {share:.0%} of the tail excess."
    )
    stats = {
        "mechanism": MECHANISM, "call": call, "size_attribute": key, "spearman": round(rho, 3),
        "ms_per_item": round(slope / 1e6, 4), "onset_instances": [i for i, _, _ in onsets], "onset_s": at,
        "size_before": round(before, 3), "half_over_nine_tenths": round(front, 3),
        "last_quarter_over_peak": round(late, 3), "request_size_follows": round(follows, 3),
        "cache_evidence": sign, "tail_excess_share": round(share, 3), "slow_path_spans": [call],
        "services": [service] if service else [], "instances": where,
    }
    stage = ctx.stage_of_name(holder)
    return Finding(PATTERN, clamp01(confidence), stage, name, {"summary": summary, "stats": stats},
                   ADVICE.format(where=f"'{name}'" + (f" ({stage})" if stage else "")))


def settle(findings: list[Finding]) -> list[Finding]:
    """large_payload on a wave's call (or the span holding it) whose size is the wave's: the misses'
    count, not a payload the requests sent; part of the cache miss, a possible cause at most."""
    waves = [fd for fd in findings if fd.pattern == PATTERN and fd.confidence >= 0.5
             and fd.evidence.get("stats", {}).get("mechanism") == MECHANISM]
    for fd in findings:
        stats = fd.evidence.get("stats", {})
        if fd.pattern != "large_payload":
            continue
        for wave in waves:
            w = wave.evidence["stats"]
            key = str(stats.get("size_attribute"))
            mine = key == w["size_attribute"] or key_is_cache(key)  # the miss count, on the call or around it
            if fd.span_name in (w["call"], wave.span_name) and mine:
                fd.confidence = min(fd.confidence, 0.45)
                stats["part_of"] = PATTERN
                fd.evidence["summary"] += (
                    f" Its size is the number of items the cache missed (see cache_miss on "
                    f"'{wave.span_name}': they surged when entries expired together): part of the cache "
                    "miss, not a payload the requests sent."
                )
                break
    return findings
