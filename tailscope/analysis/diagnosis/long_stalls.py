"""gc_pause's strongest evidence: stall episodes longer than a request in which the process
finished no work. A pause freezes a process for as long as it lasts; co-slowness from ordinary
queueing cannot outlast ordinary work, and while a queue drains the work in flight keeps ending."""

from __future__ import annotations

import numpy as np

from tailscope.analysis.diagnosis.model import Context
from tailscope.analysis.diagnosis.stats import excess_share
from tailscope.analysis.diagnosis.where import main_service


def _stall_time(t: np.ndarray, s0: np.ndarray, s1: np.ndarray, cum: np.ndarray) -> np.ndarray:
    """Stall time in [0, t) given sorted episodes [s0, s1) and cum = stall time before each one."""
    k = np.searchsorted(s0, t, side="right") - 1
    kk = np.maximum(k, 0)
    inside = np.clip(t - s0[kk], 0, s1[kk] - s0[kk])
    return np.where(k >= 0, cum[kk] + inside, 0)


def _merged(s0: np.ndarray, s1: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Episodes sorted by start, overlapping ones merged (episodes from several detectors, such as
    gc_pause's and cpu_throttling's of one stall, come appended in any order)."""
    if len(s0) == 0:
        return s0, s1
    order = np.argsort(s0, kind="stable")
    s0, s1 = s0[order], s1[order]
    reach = np.maximum.accumulate(s1)
    new = np.r_[True, s0[1:] > reach[:-1]]
    return s0[new], np.maximum.reduceat(s1, np.nonzero(new)[0])


def stall_overlap(inst, t0, t1, ep_inst, ep_t0, ep_t1) -> np.ndarray:
    """Per interval [t0, t1) on instance `inst`: total time inside stall episodes of that instance
    (overlapping episodes counted once)."""
    out = np.zeros(len(inst), np.float64)
    for i in np.unique(ep_inst):
        sel = ep_inst == i
        s0, s1 = _merged(ep_t0[sel], ep_t1[sel])
        cum = np.r_[0, np.cumsum(s1 - s0)]
        m = inst == i
        out[m] = _stall_time(t1[m], s0, s1, cum) - _stall_time(t0[m], s0, s1, cum)
    return out


def request_stall_overlap(ctx: Context, ep_inst, ep_t0, ep_t1) -> np.ndarray:
    """Per request: the stall time it sat through on every instance it ran on. On its own instance
    that is the stall time inside the request; on a callee's instance (a service it called, a worker
    behind a queue), the stall time inside the span of the request's spans there: a paused callee
    holds the caller's request as long as its own."""
    f, reqs = ctx.frame, ctx.frame.requests
    out = stall_overlap(reqs.instance, reqs.start, reqs.start + reqs.latency, ep_inst, ep_t0, ep_t1)
    if len(ep_inst) == 0:
        return out
    inside = np.nonzero(f.request >= 0)[0]
    away = inside[f.instance[inside] != reqs.instance[f.request[inside]]]
    away = away[np.isin(f.instance[away], np.unique(ep_inst))]
    if len(away) == 0:
        return out
    key = f.request[away].astype(np.int64) * (len(f.instances) + 1) + f.instance[away]
    order = np.argsort(key, kind="stable")
    key, away = key[order], away[order]
    first = np.r_[0, np.nonzero(key[1:] != key[:-1])[0] + 1]
    t0 = np.minimum.reduceat(f.start[away], first)
    t1 = np.maximum.reduceat(f.end[away], first)
    inst = f.instance[away[first]]
    extra = stall_overlap(inst, t0, t1, ep_inst, ep_t0, ep_t1)
    np.add.at(out, f.request[away[first]], extra)
    return np.minimum(out, reqs.latency.astype(np.float64))


def quiet_gaps(ctx: Context, ep_inst, ep_t0, ep_t1) -> np.ndarray:
    """Per episode: the longest stretch inside it in which its process finished no work (ns). A
    paused process finishes nothing for as long as the pause lasts; a long co-slow stretch in which
    work spans keep ending (a queue draining after a burst while the model keeps stepping) is load,
    not a pause. Work = leaf spans of requests outside the queue stage."""
    return quiet_stretches(ctx, ep_inst, ep_t0, ep_t1)[0]


def quiet_stretches(ctx: Context, ep_inst, ep_t0, ep_t1) -> tuple[np.ndarray, np.ndarray]:
    """Per episode: the length (ns) of its longest stretch without work ending (see quiet_gaps), and
    when that stretch ends: the first work to finish once the process runs again (or the episode's
    end)."""
    f = ctx.frame
    work = np.nonzero(f.leaf & (f.request >= 0) & ~ctx.span_stage_mask("queue"))[0]
    if not len(work):
        return (ep_t1 - ep_t0).astype(np.int64), ep_t1.astype(np.int64)
    scale = int(max(f.end.max(), ep_t1.max())) + 1
    keys = np.sort(f.instance[work].astype(np.int64) * scale + f.end[work])
    base = ep_inst.astype(np.int64) * scale
    lo = np.searchsorted(keys, base + ep_t0, side="right")
    hi = np.searchsorted(keys, base + ep_t1)
    if len(ep_t0) == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    # every episode's points: its start, the work ends inside it, its end; all episodes in one array
    inner = np.maximum(hi - lo, 0)
    size = inner + 2
    offset = np.r_[0, np.cumsum(size)[:-1]]
    points = np.empty(int(size.sum()), np.int64)
    points[offset] = ep_t0
    points[offset + size - 1] = ep_t1
    owner = np.repeat(np.arange(len(ep_t0)), inner)
    within = np.arange(len(owner)) - np.repeat(np.cumsum(inner) - inner, inner)
    points[offset[owner] + 1 + within] = keys[lo[owner] + within] - base[owner]
    gaps = np.diff(points)  # the last gap of each episode runs into the next one's start: not used
    gap_owner = np.repeat(np.arange(len(ep_t0)), size)[:-1]
    valid = np.ones(len(gaps), bool)
    valid[(offset + size - 1)[:-1]] = False
    gaps = np.where(valid, gaps, -1)
    order = np.lexsort((-np.arange(len(gaps)), gaps, gap_owner))  # the first of equal longest gaps
    last = order[np.r_[gap_owner[order][1:] != gap_owner[order][:-1], True]]
    return gaps[last].astype(np.int64), points[last + 1].astype(np.int64)


def reply_reads(f, inside: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(CLIENT span, start, end) of each call's last stretch, from the end of its callee's SERVER span
    (in another process) to its own end: the caller reading the reply. A call is a wait on the
    caller's process that a leaf-only view misses where the callee is traced; a pause of the caller
    stretches this stretch (the reply sits unread until it runs again), a slow callee does not."""
    from tailscope.analysis.diagnosis.frame import KIND_CLIENT, KIND_SERVER

    child = np.nonzero((f.kind == KIND_SERVER) & (f.parent >= 0))[0]
    call = f.parent[child]
    ok = (f.kind[call] == KIND_CLIENT) & inside[call] & (f.instance[call] != f.instance[child])
    child, call = child[ok], call[ok]
    if len(call) == 0:
        return call, call.copy(), call.copy()
    answered = np.zeros(len(f), np.int64)  # the last answer of each call
    unique = np.unique(call)
    if len(unique) < len(call):
        np.maximum.at(answered, call, f.end[child])
    else:
        answered[call] = f.end[child]
    call = unique
    keep = f.end[call] > answered[call]
    return call[keep], answered[call][keep], f.end[call][keep]


def silent_stretches(ctx: Context, ep_inst, ep_t0, ep_t1) -> tuple[np.ndarray, np.ndarray]:
    """Per episode (sorted by instance, then start): its longest stretch in which its process ended
    no span, as (start, end). A paused process runs no thread, so nothing of it ends for as long as
    the pause lasts; many requests slowed together while the process keeps running (a queue behind
    a saturated batcher, whose batches keep ending) break the episode into short silences. Starts
    are not counted: an instrumentation may stamp one from outside the process's threads (a
    broker's publish, the moment a connection was accepted)."""
    f = ctx.frame
    if len(ep_t0) == 0:
        return ep_t0.astype(np.int64), ep_t1.astype(np.int64)
    scale = int(max(f.end.max(), ep_t1.max())) + 1
    key0 = ep_inst.astype(np.int64) * scale + ep_t0
    key1 = ep_inst.astype(np.int64) * scale + ep_t1
    pts = f.instance.astype(np.int64) * scale + f.end
    k = np.searchsorted(key0, pts, side="right") - 1
    inside = (k >= 0) & (pts < key1[np.maximum(k, 0)])
    order = np.lexsort((pts[inside], k[inside]))
    pts, k = pts[inside][order], k[inside][order]
    # every episode's points: its start, the activity inside it, its end
    ids = np.r_[np.arange(len(key0)), k, np.arange(len(key0))]
    t = np.r_[key0, pts, key1]
    order = np.lexsort((t, ids))
    ids, t = ids[order], t[order]
    gaps = np.diff(t)
    same = ids[1:] == ids[:-1]
    gaps = np.where(same, gaps, -1)
    best = np.full(len(key0), -1, np.int64)
    np.maximum.at(best, ids[:-1][same], gaps[same])
    pick = np.nonzero(same & (gaps == best[ids[:-1]]))[0]
    first = pick[np.r_[True, ids[pick][1:] != ids[pick][:-1]]]  # the first of equal longest gaps
    base = ep_inst.astype(np.int64) * scale
    return t[first] - base, t[first + 1] - base


DEFERRED = 2  # requests sent to a silent process that it started only after its silence
EXPECTED = 1.0  # arrivals a silence must outlast where no sender is traced


def _arrivals(ctx: Context):
    """Per instance: requests and calls arriving (request roots, SERVER and CONSUMER spans), how many
    came with their sender's span, the arrival rate (per ns over the instance's life); and, for those
    sent from another process, (instance, send time, start time)."""
    from tailscope.analysis.diagnosis.frame import KIND_CLIENT, KIND_SERVER, SPAN_KINDS

    if "arrivals" in ctx.notes:
        return ctx.notes["arrivals"]
    f = ctx.frame
    n_inst = len(f.instances)
    entry = np.isin(f.kind, (KIND_SERVER, SPAN_KINDS.index("Consumer"))) & (f.request >= 0)
    entry[f.requests.root] = True
    entries = np.nonzero(entry)[0]
    up = f.parent[entries]
    sent = (up >= 0) & (f.instance[np.maximum(up, 0)] != f.instance[entries])
    sent &= np.isin(f.kind[np.maximum(up, 0)], (KIND_CLIENT, SPAN_KINDS.index("Producer")))
    inst = f.instance[entries]
    total = np.bincount(inst, minlength=n_inst)
    with_sender = np.bincount(inst[sent], minlength=n_inst)
    first = np.full(n_inst, np.iinfo(np.int64).max)
    last = np.zeros(n_inst, np.int64)
    np.minimum.at(first, inst, f.start[entries])
    np.maximum.at(last, inst, f.start[entries])
    rate = total / np.maximum(last - first, 1)
    out = total, with_sender, rate, (inst[sent], f.start[up[sent]], f.start[entries[sent]])
    ctx.notes["arrivals"] = out
    return out


def _late_sends(send: np.ndarray, start: np.ndarray) -> np.ndarray:
    """The send times (sorted) of arrivals that waited longer than usual to start: twice the median
    time from send to start, 1 ms at least."""
    lag = start - send
    return np.sort(send[lag > max(1_000_000.0, 2.0 * float(np.median(lag)))]) if len(lag) else send


def credible_silences(ctx: Context, ep_inst, ep_t0, ep_t1) -> np.ndarray:
    """Per silent stretch (see silent_stretches): whether the process stopped, rather than had nothing
    to do: 0 not, 1 as far as timing can tell, 2 confirmed by the requests it kept waiting. A paused
    process still receives requests: those sent to it during the pause start when it runs again. A
    process that is idle, or starved because its callers are blocked (their threads all waiting on
    it), receives nothing while it is silent. Where the instance's requests and calls mostly come
    with their sender's span (a client call, a load generator), a silence is a stop when at least
    DEFERRED of them were sent inside it and waited longer than usual to start (twice the median
    time from send to start, 1 ms at least). Where no sender is traced, it is one when a request of
    the instance was in flight through it (an idle process holds nothing up) and the instance's
    arrival rate would have brought EXPECTED requests in a stretch that long."""
    out = np.zeros(len(ep_t0), np.int8)
    if len(ep_t0) == 0:
        return out
    total, with_sender, rate, (s_inst, s_send, s_start) = _arrivals(ctx)
    reqs = ctx.frame.requests
    for i in np.unique(ep_inst).tolist():
        sel = np.nonzero(ep_inst == i)[0]
        length = (ep_t1[sel] - ep_t0[sel]).astype(np.float64)
        if with_sender[i] < 0.5 * max(total[i], 1):
            mine = reqs.instance == i
            order = np.argsort(reqs.start[mine], kind="stable")
            begun = reqs.start[mine][order]
            reach = np.maximum.accumulate((reqs.start + reqs.latency)[mine][order]) if len(begun) else begun
            k = np.searchsorted(begun, ep_t0[sel], side="right") - 1
            held = (k >= 0) & (reach[np.maximum(k, 0)] >= ep_t1[sel]) if len(begun) else k < -1
            out[sel] = held & (rate[i] * length >= EXPECTED)
            continue
        mine = s_inst == i
        late = _late_sends(s_send[mine], s_start[mine])
        deferred = np.searchsorted(late, ep_t1[sel]) - np.searchsorted(late, ep_t0[sel])
        out[sel] = 2 * (deferred >= DEFERRED)
    return out


def _running(begun: np.ndarray, done: np.ndarray, t: np.ndarray) -> np.ndarray:
    """How many of the intervals (sorted starts `begun`, sorted ends `done`) are running at each t."""
    return np.searchsorted(begun, t, side="right") - np.searchsorted(done, t, side="right")


def waiting_stops(ctx: Context, min_ns: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Stops found from the requests kept waiting alone, wherever they are (the cross-name test needs
    several requests in flight; a tier that mostly waits on its callees has few slow spans of its
    own): on each instance whose arrivals come with their sender's span, the stretches longer than
    `min_ns` in which the process ended no span and into which at least DEFERRED arrivals were sent
    that started late, while it ran fewer requests than its most (a pool whose every worker waits on
    a slow call is silent too, and new requests wait for a worker). As (instance, start, end), by
    instance then start."""
    from tailscope.analysis.diagnosis.frame import KIND_SERVER, SPAN_KINDS

    f = ctx.frame
    total, with_sender, _, (s_inst, s_send, s_start) = _arrivals(ctx)
    found: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
    keys = None
    for i in np.nonzero((with_sender >= 0.5 * np.maximum(total, 1)) & (total > 0))[0].tolist():
        mine = s_inst == i
        late = _late_sends(s_send[mine], s_start[mine])
        if len(late) < DEFERRED:
            continue
        if keys is None:  # every span's end, by instance then time: one sort
            scale = int(f.end.max()) + 1
            keys = np.sort(f.instance.astype(np.int64) * scale + f.end)
        ends = keys[np.searchsorted(keys, i * scale) : np.searchsorted(keys, (i + 1) * scale)] - i * scale
        on = f.instance == i
        k = np.searchsorted(ends, late, side="right")  # the gap between ends[k - 1] and ends[k]
        ok = (k > 0) & (k < len(ends))
        gap, n = np.unique(k[ok], return_counts=True)
        t0, t1 = ends[gap - 1], ends[gap]
        keep = (n >= DEFERRED) & (t1 - t0 > min_ns)
        if keep.any():  # requests running on the instance when the silence began, vs its ceiling
            served = np.nonzero(on & np.isin(f.kind, (KIND_SERVER, SPAN_KINDS.index("Consumer"))))[0]
            begun, done = np.sort(f.start[served]), np.sort(f.end[served])
            if len(begun):
                keep &= _running(begun, done, t0) < np.percentile(_running(begun, done, begun), 99)
        found.append((np.full(int(keep.sum()), i), t0[keep], t1[keep]))
    if not found:
        return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64)
    return tuple(np.concatenate(x).astype(np.int64) for x in zip(*found, strict=True))


def long_stalls(ctx: Context, ep_inst, ep_t0, ep_t1) -> tuple[float, float, float]:
    """Share of the tail excess spent in stall episodes in which the process finished no work for
    longer than the median request (see quiet_gaps), the share of tail requests overlapping one, and
    the time they add to the mean request over the median latency (a pause beside a heavier cause
    can carry little of the p99 excess and still slow many requests)."""
    reqs, split = ctx.frame.requests, ctx.split
    median = np.median(reqs.latency)
    long = (ep_t1 - ep_t0) > median  # only these can hold a quiet stretch that long
    if not long.any():
        return 0.0, 0.0, 0.0
    long[long] = quiet_gaps(ctx, ep_inst[long], ep_t0[long], ep_t1[long]) > median
    if not long.any():
        return 0.0, 0.0, 0.0
    args = (ep_inst[long], ep_t0[long], ep_t1[long])
    overlap = request_stall_overlap(ctx, *args)
    hit = float((overlap[split.tail] > 0).mean()) if split.tail.any() else 0.0
    return excess_share(overlap, split), hit, float(overlap.mean() / max(median, 1.0))


def where_stalled(ctx: Context, ep_inst, ep_t0, ep_t1, top: int = 4) -> tuple[list[str], list[str]]:
    """The instances holding the most stall time (at most `top`) and their services."""
    f = ctx.frame
    time = np.bincount(ep_inst, weights=(ep_t1 - ep_t0).astype(np.float64), minlength=len(f.instances))
    order = [int(i) for i in np.argsort(-time)[:top] if time[i] > 0]
    services = sorted({main_service(f, f.instance == i) for i in order})
    return [f.instances[i] for i in order], services


def young_excess(ctx: Context, ep_inst, ep_t0, ep_t1) -> float:
    """How much more of the stall time sits in the first third of its instance's life (by request
    count) than a process stalling all its life long puts there: 0 when a third of it does, 1 when
    all of it does. A warm-up (an instance started cold, in a burst or after a restart) slows its
    first requests; a pause recurs for as long as the process runs."""
    reqs = ctx.frame.requests
    if len(ep_t0) == 0:
        return 0.0
    life = np.bincount(reqs.instance, minlength=len(ctx.frame.instances))
    young = np.zeros(len(ep_t0), bool)
    for i in np.unique(ep_inst):
        starts = np.sort(reqs.start[reqs.instance == i])
        sel = ep_inst == i
        young[sel] = np.searchsorted(starts, ep_t0[sel]) < life[i] / 3
    time = (ep_t1 - ep_t0).astype(np.float64)
    share = float(time[young].sum() / max(time.sum(), 1.0))
    return max(0.0, (share - 1 / 3) / (2 / 3))


def slow_flags(
    ctx: Context, nm: np.ndarray, d: np.ndarray, n_codes: int, sample: int = 200_000
) -> np.ndarray:
    """Per interval (name code `nm`, duration `d`): above its name's 90th percentile and 1.5x its
    median (the per-name quantiles come from a random sample of at most `sample` intervals)."""
    d = d.astype(np.float64)
    pick = np.arange(len(nm)) if len(nm) <= sample else ctx.rng.choice(len(nm), sample, replace=False)
    order = np.lexsort((d[pick], nm[pick]))
    nm_s, d_s = nm[pick][order], d[pick][order]
    counts = np.bincount(nm_s, minlength=n_codes)
    starts = np.r_[0, np.cumsum(counts)[:-1]]
    last = len(d_s) - 1
    q90 = d_s[np.minimum(starts + (0.9 * np.maximum(counts - 1, 0)).astype(np.int64), last)]
    med = d_s[np.minimum(starts + (0.5 * np.maximum(counts - 1, 0)).astype(np.int64), last)]
    thr = np.where(counts > 0, np.maximum(q90, 1.5 * med), np.inf)
    return d > thr[nm]


def warm_up_mask(ctx: Context) -> np.ndarray:
    """Per request: among the first 3K requests of its instance (K = 5 % of them, 10 to 200)."""
    reqs = ctx.frame.requests
    per_inst = np.bincount(reqs.instance, minlength=len(ctx.frame.instances))
    k = np.clip((per_inst * 0.05).astype(np.int64), 10, 200)[reqs.instance]
    return reqs.index_on_instance < 3 * k
