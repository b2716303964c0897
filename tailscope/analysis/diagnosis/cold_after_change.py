"""cold_start on a process that kept running: its data went cold at one moment (an index or model file
swapped under a memory map, a flushed cache) and its work is slow from then, less and less so as what
it reads becomes resident again.

Mechanism. After the change the first touches of each piece of data miss (a page fault read from the
volume, a fetch from the store); popular data is touched first and stays, so the extra time per call is
highest right after the change and decays, quickly at first, then slowly over the long tail of rarely
read data. Nothing else about the calls changes: they arrive at the rate they did before. A burst or a
second client raises the arrivals with the slowdown; a degraded dependency or a saturated pool holds a
plateau and stops; a growing backlog rises; none of them is front-loaded after an onset with the
arrivals unchanged.

Statistic, per span name that is not a call (its work runs in the process: a SERVER span, an internal
step), per instance with >= MIN_SPANS spans: exclusive time (less the time a stall episode of the
process held it, gc_pause's: a stopped process is not reading cold data) in BINS bins of the run; the
onset is the bin (after the first tenth: a level before it) at which the extra time over the median
before it (per call, as a share of that median) jumps most above every earlier bin. An instance has an
onset where its first two bins after it reach >= JUMP of the median and >= 4x the highest bin before,
and its calls arrived at their rate (0.7-1.3x the bins before). The instances' curves after their
onsets are aligned and pooled (weighted by calls), over the level before: strength from how
front-loaded the pooled curve is (half of its extra time by the time nine tenths is: 0.5 at 48 %, or
at 56 % where its last quarter still costs >= 10 % of its peak: a decay is at 30-50 %, a plateau that
stops at 55-67 % and ends), its peak in the first two bins, its last quarter under the peak (0.5 at
60 % of it), a gradual fall (a quarter of its extra time or more from the third bin after the peak on:
an episode that stops ends at once) and a steady one (-Spearman with time from the peak: 0.5 at 0.6;
pauses come back, a decay does not). Weight: the extra time after the onsets (over the median before
and its usual spread) as a share of the tail excess. Names a cache miss detector holds as bimodal are
left to it. Work that grew with what it was handed is the same work on more, not cold data: times
(1 - logistic(x, 0.5, 0.1)), x the share of the extra time after the onsets that a size-like attribute
of the span or of the span holding it (the caller's call: a batch of keys fetched) predicts.
"""

from __future__ import annotations

import numpy as np

from tailscope.analysis.diagnosis.frame import KIND_CLIENT
from tailscope.analysis.diagnosis.model import Context, Finding
from tailscope.analysis.diagnosis.slow_dependency import stalled_time
from tailscope.analysis.diagnosis.stats import (
    clamp01,
    excess_share,
    logistic,
    material_weight,
    ms,
    spearman,
    theil_sen,
)
from tailscope.analysis.diagnosis.where import main_service

BINS = 20
FIRST_ONSET = 2  # bins before an onset: a level to compare with
MIN_AFTER = 4  # bins after it
MIN_SPANS = 150
JUMP = 0.3  # the first bins after an onset: extra time >= this share of the median before
LASTING = 0.25  # a decay's extra time from the third bin after its peak on: 0.5 at this part of it
CAP = 0.95
SEARCH_SPANS = 1500  # spans of one series the onset is searched on (a stride through the rest)
MECHANISM = "data that went cold at one moment on a running process, decaying as it became resident"


def onset(t: np.ndarray, d: np.ndarray, run0: float, run1: float):
    """(onset bin, median before it, highest and mean bin before (relative), the curve after it (relative
    extra time per call per bin), calls per bin after it, bin of every span) for one instance's spans
    of one name; None without a clear onset."""
    b = np.minimum(((t - run0) * BINS // max(run1 - run0, 1.0)).astype(np.int64), BINS - 1)
    calls = np.bincount(b, minlength=BINS).astype(np.float64)
    step = max(1, len(d) // SEARCH_SPANS)  # the onset searched on every step-th span (in time order)
    ds, bs = d[::step], b[::step]
    calls_s = np.maximum(np.bincount(bs, minlength=BINS), 1)
    best = None
    for k in range(FIRST_ONSET, BINS - MIN_AFTER):
        before = ds[bs < k]
        if len(before) * step < 30:
            continue
        base = max(float(np.median(before)), 1.0)
        curve = np.bincount(bs, weights=np.maximum(ds - base, 0.0), minlength=BINS) / calls_s / base
        score = float(curve[k:k + 2].max() - curve[:k].max())
        if best is None or score > best[0]:
            best = (score, k)
    if best is None:
        return None
    k = best[1]
    base = max(float(np.median(d[b < k])), 1.0)
    curve = np.bincount(b, weights=np.maximum(d - base, 0.0), minlength=BINS) / np.maximum(calls, 1) / base
    pre = float(curve[:k].max())
    peak = float(curve[k:k + 2].max())
    rate = float(calls[k:k + 2].mean() / max(calls[:k].mean(), 1.0))
    if peak < JUMP or peak < 4.0 * pre or not 0.7 <= rate <= 1.3:  # fewer: a stopped process starts none
        return None
    return k, base, pre, float(curve[:k].mean()), curve[k:], calls[k:], b


def _front_loaded(curve: np.ndarray) -> tuple[float, int, float, float, float]:
    """(time to half of the extra time over time to nine tenths, the peak's bin, last quarter / peak,
    the part of the extra time from the third bin after the peak on: an episode that stops ends at
    once, data becoming resident less and less often keeps costing a while), and how steadily it falls
    from the peak (-Spearman with time: pauses or episodes come back, a decay does not). `curve`: over
    the level before the onset."""
    total = max(float(curve.sum()), 1e-12)
    cum = np.cumsum(curve) / total
    t50, t90 = int(np.searchsorted(cum, 0.5)) + 1, int(np.searchsorted(cum, 0.9)) + 1
    top = int(np.argmax(curve))
    peak = max(float(curve[top]), 1e-12)
    late = float(curve[-max(1, len(curve) // 4):].mean()) / peak
    lasting = float(curve[top + 3:].sum()) / max(float(curve[top:].sum()), 1e-12)
    after = curve[top:]
    falling = -spearman(np.arange(len(after), dtype=np.float64), after) if len(after) > 3 else 0.0
    return t50 / t90, top, late, lasting, falling


def decay_strength(curve: np.ndarray) -> tuple[float, float, int, float]:
    """(strength, half over nine tenths, the peak's bin, last quarter over the peak) of a pooled curve
    after an onset (over the level before it): how surely it is a decay from a peak at the onset."""
    front, peak_at, late, lasting, falling = _front_loaded(curve)
    # front-loaded: a decay that ended in the run, or one still costing at its end (a long tail of
    # rarely read data) a little less so; a plateau that stops is neither
    shape = max(1 - logistic(front, 0.48, 0.025),
                (1 - logistic(front, 0.56, 0.025)) * logistic(late, 0.1, 0.03))
    strength = shape * (1 - logistic(late, 0.6, 0.08)) * (peak_at <= 1)
    strength *= logistic(lasting, LASTING, 0.05)  # an episode of a bin or two that stops is not a decay
    strength *= logistic(falling, 0.6, 0.08)  # nor slowdowns that come back (pauses, bursts)
    return strength, front, peak_at, late


def _series(ctx: Context, run0: float, run1: float):
    """(name code, instance code, its spans in start order, their exclusive time less stalls) for every
    (name, instance) of >= MIN_SPANS spans of work (not calls) whose extra time over its median reaches
    half of JUMP in some bin where an onset can be (most never do: one pass over them, one sort; the
    stalls, which only add time, are read for those that do)."""
    f = ctx.frame
    work = f.kind != KIND_CLIENT
    skip = np.zeros(len(f.names), bool)
    skip[list(ctx.notes.get("bimodal_names", {}))] = True
    work &= ~skip[f.name]
    idx = np.nonzero(work)[0]
    key = f.name[idx].astype(np.int64) * (len(f.instances) + 1) + f.instance[idx]
    d = f.excl[idx].astype(np.float64)
    # every series' median at once (sorted by series, then value), its extra time per bin over it
    by_value = np.lexsort((d, key))
    groups, first, size = np.unique(key[by_value], return_index=True, return_counts=True)
    med = np.maximum(d[by_value][first + size // 2], 1.0)
    g = np.searchsorted(groups, key)
    b = np.minimum(((f.start[idx] - run0) * BINS // max(run1 - run0, 1.0)).astype(np.int64), BINS - 1)
    cell = g * BINS + b
    over = np.bincount(cell, weights=np.maximum(d - med[g], 0.0), minlength=len(groups) * BINS)
    calls = np.bincount(cell, minlength=len(groups) * BINS)
    curve = (over / np.maximum(calls, 1)).reshape(len(groups), BINS) / med[:, None]
    live = (size >= MIN_SPANS) & (curve[:, FIRST_ONSET:BINS - MIN_AFTER + 1].max(axis=1) >= 0.5 * JUMP)
    kept = []
    for s in np.nonzero(live)[0].tolist():
        mine = idx[g == s]
        kept.append(mine[np.argsort(f.start[mine], kind="stable")])
    if not kept:
        return
    mask = np.zeros(len(f), bool)
    mask[np.concatenate(kept)] = True
    # the time a pause or a CPU quota stopped the process is not its work (gc_pause's episodes)
    stalled = stalled_time(ctx, mask)
    for mine in kept:
        d = np.maximum(f.excl[mine].astype(np.float64) - stalled[mine], 0.0)
        yield int(f.name[mine[0]]), int(f.instance[mine[0]]), mine, d


def detect(ctx: Context, advice: str) -> list[Finding]:
    """`advice`: cold_start's advice text, with a `{where}` field."""
    f = ctx.frame
    if ctx.n_requests < 100:
        return []
    run0, run1 = float(f.start.min()), float(f.end.max())
    by_name: dict[int, list] = {}
    for code, inst, mine, d in _series(ctx, run0, run1):
        found = onset(f.start[mine].astype(np.float64), d, run0, run1)
        if found is not None:
            by_name.setdefault(code, []).append((inst, mine, d, found))
    best = None
    for code, series in by_name.items():
        pooled = np.zeros(BINS)
        weight = np.zeros(BINS)
        extra = np.zeros(len(f))
        onsets = []
        for inst, mine, d, (k, base, pre, floor, curve, calls, b) in series:
            pooled[:len(curve)] += np.maximum(curve - floor, 0.0) * calls
            weight[:len(curve)] += calls
            after = b >= k
            extra[mine[after]] = np.maximum(d[after] - base * (1.0 + pre), 0.0)
            onsets.append((f.instances[inst], k, base))
        used = weight >= 0.5 * weight[0]
        curve = pooled[used] / weight[used]
        if len(curve) < MIN_AFTER:
            continue
        strength, front, peak_at, late = decay_strength(curve)
        per_request = np.bincount(f.request[f.request >= 0], weights=extra[f.request >= 0],
                                  minlength=ctx.n_requests)
        share = excess_share(per_request, ctx.split)
        confidence = CAP * strength * material_weight(share)
        grown = _input_grown(ctx, code, series) if confidence >= 0.05 else (0.0, None)
        confidence *= 1 - logistic(grown[0], 0.5, 0.1)  # the calls grew: no data went cold
        if best is None or confidence > best[0]:
            best = (confidence, code, onsets, extra, share, front, late, float(curve[peak_at]), grown)
    if best is None or best[0] < 0.05:
        return []
    return [_finding(ctx, advice, *best)]


def _input_grown(ctx: Context, code: int, series: list) -> tuple[float, str | None]:
    """How much of the extra time after the onsets a size of the work's input predicts (the share of
    it that the Theil-Sen line of time on the size, from the size before the onsets, accounts for), and
    that size's key: a size-like attribute of the span or of the span holding it (the call that sent
    it) that the time follows (Spearman >= 0.5). Work that grew with what it was handed (a caller
    fetching more items at once, larger requests) is the same work on more, not data gone cold."""
    from tailscope.analysis.diagnosis.size_explained import input_sizes

    spans = np.concatenate([mine for _, mine, _, _ in series])
    d = np.concatenate([dd for _, _, dd, _ in series])
    after = np.concatenate([found[6] >= found[0] for _, _, _, found in series])
    extra = np.concatenate([np.maximum(dd - found[1] * (1.0 + found[2]), 0.0) for _, _, dd, found in series])
    best: tuple[float, str | None] = (0.0, None)
    for key, v in input_sizes(ctx, code, spans):
        ok = np.isfinite(v)
        if ok.mean() < 0.5 or len(np.unique(v[ok])) < 10 or not (ok & ~after).any() or \
                spearman(v[ok], d[ok]) < 0.5:
            continue
        slope, _ = theil_sen(v[ok], d[ok], ctx.rng)
        grown = np.maximum(v - float(np.median(v[ok & ~after])), 0.0) * max(slope, 0.0)
        sel = ok & after
        explained = float(grown[sel].sum()) / max(float(extra[sel].sum()), 1.0)
        if min(explained, 1.0) > best[0]:
            best = (min(explained, 1.0), key)
    return best


def _calls_holding(f, spans: np.ndarray) -> list[str]:
    """The names of the CLIENT calls (the caller's, a sidecar's) that hold most of `spans` above them."""
    held: dict[int, int] = {}
    cur = f.parent[spans]
    for _ in range(8):
        alive = cur >= 0
        if not alive.any():
            break
        up = cur[alive]
        client = up[f.kind[up] == KIND_CLIENT]
        for c, n in zip(*np.unique(f.name[client], return_counts=True), strict=True):
            held[int(c)] = held.get(int(c), 0) + int(n)
        cur = np.where(alive, f.parent[np.maximum(cur, 0)], -1)
    return [f.names[c] for c, n in sorted(held.items(), key=lambda x: -x[1]) if n >= 0.5 * len(spans)]


def _finding(ctx: Context, advice: str, confidence: float, code: int, onsets: list, extra: np.ndarray,
             share: float, front: float, late: float, peak: float,
             grown: tuple[float, str | None]) -> Finding:
    f = ctx.frame
    name = f.names[code]
    hit = np.nonzero(extra > 0)[0]
    service = main_service(f, hit) if len(hit) else None
    span_s = (float(f.end.max()) - float(f.start.min())) / 1e9
    at = [round(k / BINS * span_s, 1) for _, k, _ in onsets]
    calls = _calls_holding(f, hit) if len(hit) else []
    # the calls' tail beyond the cold work: the calls holding no extra time of it
    beyond = 0.0
    if calls and ((f.name == f.names.index(calls[0])) & (f.kind == KIND_CLIENT) & (f.request >= 0)).any():
        c = f.names.index(calls[0])
        mine = np.nonzero((f.name == c) & (f.kind == KIND_CLIENT) & (f.request >= 0))[0]
        cold = np.zeros(len(f), bool)
        cur = f.parent[hit]
        for _ in range(8):
            cold[cur[cur >= 0]] = True
            cur = np.where(cur >= 0, f.parent[np.maximum(cur, 0)], -1)
        d = f.dur[mine].astype(np.float64)
        over = np.where(cold[mine], 0.0, np.maximum(d - float(np.median(d)), 0.0))
        beyond = excess_share(np.bincount(f.request[mine], weights=over, minlength=ctx.n_requests), ctx.split)
    summary = (
        f"'{name}' became slow at one moment on {len(onsets)} instance(s) that kept running "
        f"({', '.join(i for i, _, _ in onsets[:4])}, from {', '.join(str(a) for a in at[:4])} s "
        "into the run) "
        f"with its calls arriving at their usual rate, then less and less so: its extra time per call "
        f"peaked at {peak:.1f}x the median before, half of it came in the first {front:.0%} of the time "
        f"nine tenths did, and the last quarter runs at {late:.0%} of the peak: data that went cold (a "
        f"swapped index or file read through the page cache, a flushed cache) becoming resident again. "
        f"It carries {share:.0%} of the tail excess."
        + (f" But {grown[1]}, the size of what it was handed, grew with it and predicts {grown[0]:.0%} of "
           "the extra time: the same work on more items (a caller fetching more at once), not data gone cold."
           if grown[0] >= 0.3 else "")
    )
    stats = {
        "mechanism": MECHANISM, "onset_instances": [i for i, _, _ in onsets], "onset_s": at,
        "median_before_ms": [ms(b) for _, _, b in onsets], "peak_extra_over_median": round(peak, 2),
        "half_over_nine_tenths": round(front, 3), "last_quarter_over_peak": round(late, 3),
        "tail_excess_share": round(clamp01(share), 3), "call_names": calls or [name],
        "call_tail_excess_share_beyond_them": round(beyond, 3),
        "input_growth_explains": round(grown[0], 3), "input_size": grown[1],
        "services": [service] if service else [], "instances": [i for i, _, _ in onsets][:4],
    }
    return Finding("cold_start", clamp01(confidence), ctx.stage_of_name(code), name,
                   {"summary": summary, "stats": stats},
                   advice.format(where=f"'{name}' after a change of the data it reads (warm the new data, "
                                 "e.g. read the new index or file through before switching traffic to it)"))
