"""gc_pause where one piece of work is in flight at a time: the stretches alike across span names
(lone_stalls.py), the calls let in together at a stopped process's door (stopped_accepts.py), the
runtime's reports confirming; else from the reports alone (gc_reports.py).

Where the runtime reports its pauses with their durations and they cover little of the stretches'
tail excess, the process stopped for another reason (CPU starvation or a quota's throttling, a
blocking call holding the interpreter): the timing finding keeps half its confidence plus what the
reports cover, as gc_pause's cross-name finding does. Reports without a duration (a Zipkin
annotation is a time stamp only) neither confirm nor discount it.
"""

from __future__ import annotations

import numpy as np

from tailscope.analysis.diagnosis import cpu_throttling, lone_stalls, stopped_accepts
from tailscope.analysis.diagnosis.gc_reports import reported_only
from tailscope.analysis.diagnosis.long_stalls import (
    request_stall_overlap,
    slow_flags,
    where_stalled,
    young_excess,
)
from tailscope.analysis.diagnosis.model import Context, Finding
from tailscope.analysis.diagnosis.stall_chart import stall_chart
from tailscope.analysis.diagnosis.stats import clamp01, excess_share, logistic

LONE_CAP = 0.95


def finding(ctx: Context, warm: np.ndarray, pattern: str, advice: str) -> list[Finding]:
    """The finding from stretches alike across span names where one piece of work is in flight at a
    time (lone_stalls.py), the runtime's reports confirming; else from the reports alone."""
    found = stopped_accepts.with_releases(ctx, lone_stalls.find(ctx, warm))
    reported = reported_only(ctx, advice)
    if found is None or found["strength"] * found["weight"] < 0.05:
        return reported
    f = ctx.frame
    episodes = found["episodes"]
    # stretches packed into the first third of their instances' lives are a warm-up (an instance
    # started cold: its steps slower by a factor), as for the cross-name episodes
    young = young_excess(ctx, *episodes)
    confidence = LONE_CAP * found["strength"] * found["weight"] * (1 - logistic(young, 0.5, 0.1))
    found["stats"]["early_share"] = round(young, 3)
    event_share, covered_little = None, False
    if len(f.gc_time) and f.gc_dur.max() > 0:
        event_share = excess_share(request_stall_overlap(ctx, *ctx.reported_pauses), ctx.split)
        covered = logistic(event_share, 0.3, 0.08)  # reported pauses that miss the stops: not GC's
        covered_little = covered < 0.5
        confidence = max([confidence * (0.5 + 0.5 * covered)] + [fd.confidence for fd in reported])
    if confidence >= 0.3:  # other detectors discount time frozen in these pauses
        ctx.notes["gc_episodes"] = episodes
    where, services = where_stalled(ctx, *episodes)
    stats = {"services": services, "instances": where, **found["stats"], "gc_events": len(f.gc_time),
             "tail_excess_share_in_reported_gc": None if event_share is None else round(event_share, 3)}
    summary = (
        lone_stalls.describe(where, stats) + stopped_accepts.describe(stats)
        + f" The stops and the work that waited behind them carry {stats['tail_excess_share']:.0%} of the "
        "tail excess" + ("." if event_share is None else
                         f"; the runtime reported GC pauses covering {event_share:.0%} of it.")
        + (" A runtime that reports its pauses yet stops outside them stops for another reason (a CPU "
           "quota or a starved CPU): GC is not the favoured reading." if covered_little else "")
    )
    spans = np.nonzero(f.leaf & (f.request >= 0))[0]
    slow = slow_flags(ctx, f.name[spans], f.dur[spans], len(f.names))
    evidence = {"summary": summary, "stats": stats, "chart": stall_chart(ctx, spans, slow, *episodes)}
    finding = Finding(pattern, clamp01(confidence), None, None, evidence, advice)
    return cpu_throttling.split(ctx, finding, episodes, event_share)
