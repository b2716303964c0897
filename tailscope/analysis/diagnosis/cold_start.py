"""cold_start: latency that decays with the request index of each instance after it (re)starts.

Statistic. Every instance's requests are numbered from its first one (a restarted process is a new
instance id, so restarts are covered). The first K requests of an instance (5 % of them, 10 to 200)
are compared with those after 3K: the ratio of medians and the probability that an early request is
slower than a late one (AUC, from ranks; 0.5 when there is no warm-up). Its weight is how much the
early requests are over-represented in the tail, and how much of the tail's latency excess their
extra time (latency over the warm plateau) is: a handful of first requests a few milliseconds slow
can fill a short run's tail by count and still be a small part of what the tail costs. A warm-up is
slowest at its start (a load, a compile, an empty pool) and then decays or stays flat; first
requests that get slower towards the end of the window (a neighbour's load, a burst) are discounted
by the ratio of the window's last third to its first third. An instance already serving when the
trace begins may have started long before (its first traced requests are not its first ever): where
the instances that appear mid-run (restarts, replicas added for a burst) show a clearer warm-up, the
AUC and ratio are theirs. A queue consumer's unit of work (units.py) is judged on its processing,
its wait in the broker left out (a backlog is the queue's, shared by warm and cold workers alike).
The stage and span name that carry the
early excess
are named; when that span is a bimodal (cache) span, the warm-up is a cold cache and is left to the
cache_miss finding.
"""

from __future__ import annotations

import numpy as np

from tailscope.analysis.diagnosis import cold_after_change, cold_peers, first_calls, new_kinds
from tailscope.analysis.diagnosis.model import Context, Finding
from tailscope.analysis.diagnosis.stats import clamp01, excess_share, logistic, ms, ranks
from tailscope.vocabulary import ALL_STAGES

PATTERN = "cold_start"
FRESH_LIFE = 12  # an instance that appears mid-run is judged from this many requests
ADVICE = (
    "The first requests after a process starts are slow ({where} carries the warm-up). Warm up before "
    "taking traffic: run a few representative requests at start (compile/JIT, allocator and kernel "
    "autotuning such as cudnn.benchmark, lazy imports, connection pools, model weights paged in), gate "
    "readiness on that warm-up, and avoid restarts under load (rolling restarts, keep a minimum number of "
    "warm replicas)."
)


def warmup_length(medians: np.ndarray, plateau: float, edges: np.ndarray) -> int:
    """Requests per instance before latency settles, from per-bucket medians over request index.

    The warm-up is the unbroken run of slow buckets (median > 1.3x the plateau) from the first
    request: a bucket known to be back at the plateau ends it, buckets too small to judge (NaN) neither
    extend nor end it, so slow requests later in the run (noise, load) do not stretch it.
    """
    slow = medians[:-1] > 1.3 * plateau
    settled = np.nonzero(~np.isnan(medians[:-1]) & ~slow)[0]
    high = np.nonzero(slow[: settled[0]] if len(settled) else slow)[0]
    return int(edges[high.max() + 1]) if len(high) else 0


def _rise(lat: np.ndarray, idx: np.ndarray, usable: np.ndarray, k_first: int) -> float:
    """Median latency of the last third of the first k_first requests over that of the first third
    (per-instance request index): below 1 for a decay, ~1 for a flat warm-up, above 1 when rising."""
    third = max(1, k_first // 3)
    head = lat[usable & (idx < third)]
    last = lat[usable & (idx >= k_first - third) & (idx < k_first)]
    if len(head) == 0 or len(last) == 0:
        return 1.0
    return float(np.median(last) / max(np.median(head), 1.0))


def _auc(lat: np.ndarray, first: np.ndarray, late: np.ndarray, instance: np.ndarray) -> float:
    """Probability that a first request is slower than a settled one of the same instance."""
    auc_num = auc_den = 0.0
    for i in np.unique(instance[first]):
        e = lat[first & (instance == i)]
        lt = lat[late & (instance == i)]
        if len(e) == 0 or len(lt) == 0:
            continue
        r = ranks(np.r_[e, lt])
        auc_num += r[: len(e)].sum() - len(e) * (len(e) - 1) / 2
        auc_den += len(e) * len(lt)
    return auc_num / auc_den if auc_den else 0.5


def detect(ctx: Context) -> list[Finding]:
    """The instances' warm-up (below), a callee that joined mid-run answering its first calls
    slowly where its own spans are not traced (cold_peers.py), many short-lived instances each
    paying its start in its first request (first_calls.py), and a running process whose data went
    cold at one moment (cold_after_change.py), and the first run of a new kind of input in a running
    process (new_kinds.py)."""
    return (_instances(ctx) + cold_peers.detect(ctx, ADVICE) + first_calls.detect(ctx, ADVICE)
            + cold_after_change.detect(ctx, ADVICE) + new_kinds.detect(ctx, ADVICE))


def _instances(ctx: Context) -> list[Finding]:
    f = ctx.frame
    reqs = f.requests
    n = len(reqs)
    if n < 100:
        return []
    per_inst = np.bincount(reqs.instance, minlength=len(f.instances))
    idx = reqs.index_on_instance
    life = per_inst[reqs.instance]
    # instances that appear mid-run did start then (a restart, a replica added for a burst); those
    # already serving when the trace begins may have started long before (their first traced requests
    # are not their first ever) and would hide a warm-up the new ones show
    first_seen = np.full(len(f.instances), np.inf)
    np.minimum.at(first_seen, reqs.instance, reqs.start.astype(np.float64))
    span = float(reqs.start.max() - reqs.start.min())
    fresh = (first_seen > reqs.start.min() + 0.05 * span)[reqs.instance]
    # a replica added late in a short run serves few requests: its own first and later ones still
    # tell its warm-up
    usable = (life >= 40) | (fresh & (life >= FRESH_LIFE))
    if usable.sum() < 50:
        return []
    lat = reqs.latency.astype(np.float64)
    if reqs.queued is not None:  # a consumer's work: its processing, not the broker's wait before it
        lat = lat - reqs.queued
    late = usable & (idx >= life // 2)
    plateau = float(np.median(lat[late]))
    # warm-up length: past the last log-spaced index bucket whose median is 1.3x the plateau or more
    cap = int(np.median(per_inst[per_inst >= 40]) // 2)
    edges = np.unique(np.r_[0, np.geomspace(1, max(cap, 2), 24).astype(np.int64)])
    bucket = np.searchsorted(edges, idx, side="right") - 1
    warm, only_fresh = 0, False
    for group in (usable, usable & fresh):
        if group is not usable and (group & late).sum() < 20:
            continue
        medians = np.full(len(edges), np.nan)
        for j in range(len(edges) - 1):
            m = group & (bucket == j)
            if m.sum() >= 3:
                medians[j] = np.median(lat[m])
        length = warmup_length(medians, float(np.median(lat[group & late])), edges)
        if length > warm:
            warm, only_fresh = length, group is not usable
    warm = min(warm, int(0.3 * cap * 2))
    k_first = max(5, min(50, warm)) if warm else 5
    first = usable & (idx < k_first)
    early = usable & (idx < max(warm, 1)) & (fresh if only_fresh else True)
    if first.sum() < 5 or late.sum() < 20:
        return []
    auc = _auc(lat, first, late, reqs.instance)
    judged_on = "all instances"
    ratio = float(np.median(lat[first]) / max(plateau, 1.0))
    # an instance already serving when the trace begins may have started long before: its first traced
    # requests are not its first ever. Instances that appear mid-run did start then (a restart, a
    # replica added for a burst): where they alone show the warm-up, judge it on them
    if (first & fresh).sum() >= 10 and (late & fresh).sum() >= 20:
        auc_fresh = _auc(lat, first & fresh, late & fresh, reqs.instance)
        ratio_fresh = float(np.median(lat[first & fresh]) / max(plateau, 1.0))
        if auc_fresh > auc:
            auc, ratio, judged_on = auc_fresh, max(ratio, ratio_fresh), "instances started mid-run"
    split = ctx.split
    tail_early = float(early[split.tail].mean()) if split.tail.any() else 0.0
    all_early = float(early.mean())
    impact = clamp01((tail_early - all_early) / max(1e-9, 1 - all_early))
    extra = np.where(early, np.maximum(lat - plateau, 0.0), 0.0)
    extra_share = excess_share(extra, ctx.split)

    # who carries the early excess
    sel = f.request >= 0
    e_w = first[np.maximum(f.request, 0)] & sel
    l_w = late[np.maximum(f.request, 0)] & sel
    excess = np.bincount(f.name[e_w], weights=f.excl[e_w], minlength=len(f.names)) / first.sum()
    excess -= np.bincount(f.name[l_w], weights=f.excl[l_w], minlength=len(f.names)) / late.sum()
    # a queue that backs up behind slow first requests is a consequence: name the work that was slow
    queue = ALL_STAGES.index("queue")
    work = np.where(ctx.name_stage == queue, -np.inf, excess)
    top = int(np.argmax(work)) if np.isfinite(work).any() else int(np.argmax(excess))
    top_share = float(excess[top] / max(excess[excess > 0].sum(), 1e-9))
    bimodal = ctx.notes.get("bimodal_names", {})
    cache_part = sum(float(excess[c]) for c in bimodal if excess[c] > 0) / max(
        float(excess[excess > 0].sum()), 1e-9
    )
    ctx.notes["cold_start_cache_part"] = cache_part

    strength = logistic(auc, 0.72, 0.05) * logistic(ratio, 1.4, 0.15)
    if strength >= 0.3:  # compute_bound leaves the warm-up requests' forward time to this finding
        ctx.notes["warm_up_requests"] = early
    weight = logistic(impact, 0.25, 0.08) * logistic(extra_share, 0.2, 0.06)
    rising = _rise(lat, idx, usable, k_first)
    confidence = strength * weight * (1 - cache_part) * (1 - logistic(rising, 1.3, 0.1))
    stage = ctx.stage_of_name(top)
    name = f.names[top]
    restarts = int(
        (
            np.bincount(reqs.instance, weights=(idx == 0) * reqs.start, minlength=len(f.instances))
            > (reqs.start.max() - reqs.start.min()) * 0.1 + reqs.start.min()
        ).sum()
    )
    summary = (
        f"The first requests of each instance are slower: median {ms(np.median(lat[first])):.1f} ms for "
        "the first "
        f"{k_first} vs {ms(plateau):.1f} ms once warm ({ratio:.1f}x, AUC {auc:.2f} on {judged_on}); "
        "the warm-up lasts about "
        f"{warm} requests per instance; "
        f"{tail_early:.0%} of tail requests are early ones vs {all_early:.0%} of all; '{name}'"
        f"{f' ({stage})' if stage else ''} carries {top_share:.0%} of the early excess"
        + (f"; {cache_part:.0%} of it is a cold cache" if cache_part > 0.3 else "")
        + (f"; {restarts} instance(s) started mid-run" if restarts else "")
        + "."
    )
    stats = {
        "warmup_requests_per_instance": warm,
        "first_median_ms": ms(np.median(lat[first])),
        "warm_median_ms": ms(plateau),
        "ratio": round(ratio, 2),
        "auc": round(float(auc), 3),
        "judged_on": judged_on,
        "tail_share_early": round(tail_early, 3),
        "all_share_early": round(all_early, 3),
        "tail_excess_share_of_warm_up": round(extra_share, 3),
        "tail_excess_share": round(min(1.0, max(0.0, extra_share)), 3),
        "rise_within_warm_up": round(rising, 2),
        "warmup_span": name,
        "warmup_span_share": round(top_share, 3),
        "cold_cache_part": round(cache_part, 3),
        "instances": int((per_inst > 0).sum()),
        "restarts": restarts,
    }
    ok = np.isfinite(medians[:-1])
    chart = {
        "kind": "warmup_curve",
        "request_index": edges[:-1][ok].tolist(),
        "median_ms": [ms(v) for v in medians[:-1][ok]],
        "warm_median_ms": ms(plateau),
        "warmup_requests": warm,
    }
    advice = ADVICE.format(where=f"'{name}'" + (f" ({stage})" if stage else ""))
    return [
        Finding(
            PATTERN,
            clamp01(confidence),
            stage if stage in ALL_STAGES else None,
            name,
            {"summary": summary, "stats": stats, "chart": chart},
            advice,
        )
    ]
