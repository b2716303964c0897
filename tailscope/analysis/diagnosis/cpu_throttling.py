"""cpu_throttling: process-wide stalls from a CPU quota, told apart from GC pauses.

Mechanism. A container with a CPU limit gets a quota of CPU time per scheduling period (cgroup CFS,
100 ms by default). Once its threads have used the quota, every thread is descheduled until the next
period starts: the process freezes like a stop-the-world GC, but the freeze *ends on a period
boundary*, whenever it began. So, for the stalls gc_pause finds by timing (stretches in which the
process finished no work), on each instance:

- the moments work resumes (the end of each quiet stretch) line up on one phase modulo the period,
  while the moments the stalls begin do not (the quota runs out whenever the work used it up); a GC
  pause starts when allocation triggers it and ends when the collection is done, so neither its
  start nor its end keeps a phase (a timer-driven collection keeps its start's);
- the runtime reports no GC pauses covering the stalls (GC events present and covering them favour
  gc_pause).

Statistic: per instance the Rayleigh statistic Z = n R^2 of the stall ends' phase modulo 100 ms (R:
the mean resultant length); summed over instances it is ~k under no alignment (k instances, each Z
exponential with mean 1), so z = (sum Z - k) / sqrt(k). The same for the stall starts; throttling
needs the ends aligned (z >= 4 or so) and more aligned than the starts (a timer-driven collection of
fixed length aligns both; where the runtime reports its pauses with durations and they miss the
stalls, that reading is gone and aligned starts, a quota used up at the same point of each busy
period, no longer count against it; the stalls' timing confidence before those reports discounted it
carries over to cpu_throttling). `split` turns gc_pause's
timing finding into the pattern the evidence favours: cpu_throttling at (timing confidence x
alignment strength), gc_pause at the rest; without GC events and without aligned ends the stalls
stay gc_pause, saying that a quota was considered and why it is unlikely.

The Rayleigh test reads a 10-20 ms spread as aligned: at a sustained peak the quota runs out at about
the same point of each busy period, so the starts keep a loose phase too and the end-vs-start order
fails, though the ends sit within a millisecond of the boundary. So, beside it, the *tightness* of the
phases: per instance, the pairs of quiet stretches (>= 5 ms, not only the long ones) whose ends fall
within WINDOW_NS of each other modulo the period, against chance (2 x WINDOW_NS / period) as z, and the
share of such pairs among the ends vs among the starts (work resumes at the refill; the quota runs out
wherever the demand used it up; a timer-driven collection of fixed length has both tight).
tightness = logistic(z, 5, 1) x logistic(share_end - share_start, 0.25, 0.06). Where it decides, the
stops whose end has a neighbour within the window weigh the finding by what they cost (their share of
the tail excess, or what they add to the mean request over the median latency, as quota_stalls'):
the period is surer evidence of a stop than co-slowness, whose weaker strength no longer caps it.
"""

from __future__ import annotations

import copy

import numpy as np

from tailscope.analysis.diagnosis.long_stalls import quiet_stretches, request_stall_overlap
from tailscope.analysis.diagnosis.model import Context, Finding
from tailscope.analysis.diagnosis.stats import clamp01, excess_share, logistic, material_weight

PATTERN = "cpu_throttling"
PERIOD_NS = 100_000_000  # the CFS period Kubernetes and Docker use
MIN_STALLS = 8
MIN_QUIET_NS = 5_000_000
WINDOW_NS = 2_000_000  # work resumes within ~1-2 ms of the refill (the first span to end after it)
ADVICE = (
    "The process stalls as a whole and its stalls end on the {period:.0f} ms boundaries of the CPU "
    "quota's scheduling period: it uses its CPU limit up and is throttled until the next period. "
    "Raise or remove the CPU limit (keep the request, drop the limit, or set the quota to the peak "
    "use), size thread pools to the quota (GOMAXPROCS via automaxprocs, torch.set_num_threads, "
    "OMP_NUM_THREADS, JVM -XX:ActiveProcessorCount) so that parallel bursts do not drain it early, and "
    "watch the container's cpu.stat (nr_throttled, throttled_usec). If the runtime reports GC pauses at "
    "these moments instead, treat it as a GC pause: less allocation, a larger heap, a low-pause collector."
)
UNTESTED_HINT = (
    " The runtime reported no GC pauses in this run, and too few long stalls were seen to test whether "
    "they end on a CPU quota's 100 ms boundaries: check both the container's cpu.stat (nr_throttled) "
    "and the runtime's GC logs."
)
GC_HINT = (
    " The runtime reported no GC pauses in this run, and the stalls do not end on 100 ms boundaries as "
    "a CPU quota's do; if the runtime cannot report its GC, check both: the container's cpu.stat "
    "(nr_throttled) for a CPU limit, and the runtime's GC logs."
)


def alignment(ctx: Context, ep_inst, ep_t0, ep_t1) -> dict | None:
    """Phase statistics of the stalls' ends and starts modulo the period (None: too few stalls): the
    Rayleigh z of the long ones (`end_phase_z`, absent where too few are long) and the tightness of all
    quiet stretches >= MIN_QUIET_NS (`tightness`, see the module docstring)."""
    if len(ep_inst) < MIN_STALLS:
        return None
    length, end = quiet_stretches(ctx, ep_inst, ep_t0, ep_t1)
    some = length >= MIN_QUIET_NS
    if some.sum() < MIN_STALLS:
        return None
    out = period_tightness(ep_inst[some], end[some], (end - length)[some])
    near = out.pop("resumed_together")
    out["stops"] = (ep_inst[some][near], (end - length)[some][near], end[some][near])
    median = float(np.median(ctx.frame.requests.latency))
    least = max(MIN_QUIET_NS, 0.5 * median)
    keep = length >= least  # only these are surely stops for the Rayleigh test
    out["stall_ms_median"] = float(np.median(length[some])) / 1e6
    out["phases_ms"] = ((end[some] % PERIOD_NS) / 1e6).round(2).tolist()[:2000]
    out["stalls"] = int(some.sum())
    if keep.sum() < MIN_STALLS:
        return out
    inst, end, start = ep_inst[keep], end[keep], end[keep] - length[keep]
    z_end = z_start = 0.0
    groups = 0
    for i in np.unique(inst):
        sel = inst == i
        if sel.sum() < 3:
            continue
        groups += 1
        z_end += _rayleigh(end[sel])
        z_start += _rayleigh(start[sel])
    if groups == 0:
        return out
    out.update({
        "long_stalls": int(keep.sum()),
        "end_phase_z": (z_end - groups) / np.sqrt(groups),
        "start_phase_z": (z_start - groups) / np.sqrt(groups),
        "long_stall_ms_median": float(np.median(length[keep])) / 1e6,
    })
    return out


def coincidences(inst: np.ndarray, t: np.ndarray) -> tuple[int, int, np.ndarray]:
    """(pairs of events on one instance whose phases modulo the period lie within WINDOW_NS of each
    other, all pairs on instances with >= 3 events, per event whether it has such a neighbour)."""
    close = pairs = 0
    near = np.zeros(len(t), bool)
    for i in np.unique(inst):
        idx = np.nonzero(inst == i)[0]
        if len(idx) < 3:
            continue
        order = np.argsort(t[idx] % PERIOD_NS, kind="stable")
        ph = (t[idx] % PERIOD_NS)[order]
        ring = np.r_[ph, ph + PERIOD_NS]  # circular: a pair across the wrap is counted from its later one
        ahead = np.searchsorted(ring, ph + WINDOW_NS, side="right") - np.arange(1, len(ph) + 1)
        behind = np.arange(len(ph)) - np.searchsorted(ph, ph - WINDOW_NS, side="left")
        behind += np.searchsorted(ph, ph + PERIOD_NS - WINDOW_NS, side="left") < len(ph)  # wrap
        close += int(ahead.sum())
        pairs += len(ph) * (len(ph) - 1) // 2
        near[idx[order]] = (ahead > 0) | (behind > 0)
    return close, pairs, near


def period_tightness(inst: np.ndarray, end: np.ndarray, start: np.ndarray) -> dict:
    """How much tighter the ends' phases sit than chance and than the starts' (module docstring)."""
    close_end, pairs, near = coincidences(inst, end)
    close_start = coincidences(inst, start)[0]
    chance = 2 * WINDOW_NS / PERIOD_NS
    z = (close_end - pairs * chance) / np.sqrt(pairs * chance + 1.0)
    share_end, share_start = close_end / max(pairs, 1), close_start / max(pairs, 1)
    tight = logistic(z, 5.0, 1.0) * logistic(share_end - share_start, 0.25, 0.06) if pairs else 0.0
    return {"tightness": float(tight), "tight_z": float(z), "close_end_share": share_end,
            "close_start_share": share_start, "resumed_together": near}


def _rayleigh(t: np.ndarray) -> float:
    angle = 2 * np.pi * (t % PERIOD_NS) / PERIOD_NS
    r = np.hypot(np.cos(angle).mean(), np.sin(angle).mean())
    return float(len(t) * r * r)


def split(ctx: Context, finding: Finding, episodes: tuple, gc_covered: float | None) -> list[Finding]:
    """gc_pause's timing finding as the pattern the evidence favours (see the module docstring).
    `gc_covered`: how much of the tail excess the runtime's reported GC pauses cover (None: none
    reported). The findings are left in `ctx.notes["stall_findings"]` (quota_stalls reads them)."""
    out = _split(ctx, finding, episodes, gc_covered)
    ctx.notes["stall_findings"] = out
    return out


def _split(ctx: Context, finding: Finding, episodes: tuple, gc_covered: float | None) -> list[Finding]:
    phase = alignment(ctx, *episodes)
    stats = finding.evidence["stats"]
    if phase is None:
        if gc_covered is None:
            finding.evidence["summary"] += UNTESTED_HINT
        return [finding]
    missed = gc_covered is not None and ctx.frame.gc_dur.max(initial=0) > 0
    aligned, tight = 0.0, phase["tightness"]
    if missed:  # reported pauses (with durations) that miss the stalls: no periodic GC of fixed length
        tight = max(tight, logistic(phase["tight_z"], 5.0, 1.0) * (1 - logistic(gc_covered, 0.1, 0.03)))
    if "end_phase_z" in phase:
        order = logistic(phase["end_phase_z"] - phase["start_phase_z"], 3.0, 1.0)
        if missed:
            order = max(order, 1 - logistic(gc_covered, 0.1, 0.03))  # left to explain aligned starts
        aligned = logistic(phase["end_phase_z"], 4.0, 1.0) * order
    by_tightness = tight > aligned
    aligned = max(aligned, tight)
    if gc_covered is not None:  # the runtime reported pauses: they speak for GC as far as they cover
        aligned *= 1 - logistic(gc_covered, 0.3, 0.08)
    numbers = {
        "period_ms": PERIOD_NS / 1e6,
        "stalls_tested": phase["stalls"],
        "stall_ends_within_2ms_share": round(float(phase["close_end_share"]), 3),
        "stall_starts_within_2ms_share": round(float(phase["close_start_share"]), 3),
        "stall_end_tightness_z": round(float(phase["tight_z"]), 2),
        "throttling_evidence": round(aligned, 3),
    }
    if "end_phase_z" in phase:
        numbers["stall_end_phase_z"] = round(float(phase["end_phase_z"]), 2)
        numbers["stall_start_phase_z"] = round(float(phase["start_phase_z"]), 2)
    stats.update(numbers)
    if aligned < 0.2:
        if gc_covered is None:
            finding.evidence["summary"] += GC_HINT
        return [finding]
    throttled = copy.deepcopy(finding)
    throttled.pattern = PATTERN
    # the stalls' timing before reports that miss them discounted it (they discount GC, not a quota)
    base = max(finding.confidence, stats.get("timing_confidence", 0.0)) if missed else finding.confidence
    if by_tightness:  # the period shows the stops surely: what they cost weighs them
        base = max(base, _cost(ctx, phase))
        throttled.evidence["stats"]["resumed_together_tail_excess_share"] = round(phase["stop_share"], 3)
        throttled.evidence["stats"]["resumed_together_added_over_median"] = round(phase["stop_added"], 4)
    throttled.confidence = clamp01(base * aligned)
    if "end_phase_z" in phase and not by_tightness:
        how = (f"the moments work resumes share one phase per instance (Rayleigh z "
               f"{phase['end_phase_z']:.1f}) while the moments they begin do not "
               f"(z {phase['start_phase_z']:.1f})")
    else:
        how = (f"{phase['close_end_share']:.0%} of the pairs of stalls on one instance resume within "
               f"{WINDOW_NS / 1e6:.0f} ms of the same phase (z {phase['tight_z']:.1f} over chance) vs "
               f"{phase['close_start_share']:.0%} of the pairs of their starts")
    throttled.evidence["summary"] = (
        f"The stalls end on a {PERIOD_NS / 1e6:.0f} ms period: over {phase['stalls']} stalls (median "
        f"{phase['stall_ms_median']:.0f} ms) {how}: a CPU quota running out and refilling at each period, "
        + ("with no GC pause reported by the runtime. " if gc_covered is None else
           f"the reported GC pauses covering {gc_covered:.0%} of the tail excess. ")
        + finding.evidence["summary"]
    )
    throttled.evidence["chart"] = {
        "kind": "stall_phase",
        "phase_ms": phase["phases_ms"],
        "period_ms": PERIOD_NS / 1e6,
    }
    throttled.advice = ADVICE.format(period=PERIOD_NS / 1e6)
    finding.confidence = clamp01(finding.confidence * (1 - aligned))
    finding.evidence["summary"] += (
        f" The stalls end on {PERIOD_NS / 1e6:.0f} ms boundaries (see cpu_throttling), which a GC pause "
        "does not explain."
    )
    return [throttled, finding]


def _cost(ctx: Context, phase: dict) -> float:
    """The weight of the stops that resumed together (their share of the tail excess, or what they add
    to the mean request over the median latency beside a heavier cause)."""
    inst, t0, t1 = phase["stops"]
    phase["stop_share"] = phase["stop_added"] = 0.0
    if not len(inst):
        return 0.0
    per_request = request_stall_overlap(ctx, inst, t0, t1)
    share = clamp01(excess_share(per_request, ctx.split))
    added = float(per_request.mean() / max(np.median(ctx.frame.requests.latency), 1.0))
    phase["stop_share"], phase["stop_added"] = share, added
    return max(0.95 * material_weight(share), 0.9 * logistic(added, 0.03, 0.01))
