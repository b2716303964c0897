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
"""

from __future__ import annotations

import copy

import numpy as np

from tailscope.analysis.diagnosis.long_stalls import quiet_stretches
from tailscope.analysis.diagnosis.model import Context, Finding
from tailscope.analysis.diagnosis.stats import clamp01, logistic

PATTERN = "cpu_throttling"
PERIOD_NS = 100_000_000  # the CFS period Kubernetes and Docker use
MIN_STALLS = 8
MIN_QUIET_NS = 5_000_000
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
    """Phase statistics of the stalls' ends and starts modulo the period (None: too few stalls)."""
    median = float(np.median(ctx.frame.requests.latency))
    least = max(MIN_QUIET_NS, 0.5 * median)
    long = (ep_t1 - ep_t0) >= least  # only these can hold a quiet stretch that long
    if long.sum() < MIN_STALLS:
        return None
    ep_inst, ep_t0, ep_t1 = ep_inst[long], ep_t0[long], ep_t1[long]
    length, end = quiet_stretches(ctx, ep_inst, ep_t0, ep_t1)
    keep = length >= least
    if keep.sum() < MIN_STALLS:
        return None
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
        return None
    return {
        "stalls": int(keep.sum()),
        "end_phase_z": (z_end - groups) / np.sqrt(groups),
        "start_phase_z": (z_start - groups) / np.sqrt(groups),
        "phases_ms": ((end % PERIOD_NS) / 1e6).round(2).tolist()[:2000],
        "stall_ms_median": float(np.median(length[keep])) / 1e6,
    }


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
    order = logistic(phase["end_phase_z"] - phase["start_phase_z"], 3.0, 1.0)
    missed = gc_covered is not None and ctx.frame.gc_dur.max(initial=0) > 0
    if missed:  # reported pauses (with durations) that miss the stalls: no periodic GC of fixed length
        order = max(order, 1 - logistic(gc_covered, 0.1, 0.03))  # left to explain aligned starts
    aligned = logistic(phase["end_phase_z"], 4.0, 1.0) * order
    if gc_covered is not None:  # the runtime reported pauses: they speak for GC as far as they cover
        aligned *= 1 - logistic(gc_covered, 0.3, 0.08)
    numbers = {
        "period_ms": PERIOD_NS / 1e6,
        "stalls_tested": phase["stalls"],
        "stall_end_phase_z": round(float(phase["end_phase_z"]), 2),
        "stall_start_phase_z": round(float(phase["start_phase_z"]), 2),
        "throttling_evidence": round(aligned, 3),
    }
    stats.update(numbers)
    if aligned < 0.2:
        if gc_covered is None:
            finding.evidence["summary"] += GC_HINT
        return [finding]
    throttled = copy.deepcopy(finding)
    throttled.pattern = PATTERN
    # the stalls' timing before reports that miss them discounted it (they discount GC, not a quota)
    base = max(finding.confidence, stats.get("timing_confidence", 0.0)) if missed else finding.confidence
    throttled.confidence = clamp01(base * aligned)
    throttled.evidence["summary"] = (
        f"The stalls end on a {PERIOD_NS / 1e6:.0f} ms period: over {phase['stalls']} stalls (median "
        f"{phase['stall_ms_median']:.0f} ms) the moments work resumes share one phase per instance "
        f"(Rayleigh z {phase['end_phase_z']:.1f}) while the moments they begin do not (z "
        f"{phase['start_phase_z']:.1f}): a CPU quota running out and refilling at each period, "
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
