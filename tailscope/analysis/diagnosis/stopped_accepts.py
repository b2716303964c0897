"""Stops seen at a server's door: calls sent while a process was stopped are let in together after it.

Mechanism. A process that stops (a stop-the-world GC pause, a CPU quota's throttled period, a
blocking call holding its event loop) accepts and starts nothing while stopped. With about one
request in flight it stretches at most one span (lone_stalls.py), and where an instance is a pod of
several worker processes the others keep working: no silence, no alignment across names. What still
shows is the door. The calls sent to that process during the stop wait (the gap between the CLIENT
span's start and the SERVER span's start), and when it runs again it starts them in a rush, their
SERVER spans a few ms apart, though they were sent over the whole stop. The wire delays each call on
its own (no rush); a queue for a busy worker lets calls in at the pace work completes, about as
spread as they were sent (a burst at 1.25x capacity compresses them 1.25x).

Statistic. Per server instance, the calls with a large gap (network.large_gaps) in the order their
SERVER spans start, chained while consecutive starts are within CHAIN; a chain of at least
MIN_CALLS whose sends spread over at least COMPRESSED times as long as its starts is a *release*, and
the stop it ends runs from its first send to its first start. Calls of one caller instance only do
not count (a paused caller writes the requests it held at once: its stop, not the server's), nor do
stops mostly filled by work that took as long as its input's size predicts (a long synchronous step
blocks a single-threaded process's door too: large_payload's, not a pause), nor rushes into an
instance that ran as many requests halfway through the stop as it ever does (every worker busy:
workers held by one stopped dependency free up together and let the queued calls in at once; a
stopped process starts nothing, so it holds only what it had begun).
Strength = logistic(releases, 3, 0.7) x logistic(share of the large gaps in releases, 0.15, 0.04) x
logistic(recurrence, 0.45, 0.08), the recurrence being the largest share of the run's tenths that
hold a stop of one instance: a collector or a quota stops a process all through the run, a process
started cold (a worker restarted mid-run) blocks its door only after its start. The stops are stall
episodes.
"""

from __future__ import annotations

import numpy as np

from tailscope.analysis.diagnosis import loop_blocks
from tailscope.analysis.diagnosis.frame import KIND_CLIENT, KIND_SERVER, SPAN_KINDS
from tailscope.analysis.diagnosis.model import Context
from tailscope.analysis.diagnosis.size_explained import size_explained
from tailscope.analysis.diagnosis.stats import logistic

KIND_PRODUCER, KIND_CONSUMER = SPAN_KINDS.index("Producer"), SPAN_KINDS.index("Consumer")
CHAIN_NS = 2_000_000  # consecutive SERVER starts this close belong to one rush
MIN_CALLS = 3
COMPRESSED = 5.0  # sends spread at least this many times as long as the starts
HELD = 0.5  # work its input explains fills this share of a stop: the work held the door


def _large_gaps(gap: np.ndarray) -> np.ndarray:
    from tailscope.analysis.diagnosis.network import large_gaps  # network imports the stall modules

    return large_gaps(gap, float(np.median(gap)))


def releases(ctx: Context) -> dict | None:
    """{"strength", "episodes" (instance, start, end) of the stops, "calls" (the SERVER spans let in
    by a release), "stats"}, or None where there is none (computed once per run: ctx.notes)."""
    if "releases" not in ctx.notes:
        ctx.notes["releases"] = _releases(ctx)
    return ctx.notes["releases"]


def _releases(ctx: Context) -> dict | None:
    f = ctx.frame
    srv = np.nonzero((f.kind == KIND_SERVER) & (f.parent >= 0) & (f.request >= 0))[0]
    srv = srv[f.kind[f.parent[srv]] == KIND_CLIENT]
    if len(srv) < 100:
        return None
    cli = f.parent[srv]
    big = _large_gaps((f.start[srv] - f.start[cli]).astype(np.float64))
    if big.sum() < MIN_CALLS:
        return None
    s, c = srv[big], cli[big]
    order = np.lexsort((f.start[s], f.instance[s]))
    s, c = s[order], c[order]
    inst, started, sent = f.instance[s], f.start[s], f.start[c]
    new = np.r_[True, (np.diff(started) > CHAIN_NS) | (np.diff(inst) != 0)]
    chain = np.cumsum(new) - 1
    size = np.bincount(chain)
    first_start = started[new]
    spread_start = np.maximum.reduceat(started, np.nonzero(new)[0]) - first_start
    first_sent = np.minimum.reduceat(sent, np.nonzero(new)[0])
    spread_sent = np.maximum.reduceat(sent, np.nonzero(new)[0]) - first_sent
    released = (size >= MIN_CALLS) & (spread_sent >= COMPRESSED * np.maximum(spread_start, 100_000))
    # calls from one caller instance only may be let in together by that caller (a paused caller
    # writes its held requests at once): the server's door shows where several callers' calls rush in
    callers = f.instance[c]
    pairs = np.unique(np.c_[chain, callers], axis=0)
    released &= np.bincount(pairs[:, 0], minlength=len(size)) >= 2
    held = held_by_input(ctx, inst[new][released], first_sent[released], first_start[released])
    released[released] &= ~held
    full = at_ceiling(ctx, inst[new][released], (first_sent[released] + first_start[released]) // 2)
    released[released] &= ~full
    n = int(released.sum())
    if n == 0:
        return None
    share = float(size[released].sum() / len(s))
    episodes = (inst[new][released], first_sent[released], first_start[released])
    order = np.lexsort((episodes[1], episodes[0]))
    episodes = tuple(x[order].astype(np.int64) for x in episodes)
    ratio = spread_sent[released] / np.maximum(spread_start[released], 100_000)
    recurring = _recurring(episodes[0], episodes[1], int(f.end.max()) + 1)
    return {
        "strength": logistic(n, 3.0, 0.7) * logistic(share, 0.15, 0.04) * logistic(recurring, 0.45, 0.08),
        "episodes": episodes,
        "calls": s[released[chain]],
        "stats": {
            "releases": n,
            "large_gaps_released": round(share, 3),
            "calls_per_release": round(float(size[released].mean()), 1),
            "release_sent_over_ms": round(float(np.median(spread_sent[released])) / 1e6, 3),
            "release_started_within_ms": round(float(np.median(spread_start[released])) / 1e6, 3),
            "release_compression": round(float(np.median(ratio)), 1),
            "stops_recur_over_the_run": round(recurring, 2),
            "rushes_into_a_full_server_left_out": int(full.sum()),
        },
    }


def at_ceiling(ctx: Context, inst: np.ndarray, rush: np.ndarray) -> np.ndarray:
    """Per stop (its middle): whether its server instance ran as many requests then as it ever does
    (its 99th-percentile concurrency at the starts of its requests, >= 2): every worker was busy, and the
    calls waited for one; workers held by one stopped dependency free up together and let the queue
    in at once. A stopped process starts nothing, so it holds only the requests begun before the stop."""
    from tailscope.analysis.diagnosis.long_stalls import _running

    f = ctx.frame
    out = np.zeros(len(inst), bool)
    for i in np.unique(inst).tolist():
        served = np.nonzero((f.instance == i) & np.isin(f.kind, (KIND_SERVER, KIND_CONSUMER)))[0]
        if len(served) < 2:
            continue
        begun, done = np.sort(f.start[served]), np.sort(f.end[served])
        ceiling = max(2.0, float(np.percentile(_running(begun, done, begun), 99)))
        sel = inst == i
        out[sel] = _running(begun, done, rush[sel]) >= ceiling
    return out


def union(inst: np.ndarray, t0: np.ndarray, t1: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Intervals per instance merged where they overlap, sorted by instance and start (stall time is
    summed over episodes: an overlap would count twice)."""
    order = np.lexsort((t0, inst))
    inst, t0, t1 = inst[order], t0[order], t1[order]
    reach = t1.copy()
    for i in np.unique(inst):  # the furthest end so far within each instance
        sel = inst == i
        reach[sel] = np.maximum.accumulate(t1[sel])
    new = np.r_[True, (inst[1:] != inst[:-1]) | (t0[1:] > reach[:-1])]
    at = np.nonzero(new)[0]
    return inst[at], t0[at], np.maximum.reduceat(t1, at)


def held_by_input(ctx: Context, inst: np.ndarray, t0: np.ndarray, t1: np.ndarray) -> np.ndarray:
    """Per stop: whether work that took as long as its input's size predicts (size_explained.py)
    fills most of it on its instance: a long input processed in synchronous steps blocks a
    single-threaded process's door too, yet nothing stopped it. A paused span lasts its work plus
    the pause, far above what its size predicts."""
    f = ctx.frame
    out = np.zeros(len(inst), bool)
    own = (f.kind != KIND_CLIENT) & (f.kind != KIND_PRODUCER) & (f.kind != KIND_CONSUMER)
    work = np.nonzero(f.leaf & (f.request >= 0) & own & np.isin(f.instance, inst))[0]
    if len(work) == 0:
        return out
    inside = _overlapping(f, work, inst, t0, t1)
    held = np.unique(np.concatenate(inside))
    if len(held) == 0:
        return out
    peers = work[np.isin(f.name[work], np.unique(f.name[held]))]
    d = f.dur[peers]
    slow = (d > np.quantile(d, 0.9)) | np.isin(peers, held)
    explained = peers[size_explained(ctx, peers, slow)]
    blocks = loop_blocks.find(ctx)  # a step that held its process: its own work, not a stop
    if blocks is not None and blocks["finding"].confidence >= 0.5:
        explained = np.union1d(explained, blocks["spans"])
    is_explained = np.zeros(len(f), bool)  # a mask, not an isin per stop (one of ~150 per run)
    is_explained[explained] = True
    end = f.end
    for k, spans in enumerate(inside):
        spans = spans[is_explained[spans]]
        covered = np.minimum(end[spans], t1[k]) - np.maximum(f.start[spans], t0[k])
        out[k] = covered.sum() >= HELD * (t1[k] - t0[k])
    return out


def _overlapping(f, work: np.ndarray, inst: np.ndarray, t0: np.ndarray, t1: np.ndarray) -> list[np.ndarray]:
    """Per stop: the spans of `work` on its instance that overlap it (start < its end, end > its
    start), in no particular order. The spans sorted by (instance, start) once: a stop's lie between
    its start less the longest span and its end (one mask over every span per stop was 20 ms a call)."""
    w_inst, w_start = f.instance[work].astype(np.int64), f.start[work].astype(np.int64)
    base = int(min(w_start.min(), t0.min())) - 1
    longest = int(f.dur[work].max())
    horizon = int(max(f.end[work].max(), t1.max())) - base + longest + 2
    order = np.lexsort((w_start, w_inst))
    spans, key = work[order], w_inst[order] * horizon + (w_start[order] - base)
    at = inst.astype(np.int64) * horizon
    lo = np.searchsorted(key, at + np.maximum(t0 - longest - base, 0), "right").tolist()
    hi = np.searchsorted(key, at + (t1 - base), "left").tolist()
    end = f.end
    out = []
    for a, i, j in zip(t0.tolist(), lo, hi, strict=True):
        near = spans[i:j]
        out.append(near[end[near] > a])
    return out


def _recurring(inst: np.ndarray, at: np.ndarray, run_ns: int) -> float:
    """The largest share of the run's tenths holding a stop of one instance: a collector or a quota
    stops a process again and again, all through the run; a process started cold blocks its door
    for its first requests only (a worker restarted mid-run: one stretch of the run)."""
    tenth = np.minimum(at * 10 // max(run_ns, 1), 9)
    return max(len(np.unique(tenth[inst == i])) / 10 for i in np.unique(inst))


def with_releases(ctx: Context, found: dict | None) -> dict | None:
    """lone_stalls.find's result with the stops the releases show added: the episodes together, the
    stronger of the two tests, weighed on the share of the tail excess the episodes hold."""
    from tailscope.analysis.diagnosis.long_stalls import request_stall_overlap
    from tailscope.analysis.diagnosis.stats import excess_share, material_weight

    rel = releases(ctx)
    if rel is None or rel["strength"] < 0.05:
        return found
    if found is None:
        found = {"strength": 0.0, "episodes": rel["episodes"], "stats": {
            "stretched_work_names": [], "stretched_call_names": [], "stretched_spans": 0,
            "median_stretch_ms": None}}
    else:
        pairs = zip(found["episodes"], rel["episodes"], strict=True)
        found["episodes"] = union(*(np.r_[a, b] for a, b in pairs))
    share = excess_share(request_stall_overlap(ctx, *found["episodes"]), ctx.split)
    found["strength"] = max(found["strength"], rel["strength"])
    found["weight"] = material_weight(share)
    found["stats"].update(rel["stats"], tail_excess_share=round(share, 3))
    return found


def describe(stats: dict) -> str:
    """The releases in a sentence (empty where there were none)."""
    if not stats.get("releases"):
        return ""
    return (
        f" Calls sent to it while it was stopped were let in together {stats['releases']} times: a "
        f"median of {stats['calls_per_release']:.0f} calls sent over {stats['release_sent_over_ms']:.0f} ms "
        f"started within {stats['release_started_within_ms']:.1f} ms of each other "
        f"({stats['large_gaps_released']:.0%} of the calls that waited long before the handler): the "
        "process stopped accepting, then took them at once (the wire delays each call on its own, a busy "
        "worker lets them in at the pace work completes)."
    )
