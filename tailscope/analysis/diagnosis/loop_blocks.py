"""compute_bound where one request's synchronous step blocks its process (an event loop: Node.js,
asyncio): the step is the cause, the stall of everything else on the process its consequence.

Mechanism. A single-threaded event loop runs one callback at a time. A step that computes for a long
time without yielding (a regex that backtracks on a long input, JSON.parse of a large body, a
synchronous model call) holds the loop: every other request on that process waits, their spans in
flight stretched, and when the step ends the callbacks that queued behind it run at once. A stop-the-
world pause makes the same picture from the other requests' side, but nobody's work fills it: the
span in flight across a pause was stretched by it and its input does not predict that. Here the
blocking span's own length follows its input (a longer query, a larger body), and it is always the
same kind of work that blocks.

Statistic, per span name of in-process work (leaves that are neither calls nor queue waits nor the
model's batched forward): its *long* spans (>= LONG x the name's median and >= MIN_LONG_NS).
- Held: the other requests' spans on the same instance that end in the millisecond after a long span
  ends (the callbacks released together) against what the instance's rate of span ends gives in a
  millisecond: the median count >= MIN_RELEASED and the mean >= 10 x expected.
- Its own work: the long spans are the long inputs (a size-like attribute of the span or its parent
  above the name's 90th percentile for most of them) and, among them, the size orders the duration
  (Spearman), or, where the instance is one process, nothing else on it ends from the span's start
  on (the silence starts with it; a span caught by a pause started before the pause).
Confidence = held x own work x material_weight(share), share = the blocked time every request on the
instance sat through (the long spans' intervals as stall episodes) as a share of the tail excess.
"""

from __future__ import annotations

import numpy as np

from tailscope.analysis.diagnosis.frame import KIND_CLIENT, SPAN_KINDS, self_segments
from tailscope.analysis.diagnosis.large_payload import span_sizes
from tailscope.analysis.diagnosis.long_stalls import request_stall_overlap, stall_overlap
from tailscope.analysis.diagnosis.model import Context, Finding
from tailscope.analysis.diagnosis.stats import clamp01, excess_share, logistic, material_weight, spearman
from tailscope.analysis.diagnosis.where import busiest
from tailscope.vocabulary import ALL_STAGES

LONG = 10.0
MIN_LONG_NS = 20_000_000
MIN_LONG = 5
MIN_RELEASED = 3
MAX_STEPS = 200  # long steps read for the spans they held (_stretched_over)
RELEASE_NS = 1_000_000
CAP = 0.9
KINDS = (SPAN_KINDS.index("Internal"), SPAN_KINDS.index("Unspecified"))
ADVICE = (
    "One request's synchronous step holds its process: on an event loop (Node.js, asyncio) nothing "
    "else runs until it returns, so every other request on that process waits behind it. Make the step "
    "cheap or move it off the loop: bound its input (reject over-long queries / bodies), replace a "
    "backtracking regular expression with a linear-time one (RE2, re2js) or a hand-written scanner, "
    "stream or chunk large JSON, or run it on a worker thread / process pool; watch the event-loop "
    "delay (perf_hooks.monitorEventLoopDelay, asyncio debug slow-callback warnings)."
)


def _ends(ctx: Context) -> tuple[np.ndarray, np.ndarray]:
    """Every request span's (instance, end), sorted by instance then end."""
    f = ctx.frame
    inside = np.nonzero(f.request >= 0)[0]
    order = np.lexsort((f.end[inside], f.instance[inside]))
    inside = inside[order]
    return f.instance[inside], f.end[inside]


def _count(e_inst, e_end, inst, lo, hi) -> np.ndarray:
    """Per query: span ends on `inst` in [lo, hi)."""
    span = int(max(e_end.max(), hi.max())) + 1
    key = e_inst.astype(np.int64) * span + e_end
    return (np.searchsorted(key, inst * span + hi, "left") - np.searchsorted(key, inst * span + lo, "left"))


def _by_input(ctx: Context, code: int, spans: np.ndarray, long: np.ndarray, d: np.ndarray) -> float:
    """How surely the long spans' inputs make them long: the share of them above the name's 90th
    percentile of a size-like attribute (the span's, or its parent's: the server span that received
    the body a handler's span parses), times how well that size orders their durations."""
    f = ctx.frame
    best = 0.0
    sizes = list(span_sizes(ctx, code, spans))
    up = f.parent[spans]
    if (up >= 0).all() and len(spans):
        parent = int(np.bincount(f.name[up]).argmax())
        sizes += list(span_sizes(ctx, parent, up)) if (f.name[up] == parent).all() else []
    for _, v in sizes:
        ok = np.isfinite(v)
        if ok[long].mean() < 0.8 or ok.mean() < 0.5:
            continue
        high = float((v[long & ok] > np.quantile(v[ok], 0.9)).mean())
        sel = long & ok
        rho = spearman(v[sel], d[sel].astype(np.float64)) if sel.sum() >= 5 else 0.0
        best = max(best, logistic(high, 0.7, 0.07) * logistic(rho, 0.4, 0.1))
    return best


def find(ctx: Context) -> dict | None:
    """The blocking step (see the module docstring), computed once per run (ctx.notes["loop_blocks"]):
    {"finding", "episodes" (instance, start, end of the long spans), "spans"}, or None."""
    stalls = ctx.notes.get("gc_episodes")  # scored again once gc_pause has its stalls (_scored)
    if ctx.notes.get("loop_blocks:stalls", False) is not stalls or "loop_blocks" not in ctx.notes:
        ctx.notes["loop_blocks"] = _find(ctx)
        ctx.notes["loop_blocks:stalls"] = stalls
    return ctx.notes["loop_blocks"]


def _find(ctx: Context) -> dict | None:
    if "loop_blocks:steps" not in ctx.notes:  # what does not depend on gc_pause's stalls: measured once
        ctx.notes["loop_blocks:steps"] = _steps(ctx)
    best = None
    for step in ctx.notes["loop_blocks:steps"]:
        best = _scored(ctx, step, best)
    if best is None or best["confidence"] < 0.05:
        return None
    return {"finding": _finding(ctx, best), "episodes": best["episodes"], "spans": best["spans"]}


def _steps(ctx: Context) -> list[dict]:
    """Every candidate step's stall-free measures (_measure), in the order they are judged."""
    f = ctx.frame
    skip = np.isin(ctx.stage, [ALL_STAGES.index("queue"), ALL_STAGES.index("model_forward")])
    work = f.leaf & (f.request >= 0) & np.isin(f.kind, KINDS) & ~skip
    e_inst, e_end = _ends(ctx)
    if len(e_end) == 0:
        return []
    run_ns = max(int(f.end.max() - f.start.min()), 1)
    rate = np.bincount(e_inst, minlength=len(f.instances)) / run_ns * RELEASE_NS  # ends per window
    steps = []
    for code in np.unique(f.name[work]).tolist():
        spans = np.nonzero(work & (f.name == code))[0]
        steps.append(_measure(ctx, code, spans, f.start[spans], f.end[spans], (e_inst, e_end, rate)))
    # a step with no span of its own: the longest stretch of a server's or an in-process span's time
    # that no child covers (a body parsed before the handler's first span), its outermost long ones
    owners = np.nonzero(~f.leaf & (f.request >= 0) & (f.kind != KIND_CLIENT) & ~skip)[0]
    owner, seg_s, seg_e = self_segments(f.excl_parent, f.start, f.dur, owners)
    if len(owner):
        order = np.lexsort((seg_e - seg_s, owner))
        pick = order[np.r_[owner[order][1:] != owner[order][:-1], True]]  # each owner's longest
        owner, seg_s, seg_e = owner[pick], seg_s[pick], seg_e[pick]
        for code in np.unique(f.name[owner]).tolist():
            sel = f.name[owner] == code
            keep = _outermost(f.instance[owner[sel]], seg_s[sel], seg_e[sel])
            steps.append(_measure(ctx, code, owner[sel][keep], seg_s[sel][keep], seg_e[sel][keep],
                                  (e_inst, e_end, rate), stretch=True))
    return [step for step in steps if step is not None]


def _stretched_over(ctx: Context, steps: np.ndarray, inst: np.ndarray, start: np.ndarray,
                    end: np.ndarray) -> float:
    """Over the steps (at most MAX_STEPS of them): the mean share of the other requests' spans in flight
    on the step's instance when it started that end only once it ended (within a millisecond): held
    by it, as everything on a process one step holds is. Where threads serve requests side by side,
    the others end through it at their usual pace."""
    f = ctx.frame
    if "loop_blocks:by_start" not in ctx.notes:  # request spans by instance then start; a horizon
        spans = np.nonzero(f.request >= 0)[0]
        spans = spans[np.lexsort((f.start[spans], f.instance[spans]))]
        horizon = int(f.end.max()) + 2
        key = f.instance[spans].astype(np.int64) * horizon + f.start[spans]
        ctx.notes["loop_blocks:by_start"] = (spans, key, horizon, float(np.quantile(f.dur[spans], 0.999)))
    spans, key, horizon, longest = ctx.notes["loop_blocks:by_start"]
    shares = []
    for k in range(min(len(steps), MAX_STEPS)):
        at = int(inst[k]) * horizon + start[k]
        near = spans[np.searchsorted(key, at - longest):np.searchsorted(key, at)]  # started before it
        flying = near[(f.end[near] > start[k] + RELEASE_NS) & (f.request[near] != f.request[steps[k]])]
        if len(flying):
            shares.append(float((f.end[flying] >= end[k] - RELEASE_NS).mean()))
    return float(np.mean(shares)) if shares else 0.0


def _outermost(inst: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Per stretch: False where a stretch of the same instance that started earlier (at least 1 ms)
    is still running when it starts: requests that arrived while a step held the process, their own
    stretch the wait for it, not the step."""
    out = np.ones(len(inst), bool)
    for i in np.unique(inst).tolist():
        mine = np.nonzero(inst == i)[0]
        mine = mine[np.argsort(start[mine], kind="stable")]
        reach = np.maximum.accumulate(end[mine])  # the latest end of the stretches started so far
        out[mine[1:]] = ~(reach[:-1] > start[mine[1:]] + RELEASE_NS)
    return out


def _measure(ctx: Context, code: int, spans: np.ndarray, start: np.ndarray, end: np.ndarray, ends: tuple,
             stretch: bool = False) -> dict | None:
    """The step `code` (spans `spans`, its time [start, end) each) as a blocker of its process (see the
    module docstring): all but its overlap with gc_pause's stalls (_scored), None without long spans."""
    f = ctx.frame
    e_inst, e_end, rate = ends
    d = end - start
    if len(d) == 0:
        return None
    long = (d >= LONG * np.median(d)) & (d >= MIN_LONG_NS)
    if long.sum() < MIN_LONG:
        return None
    b = spans[long]
    inst, b_end, b_start = f.instance[b], end[long], start[long]
    released = _count(e_inst, e_end, inst, b_end, b_end + RELEASE_NS)
    expected = float(rate[inst].mean())
    held = logistic(float(np.median(released)), MIN_RELEASED, 0.7) * logistic(
        float(released.mean()) / max(expected, 1e-6), 10.0, 2.0)
    # the silence starts with the span: nothing else on the instance ends inside it
    ended_inside = _count(e_inst, e_end, inst, b_start + RELEASE_NS, b_end)
    telling = rate[inst] * (d[long] / RELEASE_NS) >= 3  # long enough that something would have ended
    silent_from_start = float((ended_inside[telling] == 0).mean()) if telling.any() else 0.0
    by_input = _by_input(ctx, code, spans, long, d)
    silent = logistic(silent_from_start, 0.8, 0.05)
    own = max(by_input, silent)
    if stretch:  # a stretch with no span of its own: its input must make it long, the others held
        held, own = max(held, logistic(_stretched_over(ctx, b, inst, b_start, b_end), 0.8, 0.05)), by_input
    episodes = (inst, b_start, b_end)
    order = np.lexsort((episodes[1], episodes[0]))
    episodes = tuple(x[order] for x in episodes)
    share = excess_share(request_stall_overlap(ctx, *episodes), ctx.split)
    return {"code": code, "spans": b, "episodes": episodes, "at": (inst, b_start, b_end),
            "long_time": d[long], "held": held, "own": own, "by_input": by_input, "share": share, "stats": {
                "long_spans": int(long.sum()), "median_ms": round(float(np.median(d)) / 1e6, 3),
                "long_median_ms": round(float(np.median(d[long])) / 1e6, 3),
                "released_after_median": float(np.median(released)), "released_expected": round(expected, 3),
                "silent_from_start": round(silent_from_start, 3), "own_work": round(own, 3)},
            "stretch": stretch}


def _scored(ctx: Context, step: dict, best: dict | None) -> dict | None:
    """A measured step (_measure) kept where it beats `best`: or the process's stalls (gc_pause's
    episodes: other requests' spans stretched together) are these long steps, each one's time ordered
    by its own input: the request's own work holds the process."""
    stalls = ctx.notes.get("gc_episodes")
    in_stalls = 0.0
    if stalls is not None and len(stalls[0]):
        covered = stall_overlap(*step["at"], *stalls) / np.maximum(step["long_time"], 1)
        in_stalls = float((covered >= 0.5).mean())
    held_own = max(step["held"] * step["own"], logistic(in_stalls, 0.6, 0.1) * step["by_input"])
    confidence = CAP * held_own * material_weight(step["share"])
    if best is not None and confidence <= best["confidence"]:
        return best
    stats = {**step["stats"], "long_steps_in_process_stalls": round(in_stalls, 3),
             "own_time_without_span": step["stretch"], "tail_excess_share": round(step["share"], 3)}
    return {"confidence": confidence, "code": step["code"], "episodes": step["episodes"],
            "spans": step["spans"], "stats": stats}


def _finding(ctx: Context, found: dict) -> Finding:
    f = ctx.frame
    code, st = found["code"], found["stats"]
    inst = found["episodes"][0]
    where = busiest(f, inst)
    service = f.services[int(np.bincount(f.service[found["spans"]]).argmax())]
    name = f.names[code]
    summary = (
        f"'{name}' on {', '.join(where)} ({service}) ran {st['long_spans']} times for "
        f"{st['long_median_ms']:.0f} ms (median; its usual time is {st['median_ms']} ms) without letting "
        "anything else on that process run: "
        f"in the millisecond after each, a median {st['released_after_median']:.0f} spans of other requests "
        f"ended at once (about {st['released_expected']:.2f} expected), the callbacks that had queued behind "
        "it. It is the step's own work, not a pause it sat through"
        + (": the long ones are the long inputs" if st["own_work"] > 0 and st["silent_from_start"] < 0.8 else
           ": the process went silent when it started")
        + f". The blocked time carries {st['tail_excess_share']:.0%} of the tail excess."
    )
    stats = {"services": [service], "instances": where, "mechanism": "synchronous step blocking its process",
             **st}
    return Finding("compute_bound", clamp01(found["confidence"]), ctx.stage_of_name(code), name,
                   {"summary": summary, "stats": stats}, ADVICE)


def cap_stops_held(ctx: Context, found: list[Finding], blocks: dict, pattern: str) -> None:
    """Stalls that are mostly one request's own steps holding the process (loop_blocks: the long steps,
    ordered by their input) are that work's, not a collector's, where the runtime's reported pauses
    do not cover them: the stop finding keeps the share of its stall time the steps leave."""
    stalls = ctx.notes.get("gc_episodes")
    if stalls is None or not len(stalls[0]):
        return
    length = np.maximum(stalls[2] - stalls[1], 1).astype(np.float64)
    held = float(stall_overlap(*stalls, *blocks["episodes"]).sum() / length.sum())
    if held < 0.5:
        return
    for fd in found:
        stats = fd.evidence.get("stats", {})
        if fd.pattern != pattern or (stats.get("tail_excess_share_in_reported_gc") or 0.0) >= 0.3:
            continue
        fd.confidence = min(fd.confidence, 0.45)
        stats["part_of"] = "compute_bound"
        fd.evidence["summary"] += (
            f" {held:.0%} of the stall time is one request's own step holding the process (see "
            f"compute_bound on '{blocks['finding'].span_name}'): its work, not a collector."
        )
