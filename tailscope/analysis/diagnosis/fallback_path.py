"""cache_miss as a conditional fallback path: a cheap lookup every request makes, then, in some
requests only, a slower call after it (a read-through cache going to its store on a miss).

Statistic, from structure and timing only (no names): for a span name F inside requests, present in
between 0.5 % and 60 % of them (up to 95 % where that share changed during the run: a flushed cache
sends nearly every request to the store until it refills), look for a sibling name L under the same
parent that is present in at least 95 % of requests and ends before F starts wherever both occur
(the lookup that decides), different from F (a second copy of the same call is a retry, not a
fallback). The nearest such sibling decides: its p90 must be at least 3x faster than F's median (a cache
is far faster than what it stands in front of, on nearly every request), and neither the model's forward
pass nor a queue (a prediction that decides whether a further call is made, as a fraud score sends the
grey zone to a vendor, is a decision, not a lookup). F's weight is its share of the tail excess;
requests with F must be over-represented in the tail. The fallback rate over time tells a steady miss
rate (size, TTL) from misses clustered in time (keys expiring together, after a deploy or restart), each
with its own advice.
"""

from __future__ import annotations

import numpy as np

from tailscope.analysis.diagnosis.cache_evidence import RESPONSE_CACHE_CAP, WORKING_MISS_RATE
from tailscope.analysis.diagnosis.model import Context, Finding
from tailscope.analysis.diagnosis.slow_dependency import stalled_time
from tailscope.analysis.diagnosis.stats import clamp01, logistic, ms
from tailscope.vocabulary import ALL_STAGES

PATTERN = "cache_miss"
SKIP = {ALL_STAGES.index(s) for s in ("queue", "model_forward")}
MIN_RATE, MAX_RATE = 0.005, 0.6
# after a flush or an expiry wave nearly every request takes the fallback until the cache refills: a
# fallback in up to 95 % of requests where its rate changed during the run (not steady)
MAX_CHANGED_RATE = 0.95
ALWAYS = 0.95
LOOKUP_QUANTILE = 0.9  # the lookup's p90 at least 3x faster than the fallback's median
BINS = 50
ADVICE_STEADY = (
    "{fallback} runs after {lookup} in {rate:.1%} of requests, at a steady rate: the cache misses all the "
    "time. Raise the hit rate where it is decided: a larger cache or a longer TTL for the keys that miss "
    "most, refresh-ahead of hot keys before they expire, and coalesce concurrent misses for one key "
    "(single-flight) so the store sees one call per key."
)
ADVICE_CLUSTERED = (
    "{fallback} runs after {lookup} in {rate:.1%} of requests, but in bursts ({when}): many keys miss at "
    "once. Add jitter to TTLs so keys do not expire together, refresh hot keys ahead of expiry, warm the "
    "cache before a new instance takes traffic, and coalesce concurrent misses (single-flight)."
)


def detect(ctx: Context) -> list[Finding]:
    f = ctx.frame
    if ctx.n_requests < 50 or ctx.split.excess_ns <= 0:
        return []
    inside = (f.request >= 0) & (f.parent >= 0)
    present = _presence(ctx, inside)
    rates = present.mean(axis=0)
    findings = []
    for code in np.nonzero((rates >= MIN_RATE) & (rates <= MAX_CHANGED_RATE))[0]:
        if int(ctx.name_stage[code]) in SKIP:
            continue
        if rates[code] > MAX_RATE and _over_time(ctx, present[:, code])["pattern"] == "steady":
            continue  # a path most requests always take is the normal one, not a fallback
        if after_response(ctx, int(code)):
            continue  # work that runs on after the response (a deferred flush) is no miss path
        lookup = _lookup_before(ctx, inside, int(code), rates)
        if lookup is None or sets_up_next_call(ctx, int(code)):
            continue
        # a call made only as the fallback of a lookup is the miss path (slow_dependency leaves it),
        # whether or not the misses make this run's tail
        ctx.notes.setdefault("fallback_names", set()).add(int(code))
        finding = _finding(ctx, int(code), lookup, present[:, code])
        if finding is not None:
            findings.append(finding)
    findings.sort(key=lambda x: -x.confidence)
    return findings[:2]


def after_response(ctx: Context, code: int) -> bool:
    """Whether most spans of a name end after their request's root span: work started as the response
    goes out (a metrics flush, a fire-and-forget write) that the caller does not wait for. Its time is
    outside the request's latency, so it is no slow path of the request, whatever requests it joins."""
    f = ctx.frame
    spans = np.nonzero((f.name == code) & (f.request >= 0))[0]
    if not len(spans):
        return False
    root_end = f.end[f.requests.root[f.request[spans]]]
    outlives = f.end[spans] > root_end + np.maximum(0.01 * f.dur[spans], 1_000)  # beyond clock skew
    return float(outlives.mean()) >= 0.5


def _presence(ctx: Context, inside: np.ndarray) -> np.ndarray:
    """requests x names: does the request contain a span of the name (below its root)?"""
    f = ctx.frame
    out = np.zeros((ctx.n_requests, len(f.names)), bool)
    out[f.request[inside], f.name[inside]] = True
    return out


def _lookup_before(ctx: Context, inside: np.ndarray, code: int, rates: np.ndarray) -> int | None:
    """The always-present sibling that ends before the fallback starts and is much faster."""
    f = ctx.frame
    fallback = np.nonzero(inside & (f.name == code))[0]
    parents = f.parent[fallback]
    if len(np.unique(f.name[parents])) != 1:
        return None
    if int(f.name[parents[0]]) in ctx.notes.get("bimodal_names", {}):
        return None  # the enclosing span's two modes are already the bimodal cache_miss finding
    candidates = np.nonzero(inside & np.isin(f.parent, parents) & (f.name != code))[0]
    fallback_median = float(np.median(f.dur[fallback]))
    # the nearest always-run sibling before the fallback decides (a lookup, not an auth check earlier);
    # a model's prediction (or a queue) deciding whether a further call is made is a decision, not a
    # cache lookup: what follows it is the service's conditional path, not a miss
    closest, best_gap, fast = None, np.inf, False
    for name in np.unique(f.name[candidates]):
        if rates[name] < ALWAYS:
            continue
        spans = candidates[f.name[candidates] == name]
        # the lookup's last end under each parent, against the fallback's first start there
        order = np.argsort(f.parent[spans], kind="stable")
        keys, first = np.unique(f.parent[spans][order], return_index=True)
        ends = np.maximum.reduceat(f.end[spans][order], first)
        where = np.searchsorted(keys, parents)
        found = (where < len(keys)) & (keys[np.minimum(where, len(keys) - 1)] == parents)
        if found.mean() < 0.9:
            continue
        before = ends[where[found]] <= f.start[fallback[found]]
        if before.mean() >= 0.9:
            gap = float(np.median(f.start[fallback[found]] - ends[where[found]]))
            if gap < best_gap:
                closest, best_gap = int(name), gap
                # cheap on nearly every request, not at its median only: a call whose slow mode rivals
                # what follows it (a model call that sometimes answers from a cache and otherwise works
                # for seconds, then asks for a tool) is a step of the work, not a lookup
                fast = 3 * float(np.quantile(f.dur[spans], LOOKUP_QUANTILE)) <= fallback_median
    if closest is None or not fast or int(ctx.name_stage[closest]) in SKIP:
        return None
    return closest


def _hits_answer(ctx: Context, lookup: int, with_fallback: np.ndarray) -> bool:
    """Whether the requests without the fallback spend <= 5 % as long after the lookup as the others
    (median time from the lookup's end to the request's end): a hit answers the request."""
    f, reqs = ctx.frame, ctx.frame.requests
    spans = np.nonzero((f.name == lookup) & (f.request >= 0))[0]
    done = np.full(len(reqs), -1, np.int64)
    np.maximum.at(done, f.request[spans], f.end[spans])
    after = (reqs.start + reqs.latency - done).astype(np.float64)
    hit, miss = (done >= 0) & ~with_fallback, (done >= 0) & with_fallback
    if hit.sum() < 10 or miss.sum() < 10:
        return False
    return float(np.median(after[hit])) <= 0.05 * float(np.median(after[miss]))


def _finding(ctx: Context, code: int, lookup: int, with_fallback: np.ndarray) -> Finding | None:
    f, sp = ctx.frame, ctx.split
    in_tail, in_body = float(with_fallback[sp.tail].mean()), float(with_fallback[sp.body].mean())
    # over-represented in the tail: the fallback 1.5x as common there, or (where most requests take
    # it, after a flush) the requests without it, the hits, a third as common
    if in_tail < max(1.5 * in_body, in_body + 0.1) and 1.0 - in_tail > (1.0 - in_body) / 3:
        return None  # present as often in fast requests: not what makes the tail
    mask = f.name == code
    # the fallback's time in a stall of its process (a pause, a CPU quota) is not what the miss costs
    share = clamp01(ctx.share_of(mask, f.dur - stalled_time(ctx, mask)))  # others can be faster in the tail
    rate = float(with_fallback.mean())
    timing = _over_time(ctx, with_fallback)
    # where most requests take the fallback (after a flush) the typical request takes it too: its
    # lift in the tail is over all requests, the hits being the ones that escape it
    base = rate if rate > MAX_RATE else in_body
    lift = clamp01((in_tail - base) / max(1.0 - base, 1e-9))
    confidence = logistic(share, 0.2, 0.06) * (0.5 + 0.5 * lift) * 0.95
    # a steady fallback rate a working cache has is the service's normal cost, not a cause
    normal = timing["pattern"] == "steady" and rate < WORKING_MISS_RATE
    if normal:
        confidence = min(confidence, 0.45)
    # ... and at any steady rate where a hit answers the request (a response or semantic cache in front
    # of all the work: after the lookup, a request without the fallback does next to nothing, <= 5 % of
    # what one with it does): its misses are the requests that do the work, which ones are slow, not why
    if timing["pattern"] == "steady" and _hits_answer(ctx, lookup, with_fallback):
        confidence = min(confidence, RESPONSE_CACHE_CAP)
    # a call made on a steady share of requests that a client deadline cuts and makes again
    # (timeout_retry): its tail is the deadline's attempts, the requests that make it a kind of request
    cut = timing["pattern"] == "steady" and (ctx.notes.get("retried_names") or {}).get(code, 0.0) >= 0.5
    if cut:
        confidence = min(confidence, 0.45)
    name, lookup_name = f.names[code], f.names[lookup]
    stage = ctx.stage_of_name(code)
    cost = float(np.median(f.dur[mask]))
    when = timing["pattern"].replace("_", " ")
    summary = (
        f"'{name}' runs only after '{lookup_name}' and only in {rate:.1%} of requests (a fallback: "
        f"{ms(cost):.1f} ms at the median against {ms(float(np.median(f.dur[f.name == lookup]))):.2f} ms "
        f"for the lookup); it is in {in_tail:.0%} of the slow requests and {in_body:.0%} of the others "
        f"and carries {share:.0%} of the tail excess; misses over time: {when}"
        + (f" at {rate:.1%}, as a working cache misses: the normal cost, not a change" if normal else "")
        + ("; but a client deadline cuts it and it is made again (see timeout_retry): made at a steady "
           "rate, its tail is the deadline's, not shown to be misses" if cut else "")
        + "."
    )
    advice = (ADVICE_STEADY if timing["pattern"] == "steady" else ADVICE_CLUSTERED).format(
        fallback=f"'{name}'", lookup=f"'{lookup_name}'", rate=rate, when=when
    )
    stats = {
        "miss_rate": round(rate, 4),
        "fallback_span": name,
        "lookup_span": lookup_name,
        "fallback_median_ms": round(ms(cost), 3),
        "present_in_tail": round(in_tail, 3),
        "present_in_body": round(in_body, 3),
        "tail_excess_share": round(share, 3),
        "normal_rate": normal,
        "cut_by_deadline": cut,
        **{k: v for k, v in timing.items() if k != "chart"},
    }
    evidence = {"summary": summary, "stats": stats, "chart": timing["chart"]}
    return Finding(PATTERN, clamp01(confidence), stage, name, evidence, advice)


def _over_time(ctx: Context, with_fallback: np.ndarray) -> dict:
    """Fallback rate per time bin: steady, clustered (over-dispersed bins), or concentrated early."""
    start = ctx.frame.start[ctx.frame.requests.root].astype(np.float64)
    span = max(float(start.max() - start.min()), 1.0)
    bins = np.minimum(((start - start.min()) * BINS // span).astype(np.int64), BINS - 1)
    total = np.bincount(bins, minlength=BINS).astype(np.float64)
    misses = np.bincount(bins[with_fallback], minlength=BINS).astype(np.float64)
    rate = float(with_fallback.mean())
    expected = total * rate
    dispersion = float(((misses - expected) ** 2).sum() / max(expected.sum() * (1 - rate), 1e-9))
    early = bins < BINS // 10
    early_rate = float(with_fallback[early].mean()) if early.any() else rate
    late_rate = float(with_fallback[~early].mean()) if (~early).any() else rate
    if early_rate > 3 * max(late_rate, 1e-3) and early_rate > 0.2:
        pattern = "after_start"
    elif dispersion > 4:
        pattern = "clustered_in_time"
    else:
        pattern = "steady"
    per_bin = np.where(total > 0, misses / np.maximum(total, 1), 0.0)
    return {
        "pattern": pattern,
        "miss_dispersion": round(dispersion, 2),
        "early_miss_rate": round(early_rate, 4),
        "late_miss_rate": round(late_rate, 4),
        "chart": {
            "kind": "miss_rate_over_time",
            "seconds": ((np.arange(BINS) + 0.5) * span / BINS / 1e9).round(3).tolist(),
            "miss_rate": per_bin.round(4).tolist(),
            "requests": total.astype(int).tolist(),
            "overall_rate": round(rate, 4),
        },
    }


PEER_KEYS = ("server.address", "net.peer.name", "peer.service", "db.system", "db.system.name")


def _peer(ctx: Context, code: int) -> tuple[str, str] | None:
    """The most common (key, value) naming the peer a span name calls, by the first key it carries."""
    attrs = ctx.frame.attributes(code)
    for key in PEER_KEYS:
        values = attrs.get(key, (None, []))[1]
        if values:
            uniq, counts = np.unique(np.array([str(v) for v in values]), return_counts=True)
            return key, str(uniq[int(np.argmax(counts))])
    return None


def sets_up_next_call(ctx: Context, code: int) -> bool:
    """Whether the spans of `code` are followed at once, under their parent, by a call every request
    makes to the same peer: the setup of that call (a new connection, a handshake, a login, as a
    process's first use of a pool opens), not a store read standing in for a lookup's answer."""
    f = ctx.frame
    inside = (f.request >= 0) & (f.parent >= 0)
    mine = np.nonzero(inside & (f.name == code))[0]
    sib = np.nonzero(inside & np.isin(f.parent, f.parent[mine]) & (f.name != code))[0]
    if len(mine) == 0 or len(sib) == 0:
        return False
    order = np.lexsort((f.start[sib], f.parent[sib]))
    sib = sib[order]
    key = f.parent[sib].astype(np.int64) * (int(f.end.max()) + 2) + f.start[sib]
    at = np.searchsorted(key, f.parent[mine].astype(np.int64) * (int(f.end.max()) + 2) + f.end[mine])
    ok = at < len(sib)
    nxt = sib[np.minimum(at, len(sib) - 1)]
    ok &= f.parent[nxt] == f.parent[mine]
    if ok.mean() < 0.9:
        return False
    names, counts = np.unique(f.name[nxt[ok]], return_counts=True)
    follower = int(names[np.argmax(counts)])
    made = np.zeros(ctx.n_requests, bool)
    made[f.request[inside & (f.name == follower)]] = True
    if counts.max() < 0.9 * len(mine) or made.mean() < ALWAYS:
        return False
    peer = _peer(ctx, code)
    return peer is not None and peer == _peer(ctx, follower)
