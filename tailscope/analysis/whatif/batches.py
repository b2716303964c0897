"""A batch consumer's messages replayed through its processes, the batches formed again as the
consumer forms them: a process that is free takes the oldest waiting messages, as many as have
arrived (up to the largest batch the run shows); one that was idle when the next message arrived
waits a fill window for more first (the typical wait of a batch that found its process free); it
processes the batch's messages one after the other (each its re-timed processing span and the gap
before it), acks, and is free again. A process joins when it took its first batch in the run (one
started mid-run by an autoscaler is not there before). A model, stated as such: the load decides how
many messages a batch holds, so a fix that makes processing faster also makes the batches smaller,
and a message's latency (publish -> the end of its own processing: `Requests.message_span`) is
compared with a run that formed its batches under its own load.

Only for a run whose units carry several messages each (units.py: a CONSUMER root linked to the
messages it read); a unit of one message is one job."""

from __future__ import annotations

import heapq
from dataclasses import dataclass

import numpy as np

from tailscope.analysis.diagnosis.frame import SPAN_KINDS, TraceFrame
from tailscope.analysis.whatif.retime import Edit, Layout, Retimed

KIND_CONSUMER = SPAN_KINDS.index("Consumer")


@dataclass
class Batches:
    span: np.ndarray  # per message: the span ending its processing (message_span)
    sent: np.ndarray  # per message: when it entered the broker (ns)
    head: np.ndarray  # per message: the batch's CONSUMER span
    pool: np.ndarray  # per message: the consumer's service
    ready: dict[int, list[float]]  # per pool: when each process (thread) could first take a batch
    fill_ns: dict[int, float]  # per pool: an idle process's wait for more messages
    max_batch: dict[int, int]  # per pool: the most messages a batch held
    trail_ns: dict[int, float]  # per pool: the typical time after a batch's last message (the ack)
    transit_ns: dict[int, float]  # per pool: how long after its publish a message can be taken
    spread: np.ndarray  # per message: a draw of the idle batches' gap about its median (ns)
    spread_share: dict[int, float]  # per pool: the part of that spread that is the fill window's


def batch_consumers(frame: TraceFrame, lay: Layout, seed: int = 0) -> Batches | None:
    """The run's batch consumers (None where no unit carries more than one message)."""
    reqs = frame.requests
    if reqs is None or reqs.message_span is None or reqs.message_sent is None:
        return None
    span = reqs.message_span
    is_kid = frame.kind[span] != KIND_CONSUMER
    head = np.where(is_kid, frame.parent[span], span)
    if not is_kid.any() or (head < 0).any():
        return None
    count = np.bincount(head, minlength=len(frame))
    pool = frame.service[head]
    ready: dict[int, list[float]] = {}
    fill: dict[int, float] = {}
    most: dict[int, int] = {}
    trail: dict[int, float] = {}
    heads = np.unique(head)
    spread = np.zeros(len(span))
    rng = np.random.default_rng([seed, 31])
    first_sent = np.full(len(frame), np.iinfo(np.int64).max)
    np.minimum.at(first_sent, head, reqs.message_sent)
    for p in np.unique(pool).tolist():
        mine = heads[frame.service[heads] == p]
        start = frame.start[mine].astype(np.int64)
        slots: list[float] = []
        for inst in np.unique(frame.instance[mine]).tolist():
            on = mine[frame.instance[mine] == inst]
            end = frame.start[on] + frame.dur[on]
            c = _concurrency(frame.start[on], end)
            slots += [float(frame.start[on].min())] * max(c, 1)
        ready[p] = slots
        most[p] = int(count[mine].max())
        trail[p] = float(np.median(lay.trailing[mine]))
        # a batch whose process was idle: it started a fill window after its first message was sent
        # (no batch of the same process was open then): the typical such gap
        gap = (start - first_sent[mine]).astype(np.float64)
        prev_end = _previous_end(frame, mine)
        idle = prev_end <= first_sent[mine]
        idle_gap = gap[idle] if idle.any() else gap
        fill[p] = float(np.median(idle_gap))
        # an idle process's fill window varies as the idle batches' gaps do: the k-th idle pickup
        # of the replay waits the k-th draw of them (the same draws for every lever); a gap beyond
        # the upper fence (Tukey's) is a process stalled in its window (a pause), not the window
        q1, q3 = np.percentile(idle_gap, [25, 75])
        usual = idle_gap[idle_gap <= q3 + 1.5 * (q3 - q1)]
        sel = np.nonzero(pool == p)[0]
        spread[sel] = rng.choice(usual - fill[p], len(sel))
    b = Batches(span, reqs.message_sent.astype(np.int64), head, pool, ready, fill, most, trail,
                {p: 0.0 for p in ready}, spread, {p: 0.0 for p in ready})
    own = _own_time(b, frame.dur, lay)
    for p in ready:
        sizes = count[np.unique(head[pool == p])]
        _calibrate(b, p, own, float(sizes.mean()), float(sizes.std()))
    return b


SHARES = (0.0, 0.25, 0.5, 0.75, 1.0)


def _calibrate(b: Batches, p: int, own: np.ndarray, size: float, size_std: float) -> None:
    """What the run cannot show apart, fitted so that the replay of the run as measured forms its
    batches: the part of the idle gap that is transit (a message cannot be taken before it), and the
    part of the gaps' spread that is the fill window's (batches as varied in size as the run's)."""
    best = None
    for share in SHARES:
        b.spread_share[p] = share
        transit = _transit(b, p, own, size)
        miss = abs(float(np.std(_pool_ends(b, p, own, 0)[1])) - size_std)
        if best is None or miss < best[0]:
            best = (miss, share, transit)
    assert best is not None
    b.spread_share[p], b.transit_ns[p] = best[1], best[2]


def _own_time(b: Batches, dur: np.ndarray, lay: Layout) -> np.ndarray:
    """Per message: its processing span and the gap before it in its batch (a batch of one: itself)."""
    is_kid = b.span != b.head
    return np.where(is_kid, dur[b.span] + lay.gap[b.span], dur[b.span]).astype(np.float64)


def _transit(b: Batches, p: int, own: np.ndarray, size: float, rounds: int = 10) -> float:
    """The delay between a message's publish and when a process can take it (the broker's transit,
    part of the fill window the run shows): the one with which the replay of the run as measured
    forms batches as large as the run's, on average (larger delays make smaller batches)."""
    low, high = 0.0, b.fill_ns[p]
    for _ in range(rounds):
        mid = (low + high) / 2
        b.transit_ns[p] = mid
        made = float(np.mean(_pool_ends(b, p, own, 0)[1]))
        low, high = (mid, high) if made > size else (low, mid)
    return (low + high) / 2


def _concurrency(start: np.ndarray, end: np.ndarray) -> int:
    t = np.r_[start, end]
    step = np.r_[np.ones(len(start)), -np.ones(len(end))]
    order = np.lexsort((step, t))
    return int(np.cumsum(step[order]).max(initial=0))


def _previous_end(frame: TraceFrame, heads: np.ndarray) -> np.ndarray:
    """Per head: the end of the batch its instance started before it (-inf for the first)."""
    order = np.lexsort((frame.start[heads], frame.instance[heads]))
    h = heads[order]
    end = (frame.start[h] + frame.dur[h]).astype(np.float64)
    same = np.r_[False, frame.instance[h][1:] == frame.instance[h][:-1]]
    prev = np.where(same, np.r_[-np.inf, end[:-1]], -np.inf)
    out = np.empty(len(heads))
    out[order] = prev
    return out


def replay_batches(b: Batches, timed: Retimed, lay: Layout, extra_slots: int = 0) -> np.ndarray:
    """Each message's latency (ns, publish -> the end of its processing) when the batches are formed
    again from the messages' arrivals and the re-timed processing (see the module docstring)."""
    own = _own_time(b, timed.dur, lay)
    latency = np.zeros(len(b.span))
    for p in b.ready:
        sel, ends = _pool_ends(b, p, own, extra_slots)[0]
        latency[sel] = ends - b.sent[sel]
    return latency


def _pool_ends(b: Batches, p: int, own: np.ndarray, extra_slots: int
               ) -> tuple[tuple[np.ndarray, np.ndarray], list[int]]:
    """((messages of pool p, the end of each one's processing), each batch's size) when the batches
    are formed first come first served."""
    sel = np.nonzero(b.pool == p)[0]
    sel = sel[np.argsort(b.sent[sel], kind="stable")]
    slots = b.ready[p]
    free = sorted(slots + [min(slots)] * extra_slots)
    heapq.heapify(free)
    arrive = (b.sent[sel] + b.transit_ns[p]).astype(np.float64).tolist()
    # an idle process's wait for more, after the first arrives
    wait = np.maximum(b.fill_ns[p] - b.transit_ns[p] + b.spread_share[p] * b.spread[sel], 0).tolist()
    idle = 0
    cost = np.maximum(own[sel], 0).tolist()
    most, trail = b.max_batch[p], b.trail_ns[p]
    m = len(arrive)
    ends = [0.0] * m
    i = 0
    sizes = []
    while i < m:
        ready = heapq.heappop(free)
        if ready >= arrive[i]:
            pick = ready
        else:
            pick, idle = arrive[i] + wait[idle], idle + 1
        j = i + 1
        while j < m and j - i < most and arrive[j] <= pick:
            j += 1
        t = pick
        for k in range(i, j):
            t += cost[k]
            ends[k] = t
        heapq.heappush(free, t + trail)
        sizes.append(j - i)
        i = j
    return (sel, np.asarray(ends)), sizes


def as_calm_batches(b: Batches, edit: Edit, latency: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """A lever that sets the batches' waits as in calm stretches (queue_as_calm:handlers) leaves
    each batch as the backlog formed it (many messages, each waiting for those before it): each
    message of a batch whose wait it changed takes instead the latency of a message drawn from the
    batches it left alone (their latencies after the edit)."""
    moved = edit.cut_before[b.head] != 0
    if not moved.any() or moved.all():
        return latency
    calm = latency[~moved]
    out = latency.copy()
    out[moved] = calm[rng.integers(0, len(calm), int(moved.sum()))]
    return out
