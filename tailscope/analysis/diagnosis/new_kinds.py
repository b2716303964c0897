"""cold_start in a running process: the first run of a new kind of work (an input shape, a model version,
a route) pays a one-off compile or load, and the requests behind it wait.

Mechanism. A JIT or graph compiler (torch.compile, XLA or TensorRT per input shape, a JVM method
deoptimised by a new type) or a lazy loader (a model version, a route's handler) builds what one kind
of input needs the first time that kind reaches a process: that one step takes many times the usual,
once per process and kind, and the next steps of the same kind are fast again. While it runs the
worker doing it (a batcher, a model thread) does nothing else, so the requests queued behind it wait.
A GC pause or a CPU quota stops a process too, but recurs with allocation or time whatever the input; a
burst follows the arrivals; a larger input is slow every time it comes: none of them falls on the
first step of a kind more often than on any other, and none is fast again for the same kind.

Statistic. Per in-process span name (not a call, not an entry span) whose slowest step is >= ONE_OFF x
its median: its steps (spans of one instance sharing their interval are one step: a batch's members),
and for each attribute of the name with few distinct values (2..MAX_KINDS: a kind), per instance, the
first step of each value after the instance's first WARM steps (its start-up is the instance warm-up's,
cold_start.py), kept where the instance ran >= LATER later steps of that value (their median: the kind
once built). A first step is *one-off* where it took >= ONE_OFF x that median; against the same ratio
for every later step (each to its own value's median on its instance): k of n first steps one-off at
the later steps' rate p0 is a binomial tail, times the attributes tried. Strength = logistic(-log10 p,
4, 0.6), with k >= 2 one-off first steps (a stop that recurs hits first steps at its rate on the others),
x logistic(first part, FIRST_PART, 0.08): the first steps' part of all the name's one-off steps (a
compile is once per kind; a callee that stalls again and again after a change, while new kinds arrive,
makes first steps slow at a rate the earlier steps never had, and many more later steps slow).
Weight: per request, the time from its arrival (its caller's send where traced, the tail then as the
caller sees it) to its end during which a one-off step ran on its instance, as a share of the tail
excess (material_weight).

`settle`: a gc_pause finding whose stall episodes lie inside those one-off steps (a compile holds the
process as a pause does; and the interpreter-lock reading of the same stalls: the compile is the work
that ran across them), where the runtime's reported GC pauses cover little of the tail excess (< 30
%), keeps (1 - the part of its stall time inside them) of its confidence, and is marked part of the
cold start where that part is most of it.
"""

from __future__ import annotations

from math import comb, log10

import numpy as np

from tailscope.analysis.diagnosis.frame import KIND_CLIENT, SPAN_KINDS
from tailscope.analysis.diagnosis.long_stalls import stall_overlap
from tailscope.analysis.diagnosis.model import Context, Finding
from tailscope.analysis.diagnosis.stats import (
    clamp01,
    excess_share,
    logistic,
    material_weight,
    ms,
    tail_split,
)

PATTERN = "cold_start"
MECHANISM = "the first run of a new kind of work in a running process (a compile or load)"
ONE_OFF = 20.0  # a step this many times its kind's usual time (a batch 16x the usual one is not one-off)
MAX_KINDS = 64  # an attribute with more distinct values names items, not kinds
WARM = 10  # an instance's first steps are its start-up
LATER = 3  # later steps of the kind on the instance needed to say it is fast again
MIN_STEPS = 50
FIRST_PART = 0.35  # of the name's one-off steps, the share that are the first of a kind: 0.5 there
MAX_NAMES = 6  # span names tried (those with the most extreme one-off steps)
NOTE = "new_kind_steps"
REPORTED = 0.3  # a gc_pause finding whose reported GC pauses cover this much of the tail excess stands
ENTRY_OR_CALL = (KIND_CLIENT, SPAN_KINDS.index("Server"), SPAN_KINDS.index("Producer"),
                 SPAN_KINDS.index("Consumer"))


def _binomial_tail(k: int, n: int, p: float) -> float:
    """P(X >= k) for X ~ Binomial(n, p)."""
    p = min(max(p, 1e-6), 1.0 - 1e-9)
    return float(min(1.0, sum(comb(n, j) * p**j * (1 - p) ** (n - j) for j in range(k, n + 1))))


def _steps(f, code: int) -> np.ndarray:
    """One span per step of a name (spans of one instance sharing start and duration are one), in
    start order."""
    spans = np.nonzero((f.name == code) & (f.request >= 0))[0]
    inst, start, dur = f.instance[spans], f.start[spans], f.dur[spans]
    # each distinct (instance, start, duration)'s first span: a lexsort and the lowest position of each
    # run of equal keys (what np.unique(axis=0, return_index=True) gives, at a tenth of its time)
    order = np.lexsort((dur, start, inst))
    a, s, d = inst[order], start[order], dur[order]
    new = np.ones(len(order), bool)
    new[1:] = (a[1:] != a[:-1]) | (s[1:] != s[:-1]) | (d[1:] != d[:-1])
    first = np.minimum.reduceat(order, np.nonzero(new)[0]) if len(order) else order
    steps = spans[np.sort(first)]
    return steps[np.argsort(f.start[steps], kind="stable")]


def _kind_values(f, code: int, steps: np.ndarray) -> list[tuple[str, np.ndarray]]:
    """(attribute, value code per step, -1 where absent) for the name's attributes with 2..MAX_KINDS
    distinct values on most of its steps."""
    pos = np.full(len(f), -1, np.int64)
    pos[steps] = np.arange(len(steps))
    out = []
    for key, (idx, values) in f.attributes(code).items():
        idx = np.asarray(idx, np.int64)
        at = pos[idx]
        ok = at >= 0
        if ok.sum() < 0.8 * len(steps):
            continue
        raw = np.asarray(values, dtype=object)[ok]
        if _kinds_out_of_range(raw):  # told from the raw values, before a str() of each
            continue
        vals = np.asarray([str(v) for v in raw])
        uniq, inv = np.unique(vals, return_inverse=True)
        if not 2 <= len(uniq) <= MAX_KINDS:
            continue
        codes = np.full(len(steps), -1, np.int64)
        codes[at[ok]] = inv
        out.append((key, codes))
    return out


def _kinds_out_of_range(raw: np.ndarray) -> bool:
    """Whether the values' text surely has fewer than 2 or more than MAX_KINDS distinct values: raw
    strings (and None, whose text 'None' a string may share) have at most one distinct text fewer
    than distinct values; other values are left to the text."""
    try:
        distinct = set(raw.tolist())
    except TypeError:  # an unhashable value
        return False
    if not all(v is None or type(v) is str for v in distinct):
        return False
    return len(distinct) < 2 or len(distinct) > MAX_KINDS + 1


def _firsts(inst: np.ndarray, kind: np.ndarray, dur: np.ndarray, index: np.ndarray):
    """(first mid-run step of each (instance, value) with its later median, later steps with theirs):
    (first step positions, their ratio to the later median, the later steps' ratios)."""
    first_pos, first_ratio, later_ratio = [], [], []
    for i in np.unique(inst).tolist():
        mine = np.nonzero((inst == i) & (kind >= 0))[0]
        for v in np.unique(kind[mine]).tolist():
            same = mine[kind[mine] == v]
            if len(same) < LATER + 1:
                continue
            later = same[1:]
            usual = max(float(np.median(dur[later])), 1.0)
            later_ratio.append(dur[later] / usual)
            if index[same[0]] >= WARM:
                first_pos.append(int(same[0]))
                first_ratio.append(float(dur[same[0]]) / usual)
    later = np.concatenate(later_ratio) if later_ratio else np.zeros(0)
    return np.asarray(first_pos, np.int64), np.asarray(first_ratio), later


def _seen(ctx: Context):
    """(per request: arrival, end, the tail split) as the caller sees it where most requests come with
    their caller's CLIENT span, else the requests' own."""
    reqs = ctx.frame.requests
    wrapped = ~np.isnan(reqs.client_latency)
    if wrapped.mean() >= 0.5:
        seen = np.where(wrapped, reqs.client_latency, reqs.latency.astype(np.float64))
        return reqs.arrival.astype(np.float64), reqs.arrival + seen, tail_split(seen, reqs.weight)
    return reqs.start.astype(np.float64), (reqs.start + reqs.latency).astype(np.float64), ctx.split


def _candidates(ctx: Context) -> list[int]:
    """In-process span names with an extreme slowest step, most extreme first."""
    f = ctx.frame
    sel = (f.request >= 0) & ~np.isin(f.kind, ENTRY_OR_CALL)
    codes, counts = np.unique(f.name[sel], return_counts=True)
    out = []
    for code in codes[counts >= MIN_STEPS].tolist():
        d = f.dur[sel & (f.name == code)]
        med = max(float(np.median(d)), 1.0)
        top = float(d.max()) / med
        if top >= ONE_OFF:
            out.append((top, code))
    return [c for _, c in sorted(out, reverse=True)[:MAX_NAMES]]


def detect(ctx: Context, advice: str) -> list[Finding]:
    """`advice`: cold_start's advice text with a `{where}` field."""
    f = ctx.frame
    if ctx.n_requests < 100:
        return []
    best = None
    for code in _candidates(ctx):
        steps = _steps(f, code)
        if len(steps) < MIN_STEPS:
            continue
        inst, dur = f.instance[steps], f.dur[steps].astype(np.float64)
        index = np.zeros(len(steps), np.int64)  # the step's index on its instance
        for i in np.unique(inst).tolist():
            m = inst == i
            index[m] = np.arange(int(m.sum()))
        kinds = _kind_values(f, code, steps)
        for key, kind in kinds:
            pos, ratio, later = _firsts(inst, kind, dur, index)
            if len(pos) == 0 or len(later) < 20:
                continue
            one_off = ratio >= ONE_OFF
            k, n = int(one_off.sum()), len(pos)
            if k < 2:
                continue
            others = int((later >= ONE_OFF).sum())
            p0 = (others + 0.5) / (len(later) + 1.0)  # none seen is not a rate of zero
            p = min(1.0, _binomial_tail(k, n, p0) * len(kinds))
            first_part = k / max(k + others, 1)  # of the name's one-off steps, the first ones of a kind
            # a compile is once per kind: where most of the name's one-off steps are not the first of a
            # kind, the slowness recurs whatever the kind (a stalling callee), first steps among the rest
            strength = logistic(-log10(max(p, 1e-300)), 4.0, 0.6) * logistic(first_part, FIRST_PART, 0.08)
            if best is None or strength > best[0]:
                best = (strength, code, key, steps[pos[one_off]], ratio[one_off], k, n, p0, p, first_part)
    if best is None:
        return []
    strength, code, key, hit, ratio, k, n, p0, p, first_part = best
    t0, t1 = f.start[hit].astype(np.int64), f.end[hit].astype(np.int64)
    arrive, end, split = _seen(ctx)
    held = stall_overlap(f.requests.instance, arrive, end, f.instance[hit], t0, t1)
    share = clamp01(excess_share(held, split))
    ctx.notes[NOTE] = (f.instance[hit], t0, t1)
    confidence = strength * material_weight(share)
    name = f.names[code]
    stage = ctx.stage_of_name(code)
    where = sorted({f.instances[int(i)] for i in f.instance[hit]})
    services = sorted({f.services[int(s)] for s in f.service[hit]})
    summary = (
        f"'{name}' ran {k} one-off slow steps in running processes "
        f"(median {ms(np.median(f.dur[hit])):.0f} ms, "
        f"{np.median(ratio):.0f}x its usual time), each the first step of a new {key} on its instance "
        f"({k} of {n} such first steps vs {p0:.1%} of the other steps this slow; p {p:.1e}); the next ones "
        f"of the same {key} were fast: a compile or load for a new kind of input. Requests that arrived "
        f"while one ran on their instance waited through it: {share:.0%} of the tail excess."
    )
    stats = {
        "mechanism": MECHANISM,
        "kind_attribute": key,
        "one_off_steps": k,
        "first_steps": n,
        "one_off_rate_other_steps": round(p0, 4),
        "p_value": float(f"{p:.3g}"),
        "one_off_part_first": round(first_part, 3),
        "step_median_ms": ms(np.median(f.dur[hit])),
        "step_over_kind_median": round(float(np.median(ratio)), 1),
        "tail_excess_share": round(share, 3),
        "services": services,
        "instances": where,
    }
    chart = {"kind": "one_off_steps", "start_s": [round(float(t) / 1e9, 3) for t in t0],
             "duration_ms": [ms(d) for d in f.dur[hit]]}
    return [Finding(PATTERN, clamp01(confidence), stage, name, {"summary": summary, "stats": stats,
                                                                "chart": chart},
                    advice.format(where=f"'{name}'") + " Here the warm-up is per kind of input: compile or "
                    "load every kind (each shape bucket, model version, route) before taking traffic, or "
                    "pad inputs to the kinds already built (dynamic shapes, fewer buckets).")]


def settle(ctx: Context, findings: list[Finding]) -> list[Finding]:
    """A gc_pause finding with no runtime GC events behind its stalls (or the interpreter-lock reading
    of the same stalls) whose stall episodes lie inside the one-off steps is their consequence (see the
    module doc)."""
    steps = ctx.notes.get(NOTE)
    episodes = ctx.notes.get("gc_episodes")
    cold = max((fd.confidence for fd in findings if fd.pattern == PATTERN
                and fd.evidence.get("stats", {}).get("mechanism") == MECHANISM), default=0.0)
    if steps is None or episodes is None or len(episodes[0]) == 0 or cold < 0.5:
        return findings
    ep_inst, ep_t0, ep_t1 = episodes
    inside = stall_overlap(ep_inst, ep_t0, ep_t1, *steps)
    part = clamp01(float(inside.sum()) / max(float((ep_t1 - ep_t0).sum()), 1.0))
    for fd in findings:
        stats = fd.evidence.get("stats", {})
        reported = stats.get("tail_excess_share_in_reported_gc") or 0.0  # pauses the runtime saw
        stall = fd.pattern == "gc_pause" or stats.get("mechanism") == "interpreter_lock"
        if not stall or reported >= REPORTED or part <= 0.0:
            continue
        fd.confidence *= 1.0 - part
        stats["part_inside_new_kind_steps"] = round(part, 3)
        if part >= 0.5:
            stats["part_of"] = PATTERN
        fd.evidence["summary"] += (
            f" {part:.0%} of its stall time falls while a new kind's one-off step ran on the instance "
            "(see cold_start): part of that."
        )
    return findings
