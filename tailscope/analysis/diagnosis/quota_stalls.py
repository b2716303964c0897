"""cpu_throttling from single stretched spans: a CPU quota's stalls where about one request is in
flight.

Mechanism. Once a container has used its CPU quota for the scheduling period (cgroup CFS, 100 ms),
its threads wait for the next period: whatever span was running is stretched, and it ends shortly
after a period boundary, whenever it began. gc_pause's co-slowness test needs several spans in flight
to see a process-wide stall; with about one request in flight a stall stretches one span and nothing
lines up across names. The period still shows: on each instance, the ends of the spans stretched
well beyond their usual time (above their name's p90 and 1.5 x its median, >= 5 ms over the median,
not what their input's size predicts, see size_explained.py) keep one phase modulo 100 ms, their
starts do not. Calls to other services count only by the reading of their reply where the callee
is traced (the time from the callee's end to the call's end, stretched alike: the caller resumed);
the rest of a call's time is the callee's.

Statistic: per instance the Rayleigh Z of the stretched spans' end and start phases (one per stall:
spans one stall releases end together), summed into z as in cpu_throttling.alignment; alignment =
logistic(z_end, 8, 1.5) x logistic(z_end - z_start, 6, 1.5), a higher bar than gc_pause's quiet
stretches (one stretched span per stall is weaker evidence). The stretched spans' excess over their
name's median, per request, on the instances whose own ends align (Z >= 3), as a share of the tail
excess weighs it, or, beside a heavier cause, what it adds to the mean request over the median
latency (0.5 at 3 %), as gc_pause's stalls beside a heavy-tailed dependency. The stretches become stall
episodes for the other detectors (compute_bound and network leave their time out); a timing-only
gc_pause finding of the same stalls keeps (1 - alignment) of its confidence where this finding
reaches 0.3; where gc_pause's episodes already named cpu_throttling, the higher confidence stands.
"""

from __future__ import annotations

import copy

import numpy as np

from tailscope.analysis.diagnosis.cpu_throttling import ADVICE, MIN_QUIET_NS, MIN_STALLS, PERIOD_NS, _rayleigh
from tailscope.analysis.diagnosis.frame import KIND_CLIENT
from tailscope.analysis.diagnosis.long_stalls import reply_reads, request_stall_overlap, where_stalled
from tailscope.analysis.diagnosis.model import Context, Finding
from tailscope.analysis.diagnosis.size_explained import size_explained
from tailscope.analysis.diagnosis.stats import clamp01, excess_share, logistic, material_weight

PATTERN = "cpu_throttling"
INSTANCE_Z = 3.0  # Rayleigh Z of one instance's stall ends: p ~ 0.05 under no alignment
EVENT_NS = 10_000_000  # stretched spans ending within 10 ms of each other were released by one stall


def stretched_spans(ctx: Context) -> tuple[np.ndarray, np.ndarray]:
    """(span indices, excess ns over their name's median) of the work spans stretched well beyond
    their usual time."""
    f = ctx.frame
    work = f.leaf & (f.request >= 0) & (f.kind != KIND_CLIENT) & ~ctx.span_stage_mask("queue")
    spans = np.nonzero(work)[0]
    if len(spans) < 100:
        return np.zeros(0, np.int64), np.zeros(0)
    names = f.name[spans]
    d = f.dur[spans].astype(np.float64)
    order = np.lexsort((d, names))
    counts = np.bincount(names, minlength=len(f.names))
    starts = np.r_[0, np.cumsum(counts)[:-1]]
    q90 = d[order][np.minimum(starts + (0.9 * np.maximum(counts - 1, 0)).astype(np.int64), len(d) - 1)]
    med = d[order][np.minimum(starts + (0.5 * np.maximum(counts - 1, 0)).astype(np.int64), len(d) - 1)]
    excess = d - med[names]
    slow = (d > np.maximum(q90, 1.5 * med)[names]) & (excess >= MIN_QUIET_NS) & (counts[names] >= 50)
    slow &= ~size_explained(ctx, spans, slow)
    return spans[slow], excess[slow]


def stretched_reply_reads(ctx: Context) -> tuple[np.ndarray, np.ndarray]:
    """(CLIENT span indices, excess ns) of the calls whose reply was read well after it came (the
    time from the callee's SERVER span's end to the call's end, above its name's p90, 1.5 x and
    >= 5 ms over its median): a stalled caller resumes and reads it, so such a call ends when the
    caller runs again. Only calls whose callee is traced."""
    f = ctx.frame
    if "reply_reads" not in ctx.notes:  # gc_pause's, where it ran
        ctx.notes["reply_reads"] = reply_reads(f, f.request >= 0)
    calls, answered, ended = ctx.notes["reply_reads"]
    if len(calls) < 100:
        return np.zeros(0, np.int64), np.zeros(0)
    gap = (ended - answered).astype(np.float64)
    names = f.name[calls]
    out = np.zeros(len(calls), bool)
    excess = np.zeros(len(calls))
    for code in np.unique(names).tolist():
        sel = names == code
        if sel.sum() < 50:
            continue
        p50, p90 = np.quantile(gap[sel], [0.5, 0.9])
        excess[sel] = gap[sel] - p50
        out[sel] = (gap[sel] > max(p90, 1.5 * p50)) & (excess[sel] >= MIN_QUIET_NS)
    return calls[out], excess[out]


def resume_events(inst: np.ndarray, end: np.ndarray, excess: np.ndarray):
    """One event per stall: the stretched spans one stall releases end together (within EVENT_NS of
    each other on one instance) and are one observation of its end, not several. Per event: instance,
    the first end (work resumes), and that end minus the longest stretch (about when it began)."""
    order = np.lexsort((end, inst))
    inst, end, excess = inst[order], end[order], excess[order]
    new = np.r_[True, (inst[1:] != inst[:-1]) | (np.diff(end) > EVENT_NS)]
    first = np.nonzero(new)[0]
    longest = np.maximum.reduceat(excess, first)
    return inst[first], end[first], (end[first] - longest).astype(np.int64)


def detect(ctx: Context) -> list[Finding]:
    f = ctx.frame
    if ctx.n_requests < 100 or ctx.split.excess_ns <= 0:
        return []
    spans, excess = stretched_spans(ctx)
    calls, call_excess = stretched_reply_reads(ctx)  # a stalled caller reads its replies late
    spans, excess = np.r_[spans, calls], np.r_[excess, call_excess]
    if len(spans) < MIN_STALLS:
        return []
    inst, end = f.instance[spans], f.end[spans]
    ev_inst, ev_end, ev_start = resume_events(inst, end, excess)
    if len(ev_end) < MIN_STALLS:
        return []
    z_end = z_start = 0.0
    groups = 0
    throttled = []  # instances whose own stretched spans end on one phase (Rayleigh p < 0.05)
    for i in np.unique(ev_inst):
        sel = ev_inst == i
        if sel.sum() < 3:
            continue
        groups += 1
        z_i = _rayleigh(ev_end[sel])
        z_end += z_i
        z_start += _rayleigh(ev_start[sel])
        if z_i >= INSTANCE_Z:
            throttled.append(i)
    if groups == 0 or not throttled:
        return []
    on = np.isin(inst, throttled)  # the stalls of the instances a quota holds
    spans, excess, inst, end = spans[on], excess[on], inst[on], end[on]
    z_end, z_start = (z_end - groups) / np.sqrt(groups), (z_start - groups) / np.sqrt(groups)
    # one stretched span per stall is weaker evidence than gc_pause's quiet stretches: a higher bar
    aligned = logistic(z_end, 8.0, 1.5) * logistic(z_end - z_start, 6.0, 1.5)
    gc_covered = None
    if len(f.gc_time):  # the runtime reports its pauses: they speak for GC as far as they cover the tail
        gc_covered = excess_share(request_stall_overlap(ctx, *ctx.reported_pauses), ctx.split)
        aligned *= 1 - logistic(gc_covered, 0.3, 0.08)
    if aligned < 0.2:
        return []
    per_request = np.bincount(f.request[spans], weights=excess, minlength=ctx.n_requests)
    share = clamp01(excess_share(per_request, ctx.split))
    # beside a heavier cause (a slow dependency owning the p99) the stalls carry little of the tail
    # excess yet slow many requests: what they add to the mean request, over the median latency
    added = float(per_request.mean() / max(np.median(f.requests.latency), 1.0))
    confidence = clamp01(aligned * max(0.95 * material_weight(share), 0.9 * logistic(added, 0.03, 0.01)))
    episodes = (inst, (end - excess).astype(np.int64), end.astype(np.int64))
    earlier = ctx.notes.get("stall_findings", [])
    for fd in earlier:  # the same stalls read by gc_pause's episodes
        if fd.pattern == "gc_pause" and gc_covered is None and confidence >= 0.3:
            fd.confidence = clamp01(fd.confidence * (1 - aligned))
    known = [fd for fd in earlier if fd.pattern == PATTERN]
    old = ctx.notes.get("gc_episodes")
    ctx.notes["gc_episodes"] = episodes if old is None else tuple(
        np.r_[a, b] for a, b in zip(old, episodes, strict=True))
    if known and known[0].confidence >= confidence:
        return []
    where, services = where_stalled(ctx, *episodes)
    summary = (
        f"{len(spans)} spans ({len(ev_end)} stalls) stretched well beyond their usual time "
        f"({np.median(excess) / 1e6:.1f} ms over their name's median at the median) end on a "
        f"{PERIOD_NS / 1e6:.0f} ms period: their ends share one phase per instance (Rayleigh z "
        f"{z_end:.1f}) while their starts do not (z {z_start:.1f}): a CPU quota running out and "
        f"refilling at each period, on {', '.join(where)}. Their extra time carries {share:.0%} of "
        "the tail excess"
        + ("; no GC pause reported by the runtime." if gc_covered is None else
           f"; the runtime's reported GC pauses cover {gc_covered:.0%} of the tail excess.")
    )
    stats = {
        "services": services,
        "instances": where,
        "period_ms": PERIOD_NS / 1e6,
        "stretched_spans": len(spans),
        "stalls_tested": len(ev_end),
        "stall_end_phase_z": round(float(z_end), 2),
        "stall_start_phase_z": round(float(z_start), 2),
        "throttling_evidence": round(aligned, 3),
        "tail_excess_share": round(share, 3),
        "added_over_median": round(added, 4),
    }
    chart = {"kind": "stall_phase", "phase_ms": ((ev_end % PERIOD_NS) / 1e6).round(2).tolist()[:2000],
             "period_ms": PERIOD_NS / 1e6}
    if known:  # gc_pause's episodes named it more weakly: the stretched spans' figures stand
        fd = known[0]
        fd.confidence = confidence
        fd.evidence = copy.deepcopy(fd.evidence)
        fd.evidence["summary"] = summary + " " + fd.evidence["summary"]
        fd.evidence["stats"].update(stats)
        return []
    return [Finding(PATTERN, confidence, None, None, {"summary": summary, "stats": stats, "chart": chart},
                    ADVICE.format(period=PERIOD_NS / 1e6))]
