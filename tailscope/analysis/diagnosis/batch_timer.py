"""queueing at a batcher's timer: batches that close when their oldest request has waited `max_wait`.

Mechanism. A dynamic batcher (an in-process batcher, Triton's or TorchServe's max_queue_delay, a
micro-batching consumer) closes a batch when it is full or when its oldest request has waited a fixed
time. Where the traffic does not fill a batch within that time, every batch closes on the timer: its
first request waits exactly the timer, those that join later a little less, whatever the load. The
wait is a setting, not a backlog: it is longest at low traffic and shrinks as arrivals rise (batches
fill sooner), the opposite of a queue, which waits longer the more arrives. And the batch the timer
lets grow is what the forward then runs, so the model's time per batch follows the timer too, while
the model itself waits for work between batches.

Statistic. Per queue-stage span name (the mapping's, or a batch queue inferred from timing), the spans
of one instance that end together are one batch leaving the queue; its oldest member waited longest.
The timer is the most common oldest wait (within +-2 %, >= 1 ms); a batch *closed on the timer* has its
oldest wait within +-2 % of it (a busy batcher or a full batch closes at other times). Strength =
logistic(batches closed on the timer, 0.35, 0.08) x (1 - logistic(Spearman of the mean wait per time
bin with the arrivals per bin, 0.3, 0.1): a wait that grows with the arrivals is a queue's). Weight:
what the waits in timer-closed batches add to the typical request (their mean over the requests'
median latency: 0.5 at 25 %) x their share of the tail excess (material_weight): a short timer that
every request pays alike is the batcher working as meant, not the tail's cause.

`settle`: compute_bound on the forward pass the batches run, where the timer finding is named (>= 0.5):
a batcher whose batches close on its timer has a model waiting for work, and the forward's long
batches are the ones the timer let grow: that finding is part of this one (0.9 x its confidence, at
most).
"""

from __future__ import annotations

import numpy as np

from tailscope.analysis.diagnosis.model import Context, Finding
from tailscope.analysis.diagnosis.stats import clamp01, excess_share, logistic, material_weight, ms, spearman

PATTERN = "queueing"
MECHANISM = "a batcher's timer (max wait) closes every batch"
MIN_TIMER_NS = 1_000_000
WIDTH = 0.02  # waits within +-2 % of the timer are the timer
BINS = 50
ADVICE = (
    "The batcher closes batches on its timer: {where} waits about {timer:.0f} ms for company before "
    "every batch, whatever the load (the traffic never fills a batch before then). Lower the max wait "
    "(max_queue_delay / max_wait) to a few ms, or size it from the arrival rate and the batch size that "
    "pays (arrivals per second x max wait ~ the batch you want); at this traffic a smaller max batch or "
    "no batching at all may serve faster. More traffic would shorten this wait, not lengthen it."
)


def _feeds(ctx: Context, code: int) -> list[np.ndarray]:
    """The spans of queue name `code`, one set per name of the span they sit in (the model each batcher
    feeds): servers name every model's queue alike (`queue`), and each model's batcher has its own
    timer."""
    f = ctx.frame
    spans = np.nonzero((f.name == code) & (f.request >= 0))[0]
    above = np.where(f.parent[spans] >= 0, f.name[np.maximum(f.parent[spans], 0)], -1)
    return [spans[above == a] for a in np.unique(above).tolist()]


def _groups(ctx: Context, spans: np.ndarray):
    """(per batch: its oldest member's wait, its members' span indices as a group code per span)."""
    f = ctx.frame
    key = np.stack([f.instance[spans], f.end[spans]], axis=1)
    _, group = np.unique(key, axis=0, return_inverse=True)
    group = group.reshape(-1)
    oldest = np.zeros(int(group.max()) + 1 if len(group) else 0)
    np.maximum.at(oldest, group, f.dur[spans].astype(np.float64))
    return spans, group, oldest


def _timer(oldest: np.ndarray) -> tuple[float, float]:
    """(the most common oldest wait within +-WIDTH, the share of batches at it)."""
    w = np.sort(oldest[oldest >= MIN_TIMER_NS])
    if len(w) < 20:
        return 0.0, 0.0
    hi = np.searchsorted(w, w * (1 + WIDTH) / (1 - WIDTH), side="right")
    counts = hi - np.arange(len(w))
    best = int(np.argmax(counts))
    timer = float(np.median(w[best:hi[best]]))
    at = np.abs(oldest - timer) <= WIDTH * timer
    return timer, float(at.mean())


def detect(ctx: Context) -> list[Finding]:
    f = ctx.frame
    reqs = f.requests
    if len(reqs) < 100:
        return []
    queue = ctx.span_stage_mask("queue") & (f.request >= 0)
    best = None
    for code in np.unique(f.name[queue]).tolist():
        for fed in _feeds(ctx, code):
            if len(fed) < 50:
                continue
            spans, group, oldest = _groups(ctx, fed)
            timer, closed = _timer(oldest)
            if timer <= 0.0:
                continue
            found = _judge(ctx, code, timer, closed, spans, group, oldest)
            if best is None or found.confidence > best.confidence:
                best = found
    if best is None:
        return []
    ctx.notes["batch_timer_name"] = f.names.index(best.span_name)
    return [best]


def _judge(ctx: Context, code: int, timer: float, closed: float, spans: np.ndarray, group: np.ndarray,
           oldest: np.ndarray) -> Finding:
    """The finding for one batcher's queue (its spans, batches and their oldest waits)."""
    f, reqs = ctx.frame, ctx.frame.requests
    on_timer = np.abs(oldest - timer) <= WIDTH * timer
    held = on_timer[group]
    wait = np.bincount(f.request[spans[held]], weights=f.dur[spans[held]].astype(np.float64),
                       minlength=len(reqs))
    median_latency = max(float(np.median(reqs.latency)), 1.0)
    added = float(wait.mean()) / median_latency
    share = clamp01(excess_share(wait, ctx.split))
    # the wait against the arrivals over time: a queue's grows with them, a timer's does not
    arrival = reqs.arrival.astype(np.float64)
    width = (arrival.max() - arrival.min() + 1.0) / BINS
    b = np.minimum(((arrival - arrival.min()) / width).astype(np.int64), BINS - 1)
    count = np.bincount(b, minlength=BINS).astype(np.float64)
    all_wait = np.bincount(f.request[spans], weights=f.dur[spans].astype(np.float64), minlength=len(reqs))
    mean_wait = np.bincount(b, weights=all_wait, minlength=BINS) / np.maximum(count, 1)
    core = slice(1, BINS - 1)
    rho = spearman(count[core], mean_wait[core]) if count[core].std() > 0 else 0.0
    strength = logistic(closed, 0.35, 0.08) * (1.0 - logistic(rho, 0.3, 0.1))
    weight = logistic(added, 0.25, 0.05) * material_weight(share)
    confidence = strength * weight
    name = f.names[code]
    sizes = np.bincount(group)
    summary = (
        f"'{name}' is a batcher's queue whose batches close on a timer: {closed:.0%} of its batches left "
        f"when their oldest request had waited {ms(timer):.1f} ms (+-2 %), with {np.median(sizes):.0f} "
        f"request(s) a batch at the median; the wait in them adds {added:.0%} of the median latency to "
        f"the mean request and carries {share:.0%} of the tail excess. It does not grow with the arrivals "
        f"(Spearman {rho:+.2f} per time bin): a setting (max wait), not a backlog."
    )
    stats = {
        "mechanism": MECHANISM,
        "timer_ms": ms(timer),
        "batches_closed_on_timer": round(closed, 3),
        "batch_size_median": float(np.median(sizes)),
        "added_share_of_median_latency": round(added, 3),
        "tail_excess_share": round(share, 3),
        "wait_vs_arrivals_spearman": round(rho, 3),
    }
    step = max(1, len(oldest) // 2000)
    chart = {"kind": "batch_oldest_wait", "oldest_wait_ms": [ms(v) for v in np.sort(oldest)[::step]],
             "timer_ms": ms(timer)}
    evidence = {"summary": summary, "stats": stats, "chart": chart}
    return Finding(PATTERN, clamp01(confidence), "queue", name, evidence, ADVICE.format(where=f"'{name}'",
                                                                                        timer=ms(timer)))


def settle(ctx: Context, findings: list[Finding]) -> list[Finding]:
    """compute_bound beside a named batch-timer finding, on a forward of the batcher's service, is part
    of it (see the module doc)."""
    timer = max((fd.confidence for fd in findings if fd.pattern == PATTERN
                 and fd.evidence.get("stats", {}).get("mechanism") == MECHANISM), default=0.0)
    if timer < 0.5:
        return findings
    f = ctx.frame
    code = ctx.notes["batch_timer_name"]
    batcher = set(np.unique(f.service[f.name == code]).tolist())
    for fd in findings:
        if fd.pattern != "compute_bound" or fd.confidence < 0.05:
            continue
        fwd = ctx.span_stage_mask("model_forward") & (f.request >= 0)
        if fd.span_name in f.names:
            fwd &= f.name == f.names.index(fd.span_name)
        if not fwd.any() or np.bincount(f.service[fwd]).argmax() not in batcher:
            continue
        fd.confidence = min(fd.confidence, 0.9 * timer)
        fd.evidence.setdefault("stats", {})["part_of"] = PATTERN
        fd.evidence["summary"] += (
            " The batches close on the batcher's timer (see queueing): the model waits for work between "
            "them, and its long batches are the ones the timer let grow: part of that finding."
        )
    return findings
