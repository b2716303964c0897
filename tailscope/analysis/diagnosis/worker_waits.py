"""Stalls in which the process's running work went on: its workers were all held, so new work waited to
start (queueing), not a stop of every thread (gc_pause).

A stop-the-world pause (a collector's, a CPU quota's) stops every thread of the process at once: the
work a thread was running when the pause began cannot end before the pause does, so each in-process
span in progress at that moment is stretched across the whole pause. How many such spans a pause
catches is, for each span name, about its usual concurrency (Little's law: spans per ns times their
median duration). Work that waits for a worker is different: a managed thread pool whose threads are
all blocked (sync-over-async: every thread waits in `.Result` for a completion that needs a thread of
its own, and the pool injects one now and then) or an event loop held by one callback starts nothing
for a while, yet what was already running on a thread ran to its end; the silence holds waits (calls
whose reply sits unread, requests not started, a lock handed to a waiter that has no thread), never a
span of CPU work stretched across it.

So for the silent stretches gc_pause found: per in-process leaf span name (no children, not a call),
the spans observed across a stretch (started before its middle, ended at or after its end) against
those expected from the name's concurrency on that instance. A name expected across at least
MIN_EXPECTED stretches in all and seen across at most FREE_SHARE of that number ran through them: its
work is not held by the stops. An instance on which such a name runs and was never held is one whose
stretches are waits for a worker: they are left out of gc_pause and named queueing here.
"""

from __future__ import annotations

import itertools

import numpy as np

from tailscope.analysis.diagnosis.frame import SPAN_KINDS
from tailscope.analysis.diagnosis.model import Context, Finding
from tailscope.analysis.diagnosis.stats import clamp01, excess_share, logistic

PATTERN = "queueing"
MECHANISM = "work waiting for a held worker"
MIN_SPANS = 20  # spans of a name on an instance for its concurrency to be read
MIN_EXPECTED = 3.0  # stretches a name is expected across, over the instances: P(none | a stop) < 5 %
FREE_SHARE = 0.15  # seen across at most this share of the expected: the name's work ran through
MIN_ON_INSTANCE = 0.3  # an instance's part of the expectation for its own verdict
ADVICE = (
    "Requests wait for a worker to start their work: the process's threads (or its event loop) are all "
    "held while running work goes on, so it is not a pause of the runtime. Find what holds them: a "
    "blocking wait on asynchronous work (`.Result`, `.Wait()`, a synchronous client inside an async "
    "handler) or a long callback on the loop. Make the call asynchronous end to end (or move it to a "
    "thread of its own), raise the pool's minimum threads for bursts, and watch the pool's queue length "
    "and thread injections."
)


def _expected_and_seen(ctx: Context, ep_inst, ep_t0, ep_t1) -> dict[tuple[int, int], tuple[float, int]]:
    """Per (instance, span name) of in-process leaf work: (expected, seen) spans across the stretches."""
    f = ctx.frame
    work = np.isin(f.kind, (SPAN_KINDS.index("Unspecified"), SPAN_KINDS.index("Internal")))
    work &= f.leaf & (f.request >= 0) & np.isin(f.instance, np.unique(ep_inst))
    spans = np.nonzero(work)[0]
    out: dict[tuple[int, int], tuple[float, int]] = {}
    if len(spans) == 0:
        return out
    order = np.lexsort((f.start[spans], f.name[spans], f.instance[spans]))
    spans = spans[order]
    key = f.instance[spans].astype(np.int64) * len(f.names) + f.name[spans]
    cuts = np.r_[0, np.nonzero(np.diff(key))[0] + 1, len(spans)]
    mid = ep_t0 + (ep_t1 - ep_t0) // 2
    lives: dict[int, float] = {}  # per instance, once (a pass over every span per group was most of it)
    for a, b in itertools.pairwise(cuts.tolist()):
        if b - a < MIN_SPANS:
            continue
        group = spans[a:b]
        inst = int(f.instance[group[0]])
        here = ep_inst == inst
        if inst not in lives:
            on = f.instance == inst
            lives[inst] = float(f.end[on].max() - f.start[on].min())
        concurrency = len(group) * float(np.median(f.dur[group])) / max(lives[inst], 1.0)
        start, end = f.start[group], f.end[group]
        longest = int(f.dur[group].max())
        m, t1 = mid[here], ep_t1[here]  # each stretch's spans begun within `longest` before its middle
        lo = np.searchsorted(start, m - longest).tolist()
        hi = np.searchsorted(start, m, side="right").tolist()
        seen = sum(int((end[i:j] >= t).sum()) for i, j, t in zip(lo, hi, t1.tolist(), strict=True))
        out[(inst, int(f.name[group[0]]))] = (concurrency * int(here.sum()), seen)
    return out


def ran_through(ctx: Context, ep_inst, ep_t0, ep_t1) -> tuple[np.ndarray, dict]:
    """Per stretch: whether its instance's running work went on through the stretches (see the module
    docstring), and the names that tell so, as {name: (expected, seen)}."""
    pairs = _expected_and_seen(ctx, ep_inst, ep_t0, ep_t1)
    names: dict[int, list[float]] = {}
    for (_, n), (e, s) in pairs.items():
        tot = names.setdefault(n, [0.0, 0])
        tot[0] += e
        tot[1] += s
    free = {n for n, (e, s) in names.items() if e >= MIN_EXPECTED and s <= FREE_SHARE * e}
    mine = {(i, n): v for (i, n), v in pairs.items() if n in free}
    insts = {i for (i, _), (e, s) in mine.items() if e >= MIN_ON_INSTANCE and s <= FREE_SHARE * e}
    held = {i for (i, _), (e, s) in mine.items() if s > FREE_SHARE * e}
    mask = np.isin(ep_inst, sorted(insts - held))
    told = {ctx.frame.names[n]: (round(names[n][0], 2), int(names[n][1])) for n in free}
    return mask, told


def finding(ctx: Context, ep_inst, ep_t0, ep_t1, strength: float, told: dict) -> Finding | None:
    """queueing for the stretches in which running work went on while requests waited: weighed by
    their share of the tail excess and how far the co-slowness sits above chance (gc_pause's
    strength), and how surely the running work was not held (the chance a stop would have caught none
    of the expected spans)."""
    from tailscope.analysis.diagnosis.long_stalls import request_stall_overlap, where_stalled

    if not len(ep_inst):
        return None
    overlap = request_stall_overlap(ctx, ep_inst, ep_t0, ep_t1)
    impact = excess_share(overlap, ctx.split)
    expected = max(e for e, _ in told.values())
    sure = 1.0 - float(np.exp(-expected))
    confidence = min(0.9, strength * logistic(impact, 0.25, 0.08) * sure)
    where, services = where_stalled(ctx, ep_inst, ep_t0, ep_t1)
    stall_ms = float(np.median(ep_t1 - ep_t0)) / 1e6
    names = ", ".join(f"'{n}' across {s} of {e:.1f} expected" for n, (e, s) in told.items())
    summary = (
        f"{len(ep_inst)} stretches (median {stall_ms:.1f} ms) in which a process ({', '.join(where)}) ended "
        f"nothing while requests waited, carrying {impact:.0%} of the tail excess; yet the work it was "
        f"running went on through them ({names}): a stop of every thread would have stretched that work "
        "across the stretch. Its workers were held (blocked waits, a held loop) and new work waited to "
        "start."
    )
    stats = {
        "mechanism": MECHANISM,
        "services": services,
        "instances": where,
        "episodes": len(ep_inst),
        "median_stall_ms": round(stall_ms, 3),
        "tail_excess_share": round(impact, 3),
        "running_work_across_stalls": {n: {"expected": e, "seen": s} for n, (e, s) in told.items()},
        "stall_strength": round(strength, 3),
    }
    return Finding(PATTERN, clamp01(confidence), "queue", None, {"summary": summary, "stats": stats}, ADVICE)

