"""lock_contention: one stage whose duration grows with how many requests are in it at once.

Statistic. For every span name outside the queue and the request root, the *concurrency at start* of a
span is the number of same-name spans on the same instance that started strictly earlier and are still
running (spans that start at the same instant, like the members of one batch, do not count). Under a
mutex each holder in front adds one hold time, so duration ~ own work + concurrency x hold time: a
strong rank correlation (Spearman rho) and a positive robust slope (Theil-Sen): the hold time. A span
holding the model's forward is no candidate (it holds the batch queue too), nor the forward itself.

Cohorts. Requests that enter the span together (a batch's members) reach a lock taken after some
work in an order their starts do not give; so the requests ahead are also counted by cohort (starts
closer than 5 % of the median duration: one observation each, those running when it began plus half
of its other members). Both counts are fixed at the start; the better one is kept.

Serialisation. A mutex lets one holder out at a time: a span that was waiting when the one before it
completed finishes about one hold later; work side by side completes in clumps (the share of
completions closer than a quarter of the hold scales the confidence down).

Materiality. The modelled wait (slope x requests ahead) must be a real part of the span's time on
average or in the tail (a rarely contended lock's few waits can be the tail). Slots (slots.py): a
duration flat up to S - 1 requests ahead, rising only beyond, is S slots (threads, cores), not a lock.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tailscope.analysis.diagnosis import ahead_counts
from tailscope.analysis.diagnosis.extra_calls import on_slow_path
from tailscope.analysis.diagnosis.frame import KIND_CLIENT, KIND_SERVER, NO_STAGE, TraceFrame
from tailscope.analysis.diagnosis.model import Context, Finding
from tailscope.analysis.diagnosis.pool_release import pool_sentence, release_handoff
from tailscope.analysis.diagnosis.server_queue import recast
from tailscope.analysis.diagnosis.slot_handoff import handoff_share
from tailscope.analysis.diagnosis.slots import slot_count
from tailscope.analysis.diagnosis.stats import clamp01, logistic, ms, slow_spans, spearman, theil_sen
from tailscope.vocabulary import ALL_STAGES

PATTERN = "lock_contention"
ADVICE = (
    "Requests serialise on a shared critical section in {where}: each request waits for the others in it "
    "(about {hold} ms per request ahead). Shrink the critical section (move work out of the lock, copy "
    "then release), shard the lock or the shared resource, or give each worker its own instance (per-worker "
    "tokenizer/model/client, thread-local buffers). More hardware will not help while one lock serialises. "
    "A wait for a connection from a bounded pool (DB, HTTP client sockets) is one: size it to its threads."
)
SKIP_STAGES = {ALL_STAGES.index("queue"), ALL_STAGES.index("model_forward")}
MIN_SPANS = 60
MAX_FIT = 20_000
MIN_COHORTS = 50
TOGETHER = 0.05  # starts closer than this share of the median duration make one cohort


@dataclass
class Fit:
    """Duration against requests ahead for one span name, with one way of counting who is ahead."""

    conc: np.ndarray  # requests ahead of each span, as known when it starts (the test)
    ahead: np.ndarray  # requests ahead of each span, as known once done (the size of its wait)
    d: np.ndarray  # durations, ns
    rho: float
    slope: float  # ns per request ahead: the hold time
    intercept: float  # ns: the span's own work
    close: float  # close_completions at that hold
    cohorts: bool  # counted by cohorts (see concurrency_at_start)

    @property
    def serial(self) -> float:
        """Completions spaced by the hold (1) or in clumps (0): a mutex lets one holder out at a time."""
        return 1.0 if np.isnan(self.close) else 1.0 - logistic(self.close, 0.3, 0.07)


def cohorts(start: np.ndarray, group: np.ndarray, together_ns: float) -> np.ndarray:
    """Cohort id of each span: spans of one group (name and instance) whose starts follow each other
    within `together_ns` (the members of a batch, released together) share one."""
    key = group * (int(start.max(initial=0)) + int(together_ns) + 2) + start
    starts = np.sort(key)
    first = np.cumsum(np.r_[True, np.diff(starts) > together_ns]) - 1  # a new group is a new cohort
    return first[np.searchsorted(starts, key, side="left")]


def concurrency_at_start(
    ctx: Context, spans: np.ndarray, together_ns: float = 0.0, by_end: bool = False
) -> np.ndarray:
    """Same-name, same-instance spans running when each span starts (started strictly before it).

    With `together_ns` > 0, spans are counted by `cohorts`: each member counts the spans running when
    its cohort began, plus half of the other members. Where the shared resource is taken after some
    work inside the span, the start order does not say which member of a cohort gets it first; on
    average a member has half of the others ahead of it. With `by_end`, a member counts the members
    that completed before it instead: the order a mutex let them through, known only once they are
    done (for the size of the waits, never for the test that there is a lock)."""
    f = ctx.frame
    start, group = f.start[spans], _group(ctx, spans)
    member = cohorts(start, group, together_ns) if together_ns > 0 else None
    return ahead_counts.ahead(start, start + f.dur[spans], group, member, by_end)


def _group(ctx: Context, spans: np.ndarray) -> np.ndarray:
    f = ctx.frame
    return f.instance[spans].astype(np.int64) * (len(f.names) + 1) + f.name[spans]


def close_completions(start: np.ndarray, end: np.ndarray, group: np.ndarray, hold: float) -> float:
    """Share of back-to-back completions closer than a quarter of `hold`, among the spans that were
    already running when the span before them (same group: name and instance, by end) completed.
    Under a mutex the next holder finishes at least one hold after the last one, so the share is ~0;
    work done side by side (a batch, parallel handlers sharing a CPU) finishes in clumps. NaN where
    no such pair exists."""
    order = np.lexsort((end, group))
    s, e, g = start[order], end[order], group[order]
    waited = (g[1:] == g[:-1]) & (s[1:] < e[:-1])
    if not waited.any():
        return float("nan")
    return float(np.mean((e[1:] - e[:-1])[waited] < 0.25 * hold))


def detect(ctx: Context) -> list[Finding]:
    f = ctx.frame
    if len(f.requests) < 50:
        return []
    inside = (f.request >= 0) & (f.depth > f.depth[f.requests.root][np.maximum(f.request, 0)])
    candidates = np.nonzero(np.bincount(f.name[inside], minlength=len(f.names)) >= MIN_SPANS)[0]
    wraps_forward = _wraps_forward(ctx)
    results = []
    for code in candidates:
        stage = int(ctx.name_stage[code])
        if stage in SKIP_STAGES or wraps_forward[code]:
            continue
        spans = np.nonzero(inside & (f.name == code))[0]
        if len(spans) > MAX_FIT:
            spans = np.sort(ctx.rng.choice(spans, MAX_FIT, replace=False))
        fit = _fit(ctx, spans)
        if fit is not None:
            results.append((code, stage, spans, fit))
    findings = []
    for code, stage, spans, fit in results:
        conc, d, rho, slope, intercept = fit.conc, fit.d, fit.rho, fit.slope, fit.intercept
        if rho < 0.2 or slope <= 0 or fit.serial < 0.05:  # completions in clumps: batched work
            continue
        share = _inclusive_share(ctx, code)
        explained = slope * fit.ahead.mean() / max(d.mean(), 1.0)
        wait = np.minimum(slope * fit.ahead, d)  # the modelled wait, never more than the span itself
        in_span = np.zeros(len(f), bool)
        in_span[spans] = True
        values = np.zeros(len(f))
        values[spans] = wait
        tail_wait = ctx.share_of(in_span, values)
        strength = logistic(rho, 0.45, 0.08)
        weight = logistic(share, 0.08, 0.03)
        # a real share of the tail excess, or of the mean with at least a few per cent of the tail
        material = max(
            logistic(tail_wait, 0.2, 0.06), logistic(explained, 0.15, 0.05) * logistic(tail_wait, 0.06, 0.02)
        )
        # waits that end by a one-at-a-time hand-off of a freed slot: a pool's (or a mutex's) own
        # signature, whose holders complete closer together than one mutex's (slot_handoff.py)
        handoff = handoff_share(ctx, spans)
        one_by_one = 0.0 if np.isnan(handoff) else logistic(handoff, 0.5, 0.1)
        confidence = strength * weight * material * max(fit.serial, one_by_one)
        # beside a heavier cause a proven slot wait carries little of the tail excess yet slows many
        # requests: what the waits add to the mean request, over the median latency (as gc_pause's)
        added = float(values.sum() / ctx.n_requests / max(np.median(f.requests.latency), 1.0))
        confidence = max(confidence, 0.9 * strength * one_by_one * logistic(added, 0.03, 0.01))
        # where the slow spans' extra time is a call made only on some of them (a miss going to its
        # store), the crowd is what those slow calls make, not a lock
        called = conditional_call_cover(ctx, spans) if confidence > 0.45 else 0.0
        # a lock's wait is the process's own time: where the slow spans' extra time is in calls out of it
        # (CLIENT calls, a callee's side), the crowd is what long calls make (a slow peer, a deadline)
        called = max(called, time_in_calls(ctx, spans) if confidence > 0.45 else 0.0)
        pool_wait = (pooled := release_handoff(ctx, int(code), spans) if share >= 0.05 else np.nan) >= 0.5
        if pool_wait:  # a wait for a pooled connection (pool_release.py); slow_dependency reads the note
            confidence = ctx.notes.setdefault("pool_wait_names", {})[int(code)] = max(
                confidence, 0.95 * logistic(pooled, 0.5, 0.1) * weight)
        elif called >= 0.5:
            confidence = min(confidence, 0.45)
        # waits that start only once S >= 3 are in it: S slots (a pool's threads, shared cores), not one
        slots = slot_count(concurrency_at_start(ctx, spans), d) if confidence > 0.45 and not pool_wait else 1
        if slots >= 3:
            confidence = min(confidence, 0.45)
        name = f.names[code]
        stage_name = ALL_STAGES[stage] if stage != NO_STAGE else None
        summary = (
            f"'{name}' duration rises with the number of requests already in it on the same instance: "
            f"Spearman rho={rho:.2f}, slope {ms(slope):.2f} ms per request ahead (estimated hold time), "
            f"{ms(intercept):.2f} ms of its own work; contention explains {explained:.0%} of its mean "
            f"duration and {tail_wait:.0%} of the requests' tail excess, and the span "
            f"carries {share:.0%} of the tail excess"
            + (f"; but {called:.0%} of its slow spans' extra time is spent in calls out of the process (a "
               "call made only on some of them, such as a cache miss's store query, or a slower peer), "
               "not a wait for a lock" if called >= 0.5 and not pool_wait else "")
            + (pool_sentence(pooled) if pool_wait else "")
            + (f"; but it takes its own time while fewer than {slots} run beside it and stretches only "
               f"beyond: {slots} slots (a pool's threads, or CPU-bound work sharing {slots} cores), a queue "
               "for them or compute, not a lock (which makes the second request wait)" if slots >= 3 else "")
            + "."
        )
        stats = {
            "spearman_rho": round(rho, 3),
            "hold_ms": ms(slope),
            "own_work_ms": ms(intercept),
            "mean_concurrency": round(float(conc.mean()), 2),
            "max_concurrency": int(conc.max()),
            "contention_share_of_duration": round(explained, 3),
            "contention_share_of_tail_excess": round(tail_wait, 3),
            "tail_excess_share": round(share, 3),
            "spans": len(spans),
            "close_completions": round(fit.close, 3),
            "waits_ended_by_handoff": None if np.isnan(handoff) else round(handoff, 3),
            "wait_added_over_median": round(added, 4),
            "cohorts": fit.cohorts,
            "extra_time_in_conditional_calls": round(called, 3),
            "waits_ended_by_pool_release": None if np.isnan(pooled) else round(pooled, 3),
            "slots": slots if confidence > 0.45 or slots >= 3 else None,
        }
        pick = np.linspace(0, len(spans) - 1, min(len(spans), 3000)).astype(np.int64)
        chart = {
            "kind": "wait_vs_concurrency",
            "concurrency": conc[pick].tolist(),
            "duration_ms": (d[pick] / 1e6).round(3).tolist(),
            "slope_ms": ms(slope),
            "intercept_ms": ms(intercept),
        }
        advice = ADVICE.format(
            where=f"'{name}'" + (f" ({stage_name})" if stage_name else ""), hold=f"{ms(slope):.1f}"
        )
        findings.append(
            Finding(
                PATTERN,
                clamp01(confidence),
                stage_name,
                name,
                {"summary": summary, "stats": stats, "chart": chart},
                advice,
            )
        )
    findings.sort(key=lambda x: -x.confidence)
    # one finding per stage: a lock's parent span shows the same contention as the lock span itself.
    # A span inside a kept one goes on too: the runner keeps the inner one, which names the lock.
    out: list[Finding] = []
    for fd in findings:
        same = [k for k in out if k.stage == fd.stage and fd.stage is not None]
        if same and not any(_inside(f, fd.span_name, k.span_name) for k in same):
            continue
        out.append(fd)
    return recast(ctx, out[:2])  # a server's wait for its capacity is queueing (server_queue.py)


def _inside(f: TraceFrame, inner: str, outer: str) -> bool:
    """Most spans named `inner` are children of a span named `outer`."""
    spans = np.nonzero(f.name == f.names.index(inner))[0]
    up = f.parent[spans]
    return bool(np.mean((up >= 0) & (f.name[np.maximum(up, 0)] == f.names.index(outer))) >= 0.5)


def _fit(ctx: Context, spans: np.ndarray) -> Fit | None:
    """The better of two counts of the requests ahead: by start order, and by cohorts of spans that
    start together (a lock taken after some work inside the span: the start order does not rank a
    cohort at the lock). Both are fixed when a span starts, so neither correlates with the span's own
    duration where there is no shared resource. None where the spans hardly overlap."""
    f = ctx.frame
    d = f.dur[spans].astype(np.float64)
    start, group = f.start[spans], _group(ctx, spans)
    end = start + f.dur[spans]
    keys = ahead_counts.keys(start, end, group)  # the same for every count below
    best = None
    for together in (0.0, TOGETHER * float(np.median(d))):
        member = cohorts(start, group, together) if together > 0 else None
        conc = ahead_counts.ahead(start, end, group, member, False, keys)
        if conc.max(initial=0) < 2 or np.mean(conc > 0) < 0.05:
            continue
        rho = spearman(conc, d) if member is None else _cohort_rho(member, conc, d)
        slope, intercept = theil_sen(conc, d, ctx.rng)
        ahead = conc if member is None else ahead_counts.ahead(start, end, group, member, True, keys)
        close = close_completions(start, end, group, slope)
        fit = Fit(conc, ahead, d, rho, slope, intercept, close, member is not None)
        if best is None or fit.rho * fit.serial > best.rho * best.serial:
            best = fit
    return best


def _cohort_rho(member: np.ndarray, conc: np.ndarray, d: np.ndarray) -> float:
    """Rank correlation over cohorts, one point each: requests ahead of the cohort against its mean
    duration. Members of a cohort are alike when they start, so the cohort is the observation."""
    size = np.bincount(member)
    keep = size > 0
    if keep.sum() < MIN_COHORTS:  # too few observations for a rank correlation to mean much
        return 0.0
    mean_d = np.bincount(member, weights=d)[keep] / size[keep]
    ahead = np.bincount(member, weights=conc)[keep] / size[keep]
    return spearman(ahead, mean_d)


def _wraps_forward(ctx: Context) -> np.ndarray:
    """Per span name: most of its spans hold a model_forward span below them. Such a span also holds
    the wait for a batch to fill and a free model, which grows with how many requests are in it
    whether or not a lock is taken (a handler or controller span around the whole request)."""
    f = ctx.frame
    holds = np.zeros(len(f), bool)
    cur = f.parent[np.nonzero(ctx.span_stage_mask("model_forward") & (f.request >= 0))[0]]
    for _ in range(64):
        cur = cur[cur >= 0]
        cur = cur[~holds[cur]]
        if len(cur) == 0:
            break
        holds[cur] = True
        cur = f.parent[cur]
    inside = f.request >= 0
    total = np.bincount(f.name[inside], minlength=len(f.names))
    return np.bincount(f.name[inside & holds], minlength=len(f.names)) * 2 > total


def _inclusive_share(ctx: Context, code: int) -> float:
    """Tail-excess share of a name's spans counted with their descendants (top-level occurrences)."""
    f = ctx.frame
    mask = f.name == code
    p = f.parent
    nested = np.zeros(len(f), bool)
    has_p = p >= 0
    nested[has_p] = f.name[p[has_p]] == code
    return ctx.share_of(mask & ~nested, f.dur)


def conditional_call_cover(ctx: Context, spans: np.ndarray) -> float:
    """The share of the slow spans' extra time (those over twice the median: their mean over the
    others') spent in CLIENT children made on a slow path only (extra_calls.on_slow_path: names
    present under at most 60 % of the spans and at least twice as often under the slow ones, or the
    extra copies of a call every span makes, such as the store queries of a cache's misses under one
    database span name). 0 where none."""
    f = ctx.frame
    d = f.dur[spans].astype(np.float64)
    slow = slow_spans(d)
    if slow.sum() < 10 or slow.all():
        return 0.0
    extra = float(d[slow].mean() - d[~slow].mean())
    pos = np.full(len(f), -1)
    pos[spans] = np.arange(len(spans))
    kids = np.nonzero((f.parent >= 0) & (f.kind == KIND_CLIENT))[0]
    kids = kids[pos[f.parent[kids]] >= 0]
    if len(kids) == 0 or extra <= 0:
        return 0.0
    made = on_slow_path(f, spans, kids, slow) & slow[pos[f.parent[kids]]]
    return clamp01(float(f.dur[kids[made]].sum()) / int(slow.sum()) / extra)


def time_in_calls(ctx: Context, spans: np.ndarray) -> float:
    """The share of the slow spans' extra time (those over twice the median: their mean over the
    others') that their calls out of the process take longer: CLIENT children, and for a CLIENT span
    its callee's SERVER span (the mean time in them, slow spans minus the others). 1 where most of the
    spans are CLIENT spans whose callee is not traced (a database, a third party): their time is the
    peer's, and a lock in this process cannot be told from a slower peer in it. 0 where none."""
    f = ctx.frame
    pos = np.full(len(f), -1)
    pos[spans] = np.arange(len(spans))
    under = (f.parent >= 0) & (pos[np.maximum(f.parent, 0)] >= 0)
    callee = (f.kind == KIND_SERVER) & (f.kind[np.maximum(f.parent, 0)] == KIND_CLIENT)
    served = np.zeros(len(spans), bool)
    served[pos[f.parent[np.nonzero(under & callee)[0]]]] = True
    if float(((f.kind[spans] == KIND_CLIENT) & ~served).mean()) >= 0.5:
        return 1.0
    d = f.dur[spans].astype(np.float64)
    slow = slow_spans(d)
    if slow.sum() < 10 or slow.all():
        return 0.0
    extra = float(d[slow].mean() - d[~slow].mean())
    if extra <= 0:
        return 0.0
    kids = np.nonzero(under & ((f.kind == KIND_CLIENT) | callee))[0]
    t = np.bincount(pos[f.parent[kids]], weights=f.dur[kids].astype(np.float64), minlength=len(spans))
    return clamp01(float(t[slow].mean() - t[~slow].mean()) / extra)
