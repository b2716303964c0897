"""gc_pause: unrelated in-flight requests on one instance stretched at the same instant.

Statistic. Per instance, time is cut into short bins. A leaf span is *slow* when it is above the 90th
percentile of its span name (and 1.5x its median). The longest stretch of each request root that no
child covers counts as a leaf of its own (named after the root): a request waiting in a queue that has
no span (a batcher awaited inside the handler) is in flight too, and a pause stretches that wait.
For every bin we count D = the number of distinct span names that have a slow span covering the bin.
A stop-the-world pause stretches whatever is in flight, whatever its stage, so during pauses several
different names are slow in the same bins. The null hypothesis ("each name is slow on its own
schedule") is built by circularly shifting every (instance, name) slow-indicator series by a random
offset, which keeps each name's own clustering (lock convoys, expiry storms, queue build-ups are one
name each) but breaks cross-name alignment. Stall bins are bins with D >= 2 that hold at least 60 % of
the active names; the finding's strength is how far the observed count of stall bins sits above the
shifted counts (z score, ratio), and its weight is how many tail requests overlap a stall episode. A
rise in arrivals during stalls (a burst) and stalls packed at the start (warm-up) discount it. Stall
episodes longer than the median request in which the process finished no work weigh most (a paused
process finishes nothing; a queue draining while the model keeps stepping does); where none is that
long, the timing finding is discounted. GC events confirm. A concurrent collector's marks, which slow
the work without stopping it, are gc_assists.py's; an interpreter lock's turns, interpreter_lock.py's.

Reported pauses alone. With about one request in flight a pause stretches one span at a time and
nothing aligns; where the runtime reports its pauses (span events such as `python.gc` with a
duration), their share of the tail excess stands on its own, capped at 0.9 (gc_reports.py).
"""

from __future__ import annotations

import numpy as np

from tailscope.analysis.diagnosis import (
    cpu_throttling,
    gc_assists,
    lone_pauses,
    loop_blocks,
    stopped_accepts,
    worker_waits,
)
from tailscope.analysis.diagnosis.frame import root_waits
from tailscope.analysis.diagnosis.gc_reports import REPORTED_CAP, reported_weight
from tailscope.analysis.diagnosis.interpreter_lock import split as lock_turns
from tailscope.analysis.diagnosis.long_stalls import (
    credible_silences,
    long_stalls,
    reply_reads,
    request_stall_overlap,
    silent_stretches,
    slow_flags,
    stall_overlap,
    waiting_stops,
    warm_up_mask,
    where_stalled,
    young_excess,
)
from tailscope.analysis.diagnosis.model import Context, Finding
from tailscope.analysis.diagnosis.size_explained import size_explained
from tailscope.analysis.diagnosis.stall_chart import stall_chart
from tailscope.analysis.diagnosis.stats import clamp01, excess_share, logistic, material_weight, ms

PATTERN = "gc_pause"
ADVICE = (
    "Stop-the-world pauses in the serving process stall every in-flight request at once; more GPU will "
    "not help. Shrink the heap churn (reuse buffers, avoid per-request object graphs), call gc.freeze() "
    "after warm-up so long-lived objects leave the collector's generations, raise the GC thresholds "
    "(gc.set_threshold) or collect explicitly between batches; on the JVM/Go size the heap and pick a "
    "low-pause collector. Watch pause time per minute as a runtime metric."
)
MAX_NAMES = 24
MAX_CELLS = 12_000_000
SHIFTS = 48
MIN_BIN_NS = 1_000_000
ALWAYS_SLOW = 0.25  # share of an instance's busy bins in which a call is slow: slow on its own
WINDOW_NS = 1_000_000_000  # a burst lasts seconds; co-slowness alone picks busy 10 ms windows


def detect(ctx: Context) -> list[Finding]:
    """The stops (below), or the slowdown where a concurrent collector's marks slow the work without
    stopping it (gc_assists.py), and a step that held its process (loop_blocks.py)."""
    found, assist = lock_turns(ctx, _stops(ctx)), gc_assists.finding(ctx, warm_up_mask(ctx))
    if assist is not None and assist.confidence > max((x.confidence for x in found), default=0.0):
        found = [x for x in found if x.pattern != PATTERN] + [assist]
    blocks = loop_blocks.find(ctx)
    if blocks is not None and blocks["finding"].confidence >= 0.5:
        loop_blocks.cap_stops_held(ctx, found, blocks, PATTERN)
        old = ctx.notes.get("gc_episodes", blocks["episodes"])
        ctx.notes["gc_episodes"] = tuple(np.r_[a, b] for a, b in zip(old, blocks["episodes"], strict=True))
        found.append(blocks["finding"])
    return found


def _stops(ctx: Context) -> list[Finding]:
    f = ctx.frame
    reqs = f.requests
    if len(reqs) < 50:
        return []
    # warm-up requests (each instance's first 3K, see cold_start) are slow for another reason: left out
    warm = warm_up_mask(ctx)
    inside = f.request >= 0
    inside[inside] = ~warm[f.request[inside]]
    spans = np.nonzero(f.leaf & inside)[0]
    if len(spans) < 100:
        return []
    # in flight: leaves, and stretches no child covers (own work, a wait with no span), named after their span
    owner, seg_s, seg_e = root_waits(f, inside)
    if "reply_reads" not in ctx.notes:  # shared with quota_stalls
        ctx.notes["reply_reads"] = reply_reads(f, f.request >= 0)
    calls, call_s, call_e = ctx.notes["reply_reads"]
    mine = inside[calls]  # a caller's waits for its callees' replies, outside the warm-up
    calls, call_s, call_e = calls[mine], call_s[mine], call_e[mine]
    owner, seg_s, seg_e = np.r_[owner, calls], np.r_[seg_s, call_s], np.r_[seg_e, call_e]
    n_codes = 2 * len(f.names)
    nm = np.r_[f.name[spans], len(f.names) + f.name[owner]]
    t_s, t_e = np.r_[f.start[spans], seg_s], np.r_[f.end[spans], seg_e]
    inst = np.r_[f.instance[spans], f.instance[owner]]
    # keep the most frequent names (bounded memory); others do not take part
    counts = np.bincount(nm, minlength=n_codes)
    top = np.argsort(-counts)[:MAX_NAMES]
    top = top[counts[top] >= 20]
    if len(top) < 2:
        return []
    name_slot = np.full(n_codes, -1)
    name_slot[top] = np.arange(len(top))
    keep = name_slot[nm] >= 0
    nm, t_s, t_e, inst = nm[keep], t_s[keep], t_e[keep], inst[keep]
    slow = slow_flags(ctx, nm, t_e - t_s, n_codes)
    chart_spans = spans[keep[: len(spans)]]  # the leaves come first in the arrays above
    slow[: len(chart_spans)] &= ~size_explained(ctx, chart_spans, slow[: len(chart_spans)])  # not stretched

    run_len = int(f.end.max())
    n_inst = int(f.instance.max()) + 1
    n_names = len(top)
    width = max(MIN_BIN_NS, int(np.ceil((run_len + 1) * n_inst * n_names / MAX_CELLS)))
    n_bins = run_len // width + 2

    slot = name_slot[nm]
    b0 = t_s // width
    b1 = t_e // width
    row = (inst * n_names + slot) * n_bins
    size = n_inst * n_names * n_bins + 1

    def coverage(mask: np.ndarray) -> np.ndarray:
        diff = np.bincount((row + b0)[mask], minlength=size)
        ends = np.bincount((row + b1 + 1)[mask])
        diff[: len(ends)] -= ends  # in place: these arrays have a cell per (instance, name, bin)
        return (np.cumsum(diff, out=diff)[:-1] > 0).reshape(n_inst, n_names, n_bins)

    active = coverage(np.ones(len(nm), bool))
    slow_cov = coverage(slow)
    # a call to another service slow in flight most of the time (a heavy-tailed dependency whose slow
    # spans last hundreds of ms) is slow whatever this process does: it cannot mark a stall, and in the
    # shifted null its long slow stretches pair with any other name's. It takes no part in the test
    live = np.maximum(active.any(axis=1).sum(axis=1), 1)[:, None]
    is_call = np.isin(top, ctx.client_names)[None, :]
    always_slow = (slow_cov.sum(axis=2) > ALWAYS_SLOW * live) & is_call
    if always_slow.any():
        active[always_slow] = False
        slow_cov[always_slow] = False
    a_count = active.sum(axis=1, dtype=np.int16)  # (inst, bins)
    a_need = np.maximum(2, np.ceil(0.6 * a_count)).astype(np.int16)

    observed = slow_cov.sum(axis=1, dtype=np.int16) >= a_need
    obs = int(observed.sum())
    null = shifted_null(slow_cov, a_need, ctx.rng)
    null_mean = float(np.mean(null))
    null_sd = float(np.std(null)) + 1.0
    z = (obs - null_mean) / null_sd
    ratio = obs / max(null_mean, 1.0)
    if obs < 3 or z < 2:  # nothing lines up across names: one piece of work in flight at a time?
        return _lone(ctx, warm)

    # stall episodes: runs of bins in which every active name is slow ("frozen") holding a stall bin
    d_count = slow_cov.sum(axis=1, dtype=np.int16)
    frozen = observed | ((d_count == a_count) & (a_count >= 1))
    fz = frozen.reshape(-1)
    run_id = np.cumsum(np.r_[True, fz[1:] != fz[:-1]]) - 1
    run_has_stall = np.bincount(run_id, weights=observed.reshape(-1), minlength=run_id[-1] + 1) > 0
    flat = fz & run_has_stall[run_id]
    # runs must not join across instances
    flat = flat.reshape(n_inst, n_bins)
    flat[:, -1] = False
    flat = flat.reshape(-1)
    edges = np.diff(np.r_[0, flat.astype(np.int8), 0])
    ep_start = np.nonzero(edges == 1)[0]
    ep_end = np.nonzero(edges == -1)[0]  # exclusive
    ep_inst = ep_start // n_bins
    ep_t0 = (ep_start % n_bins) * width
    ep_t1 = (ep_end - ep_inst * n_bins) * width
    # a pause is as long as its process stayed silent: where it kept ending spans through an episode
    # (requests slowed together in a queue), only its silences can be pauses
    drawn = (ep_inst, ep_t0, ep_t1)  # the chart shades the co-slow stretches the timing found
    ep_t0, ep_t1 = silent_stretches(ctx, ep_inst, ep_t0, ep_t1)
    # ... and a silence is a stop only where requests kept coming (an idle process is silent too)
    stopped = credible_silences(ctx, ep_inst, ep_t0, ep_t1)
    ep_inst, ep_t0, ep_t1, stopped = (x[stopped > 0] for x in (ep_inst, ep_t0, ep_t1, stopped))
    # with the stops that kept requests waiting where fewer names were slow at once
    w_inst, w_t0, w_t1 = waiting_stops(ctx, float(np.median(reqs.latency)))
    new = stall_overlap(w_inst, w_t0, w_t1, ep_inst, ep_t0, ep_t1) == 0
    order = np.lexsort((np.r_[ep_t0, w_t0[new]], np.r_[ep_inst, w_inst[new]]))
    pairs = ((ep_inst, w_inst), (ep_t0, w_t0), (ep_t1, w_t1))
    ep_inst, ep_t0, ep_t1 = (np.r_[a, b[new]][order] for a, b in pairs)
    stopped = np.r_[stopped, np.full(int(new.sum()), 2, np.int8)][order]
    # a silence filled by work as long as its input predicts is that work's (a long parse), not a stop
    kept = ~stopped_accepts.held_by_input(ctx, ep_inst, ep_t0, ep_t1)
    ep_inst, ep_t0, ep_t1, stopped = ep_inst[kept], ep_t0[kept], ep_t1[kept], stopped[kept]
    # stretches through which the running work went on: held workers, not a stop (worker_waits.py)
    ran, told = worker_waits.ran_through(ctx, ep_inst, ep_t0, ep_t1)
    long_wait = (stopped[ran] == 2) & (ep_t1[ran] - ep_t0[ran] > np.median(reqs.latency))  # as kept_waiting
    co_slow = max(logistic(z, 3.0, 1.0) * logistic(ratio, 2.0, 0.2), logistic(int(long_wait.sum()), 2.0, 0.7))
    waits = [w for w in [worker_waits.finding(ctx, ep_inst[ran], ep_t0[ran], ep_t1[ran], co_slow, told)] if w]
    ep_inst, ep_t0, ep_t1, stopped = ep_inst[~ran], ep_t0[~ran], ep_t1[~ran], stopped[~ran]
    if not len(ep_inst):  # every co-slow stretch a wait for a worker: no stop to read, alone or not
        return waits if ran.any() else _lone(ctx, warm)
    # silences longer than a request through which requests sent to the process waited: a stop
    kept_waiting = int(((stopped == 2) & (ep_t1 - ep_t0 > np.median(reqs.latency))).sum())
    episodes = len(ep_inst)
    pause_ms = float(np.median(ep_t1 - ep_t0)) / 1e6

    # how much stall time each request sat through (on its own instance)
    overlap = request_stall_overlap(ctx, ep_inst, ep_t0, ep_t1)
    hit = overlap > 0
    split = ctx.split
    tail_hit = float(hit[split.tail].mean()) if split.tail.any() else 0.0
    all_hit = float(hit.mean())
    impact = excess_share(overlap, split)

    # bursts: arrivals per bin inside stall episodes vs overall, on the same instances
    arr_bin = (reqs.instance * n_bins + np.clip(reqs.arrival, 0, None) // width).astype(np.int64)
    arrivals = np.bincount(arr_bin, minlength=n_inst * n_bins).reshape(n_inst, n_bins)
    half = max(1, int(WINDOW_NS // width) // 2)  # arrivals within +-0.5 s of a stall bin
    csum = np.cumsum(np.pad(observed.astype(np.int32), ((0, 0), (1, 2 * half))), axis=1)
    csum = np.pad(csum, ((0, 0), (half, 0)))  # csum[:, t] = stall bins before t - half
    window = (csum[:, 2 * half + 1 : 2 * half + 1 + n_bins] - csum[:, :n_bins]) > 0
    # on the instances requests arrive at that hold stall bins: a callee's busy bins (no arrivals of
    # its own) would dilute the overall rate
    stalled = observed.any(axis=1) & (np.bincount(reqs.instance, minlength=n_inst) > 0)
    live = (a_count > 0) & stalled[:, None]
    rate_in = float(arrivals[window & live].mean()) if (window & live).any() else 0.0
    rate_all = float(arrivals[live].mean()) if live.any() else 0.0
    arrival_ratio = rate_in / rate_all if rate_all > 0 else 1.0

    # stalls packed into the first tenth of the run look like a warm-up, not recurring pauses
    early = float(((ep_t0 < run_len * 0.1).sum()) / max(episodes, 1))
    early = max(early, young_excess(ctx, ep_inst, ep_t0, ep_t1))  # or in each instance's first requests

    # runtime confirmation
    confirmed = 0
    if len(f.gc_time):
        for i in np.unique(ep_inst):
            g = np.sort(f.gc_time[(f.gc_instance == i) | (f.gc_instance < 0)])
            if len(g) == 0:
                continue
            sel_ep = ep_inst == i
            k = np.searchsorted(g, ep_t1[sel_ep], side="right") - 1
            ok = k >= 0
            confirmed += int((g[k[ok]] >= ep_t0[sel_ep][ok] - 2 * width).sum())

    # effect size first: with many spans even a small coupling between adjacent stages is 'significant'
    strength = logistic(z, 3.0, 1.0) * logistic(ratio, 2.0, 0.2)
    weight = logistic(impact, 0.25, 0.08)
    penalty = (1 - logistic(arrival_ratio, 1.6, 0.15)) * (1 - logistic(early, 0.5, 0.1))
    # stalls longer than the median request (co-slowness from queueing cannot outlast ordinary work)
    # holding most tail requests and most of the tail excess are overwhelming whatever the ratio
    long_share, long_hit, long_added = long_stalls(ctx, ep_inst, ep_t0, ep_t1)
    overwhelming = logistic(z, 3.0, 1.0) * logistic(long_hit, 0.7, 0.06) * logistic(long_share, 0.5, 0.08)
    # a burst keeps work finishing: stalls in which nothing finished for longer than the median request
    # are not discounted for arrivals (a slow dependency's calls raise the arrival ratio near stalls)
    warm = 1 - logistic(early, 0.5, 0.1)
    held = logistic(kept_waiting, 2.0, 0.7)
    frozen = max(strength, held) * material_weight(long_share) * warm
    # beside a heavier cause pauses carry little of the tail excess yet stall many requests: frozen
    # stretches adding a few % of the median latency to the mean request are a cause of their own
    beside = 0.9 * strength * warm * logistic(long_added, 0.03, 0.01)
    confidence = max(
        strength * weight * penalty * (0.6 + 0.4 * logistic(long_share, 0.15, 0.05)),
        overwhelming * penalty,
        frozen,
        beside,
    )
    event_share, timing = None, confidence  # the stalls' timing alone: a quota's stalls keep it
    if len(f.gc_time):
        # confirmation: how much of the tail excess the runtime's own pause reports cover
        ev = request_stall_overlap(ctx, *ctx.reported_pauses)
        event_share = excess_share(ev, split)
        covered = logistic(event_share, 0.3, 0.08)
        confirm = covered * logistic(ratio, 1.5, 0.15) * penalty
        # The runtime reports its pauses, yet they cover little of the stalls: the process stalled for
        # another reason (CPU starvation, a blocking call holding the interpreter), so trust timing less.
        reported = REPORTED_CAP * reported_weight(ctx, ev, event_share)  # see gc_reports
        confidence = max(confidence * (0.5 + 0.5 * covered), confirm, reported)
    if max(strength, overwhelming, held) >= 0.3:  # others discount time frozen in credible pauses
        ctx.notes["gc_episodes"] = (ep_inst, ep_t0, ep_t1)
    where, services = where_stalled(ctx, ep_inst, ep_t0, ep_t1)
    shade = tuple(np.r_[a, b] for a, b in zip(drawn, (ep_inst, ep_t0, ep_t1), strict=True))
    stats = {
        "services": services,
        "instances": where,
        "stall_bins": obs,
        "stall_bins_expected": round(null_mean, 1),
        "z": round(z, 2),
        "ratio": round(ratio, 2),
        "episodes": episodes,
        "long_stalls_that_kept_requests_waiting": kept_waiting,
        "bin_ms": ms(width),
        "median_stall_ms": round(pause_ms, 3),
        "p90_stall_ms": round(float(np.quantile(ep_t1 - ep_t0, 0.9)) / 1e6, 3),
        "longest_stall_ms": round(float((ep_t1 - ep_t0).max()) / 1e6, 3),
        "tail_requests_in_stall": round(tail_hit, 3),
        "tail_excess_share": round(impact, 3),
        "tail_excess_share_in_long_stalls": round(long_share, 3),
        "tail_requests_in_long_stall": round(long_hit, 3),
        "long_stall_added_over_median": round(long_added, 4),
        "all_requests_in_stall": round(all_hit, 3),
        "arrival_ratio_in_stall": round(arrival_ratio, 2),
        "early_share": round(early, 3),
        "gc_events": len(f.gc_time),
        "episodes_confirmed_by_gc_events": confirmed,
        "tail_excess_share_in_reported_gc": None if event_share is None else round(event_share, 3),
        "timing_confidence": round(timing, 3),
    }
    summary = (
        f"{episodes} stall episodes (median {pause_ms:.1f} ms) where spans of several different names on one "
        f"instance ({', '.join(where)}) were slow at once: {obs} stall bins vs {null_mean:.1f} expected "
        f"by chance (z={z:.1f}); "
        f"{tail_hit:.0%} of tail requests overlap a stall vs {all_hit:.0%} of all requests, and stall "
        "time is "
        f"{impact:.0%} of the tail excess; arrivals "
        f"during stalls {arrival_ratio:.2f}x the average (no burst)"
        + (
            f"; stretches in which the process finished nothing for longer than the median request add "
            f"{long_added:.1%} of the median latency to the mean request"
            if long_added >= 0.01
            else ""
        )
        + (
            f"; the runtime reported GC pauses covering {event_share:.0%} of the tail excess"
            if event_share is not None
            else ""
        )
        + "."
    )
    finding = Finding(
        pattern=PATTERN,
        confidence=clamp01(confidence),
        stage=None,
        span_name=None,
        evidence={
            "summary": summary,
            "stats": stats,
            "chart": stall_chart(ctx, chart_spans, slow[: len(chart_spans)], *shade),
        },
        advice=ADVICE,
    )
    # the same stalls from a CPU quota end on its period's boundaries: name what the evidence favours
    found = cpu_throttling.split(ctx, finding, (ep_inst, ep_t0, ep_t1), event_share)
    let_in = stopped_accepts.releases(ctx)
    if finding.confidence < 0.5 and let_in is not None and let_in["strength"] >= 0.5:
        # weak across names, but calls rushed in at the door: a process behind a shared id stopped
        notes = dict(ctx.notes)
        lone = _lone(ctx, warm_up_mask(ctx))  # `warm` is a weight by now
        if max((x.confidence for x in lone), default=0.0) > max(x.confidence for x in found):
            return lone + waits
        ctx.notes.clear()
        ctx.notes.update(notes)
    return found + waits


def _lone(ctx: Context, warm: np.ndarray) -> list[Finding]:
    return lone_pauses.finding(ctx, warm, PATTERN, ADVICE)


def shifted_null(slow_cov: np.ndarray, a_need: np.ndarray, rng: np.random.Generator) -> list[int]:
    """Per shift (SHIFTS of them), the (instance, bin) cells in which >= a_need names are slow once
    each (instance, name) row of `slow_cov` (inst, names, bins) is rotated by its own random number of
    bins. Only rows with a slow bin add anything, and only an instance with two of them can reach a
    need (>= 2): the others are drawn for and left out (the same counts; most rows are never slow)."""
    n_inst, n_names, n_bins = slow_cov.shape
    slow_u8 = slow_cov.view(np.uint8)  # bool as 0/1 bytes: added without a cast
    live = slow_cov.any(axis=2)
    insts = np.nonzero(live.sum(axis=1) >= 2)[0]
    rows = [(int(insts[r]), r, int(j)) for r, j in zip(*np.nonzero(live[insts]), strict=True)]
    acc = np.zeros((len(insts), n_bins), np.uint8)  # at most MAX_NAMES names slow at once
    need = a_need[insts]
    null = []
    for _ in range(SHIFTS):
        acc[:] = 0
        shifts = rng.integers(0, n_bins, size=(n_inst, n_names))
        for i, r, j in rows:
            k = int(shifts[i, j])
            acc[r, k:] += slow_u8[i, j, : n_bins - k]
            acc[r, :k] += slow_u8[i, j, n_bins - k :]
        null.append(int((acc >= need).sum()))
    return null
