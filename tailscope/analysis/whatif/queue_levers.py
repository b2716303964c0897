"""The levers on the queue before the model and on the model itself: no wait beyond the batching
window, the queue as in calm stretches, more replicas, a faster forward pass (see levers.py)."""

from __future__ import annotations

import numpy as np

from tailscope.analysis.whatif.handlers import every_call
from tailscope.analysis.whatif.levers import CAPACITY, HARDWARE, SOFTWARE, Inputs, Lever
from tailscope.analysis.whatif.retime import Edit
from tailscope.analysis.whatif.served import FORWARD


def queue_within_window(x: Inputs) -> Lever | None:
    s = x.served
    if s is None:
        return None
    f = x.frame
    edit = Edit.none(len(f))
    wait = s.wait(f, x.lay)
    span = s.queue >= 0
    edit.dur[s.queue[span]] = np.minimum(wait[span], s.window_ns)
    edit.cut_before[s.forward[~span]] = np.maximum(wait[~span] - s.window_ns, 0)
    return Lever(
        "queue_within_window",
        f"No queue wait beyond the batching window ({s.window_ns / 1e6:.1f} ms)",
        SOFTWARE,
        "each request's wait before the model is cut to the batching window",
        edit,
        pattern="queueing",
        params={"window_ms": round(s.window_ns / 1e6, 3)},
    )


WINDOW_SPENT = 0.8  # a batch's first member that waited this share of the window waited it out
WINDOW_MATERIAL = 0.25  # ... where the window is at least a quarter of the median latency


def queue_no_window(x: Inputs) -> Lever | None:
    """A batcher whose window is what its requests wait for: most batches leave before filling, their
    first member having waited out the window (a max queue delay set for a traffic that never fills a
    batch in it). The fix: no window (a batch leaves as soon as a server is free, with what has
    arrived), the run's arrivals replayed through the queue with the measured batch costs. None where
    the window is under a quarter of the latency or the batches fill before it closes."""
    s, f = x.served, x.frame
    if s is None or s.window_ns <= 0:  # (a batch of one: a window every request waited out alone)
        return None
    latency = np.median(f.requests.latency[s.request].astype(np.float64))
    if s.window_ns < WINDOW_MATERIAL * latency:
        return None
    wait = s.wait(f, x.lay)
    order = np.lexsort((f.start[s.forward] - wait, s.batch))
    lead = order[np.r_[True, s.batch[order][1:] != s.batch[order][:-1]]]
    unfilled = (s.size[lead] < s.max_batch) | (s.max_batch <= 1)
    spent = unfilled & (wait[lead] >= WINDOW_SPENT * s.window_ns)
    if spent.mean() < 0.5:
        return None
    return Lever(
        "queue_no_window",
        f"No batching delay (the {s.window_ns / 1e6:.1f} ms window most batches waited out)",
        SOFTWARE,
        "a batch leaves as soon as a server is free, with the requests that have arrived; the run's "
        "arrivals are replayed through the queue with the measured batch costs (a model)",
        Edit.none(len(f)),
        pattern="queueing",
        requeue=True,
        window_ns=0.0,
        params={"window_ms": round(s.window_ns / 1e6, 3),
                "batches_waited_out": round(float(spent.mean()), 3)},
    )


CALM_BINS = 100
CALM_RATIO = 2.0  # a stretch of time whose mean wait is over twice the typical stretch's is disturbed
LATENCY_CALM_RATIO = 1.25  # a latency is mostly service: a stretch a quarter slower is disturbed
CALM_QUANTILE = 0.25  # handler queues: the typical stretch's wait
QUIETER_QUANTILE = 0.1  # the typical stretch where the quieter quarter is itself disturbed


def queue_as_calm(x: Inputs) -> Lever | None:
    s = x.served
    if s is None or len(s.request) < 2 * CALM_BINS:
        return None
    f = x.frame
    wait = s.wait(f, x.lay)
    arrival = f.start[s.forward] - wait
    b = stretches(arrival)
    count = np.bincount(b, minlength=CALM_BINS)
    mean = np.bincount(b, weights=wait, minlength=CALM_BINS) / np.maximum(count, 1)
    typical = float(np.median(mean[count > 0]))
    calm = mean[b] <= CALM_RATIO * max(typical, 1.0)
    if calm.all() or calm.sum() < 20:
        return None
    # a disturbed request waits and is served as a request of a calm stretch (one drawn: wait and
    # forward together, so a full batch's longer forward comes with its shorter wait)
    pick = np.nonzero(calm)[0][x.rng(7).integers(0, int(calm.sum()), int((~calm).sum()))]
    rows = np.nonzero(~calm)[0]
    edit = Edit.none(len(f))
    new_wait = wait[pick]
    span_rows = s.queue[rows] >= 0
    edit.dur[s.queue[rows[span_rows]]] = new_wait[span_rows]
    edit.cut_before[s.forward[rows[~span_rows]]] = wait[rows[~span_rows]] - new_wait[~span_rows]
    edit.dur[s.forward[rows]] = f.dur[s.forward[pick]]
    return Lever(
        "queue_as_calm",
        "The queue as in calm stretches (peaks absorbed)",
        CAPACITY,
        "each request of a stretch whose mean wait is over twice the typical stretch's waits and is served "
        "as a request of a calm stretch (drawn from the run): the peaks met with capacity or admission",
        edit,
        pattern="queueing",
        params={"disturbed_share": round(float((~calm).mean()), 4)},
    )


def more_replicas(x: Inputs, extra: int = 1) -> Lever | None:
    if x.served is None or extra < 1:
        return None
    return Lever(
        f"replicas+{extra}",
        f"{extra} more replica(s) of the model",
        CAPACITY,
        "the run's arrivals replayed through a queue with more servers and the measured service "
        "times (a model: requests spread evenly at random over the replicas)",
        Edit.none(len(x.frame)),
        requeue=True,
        extra_servers=extra,
        params={"extra": extra},
    )


def forward_scaled(x: Inputs, k: float, label: str | None = None, key: str | None = None) -> Lever | None:
    f = x.frame
    edit = Edit.none(len(f))
    if x.served is None:  # no queue in front of it: the forward spans alone get faster
        fwd = np.nonzero((x.stage == FORWARD) & (f.request >= 0))[0]
        if len(fwd) == 0:
            return None
        edit.dur[fwd] = f.dur[fwd] * k
    return Lever(
        key or f"forward_x{k:g}",
        label or f"Model forward × {k:g} (faster accelerator or quantisation)",
        HARDWARE,
        "every forward pass takes k times as long; the queue before it is replayed",
        edit,
        pattern="compute_bound",
        requeue=x.served is not None,
        scale=k,
        params={"k": k},
    )


def handlers_as_calm(x: Inputs) -> Lever | None:
    """The wait for a handler thread as in calm stretches: each call of a stretch whose mean wait is
    over twice the typical stretch's waits as a call of a calm stretch, over every instance of the
    services whose calls queued (handlers.every_call: a shared listening socket's waits included)."""
    h = x.handlers
    if h is None:
        return None
    f = x.frame
    server, client, net = every_call(f, h)
    if len(server) < 2 * CALM_BINS:
        return None
    wait = np.maximum(f.start[server] - f.start[client] - net, 0).astype(np.float64)
    calm = _calm(f.start[client] + net, wait)
    if calm is None:
        return None
    pick = np.nonzero(calm)[0][x.rng(8).integers(0, int(calm.sum()), int((~calm).sum()))]
    rows = np.nonzero(~calm)[0]
    edit = Edit.none(len(f))
    edit.cut_before[server[rows]] = np.maximum(wait[rows] - wait[pick], 0)
    # served as a calm call of its kind (a drawn one of the same name) where the busy calls of that
    # name were themselves slower (a quarter or more): a backlog's threads shared the process with
    # more of their kind (an interpreter lock, the cores), its spans stretched
    name = f.name[server]
    ratio = np.ones(len(f))
    for code in np.unique(name[rows]).tolist():
        kind = rows[name[rows] == code]
        calm_kind = np.nonzero(calm & (name == code))[0]
        busy_mean = float(f.dur[server[kind]].mean())
        if len(calm_kind) and busy_mean > LATENCY_CALM_RATIO * float(f.dur[server[calm_kind]].mean()):
            drawn = calm_kind[x.rng(9).integers(0, len(calm_kind), len(kind))]
            # at most its own time: scaled up, a drawn call's slowness from another cause would come
            # back beside that cause's own fix
            ratio[server[kind]] = np.minimum(f.dur[server[drawn]] / np.maximum(f.dur[server[kind]], 1), 1.0)
    scale_subtrees(x, ratio, edit)
    names = sorted({f.names[k] for k in f.name[server].tolist()})
    return Lever(
        "queue_as_calm:handlers",
        "The wait for a handler thread as in calm stretches (peaks absorbed)",
        CAPACITY,
        "each call of a stretch whose mean wait for a handler thread is over twice the typical stretch's "
        "waits as a call of a calm stretch (drawn from the run): the peaks met with threads or admission",
        edit,
        pattern="queueing",
        span_name=names[0] if len(names) == 1 else None,
        handlers_set=True,
        params={"disturbed_share": round(float((~calm).mean()), 4)},
    )


JOINED_LATE = 0.1  # an instance whose first span comes after this share of the run joined mid-run


def scaled_out_early(x: Inputs, finding: dict) -> Lever | None:
    """A scale-out that came late: instances named cold that joined mid-run (an autoscaler's), while
    the calls of their service queued for handler threads. The fix: the instances there (and warm)
    before the queue built: every call of the service's instances is routed to one of them at random
    (old or new: requests spread evenly) and replayed through their threads, each cold request's spans
    taking a warm one's time (the prewarmed lever's edit)."""
    from tailscope.analysis.whatif.cold_levers import prewarmed

    h, f = x.handlers, x.frame
    warm = prewarmed(x, finding) if h is not None else None
    if warm is None or h is None:
        return None
    named = ((finding.get("evidence") or {}).get("stats") or {}).get("instances") or []
    codes = [f.instances.index(n) for n in named if n in f.instances]
    first_seen = np.full(len(f.instances), np.iinfo(np.int64).max)
    np.minimum.at(first_seen, f.instance, f.start.astype(np.int64))
    service_of = np.full(len(f.instances), -1)
    service_of[f.instance] = f.service
    t0, t1 = int(f.start.min()), int((f.start + f.dur).max())
    late = [i for i in codes if first_seen[i] > t0 + JOINED_LATE * (t1 - t0) and i in h.slots]
    if not late:
        return None
    services = {int(service_of[i]) for i in late}
    pools = np.array(sorted(p for p in h.slots if p >= 0 and int(service_of[p]) in services))
    moved = np.isin(h.instance, pools)
    route = h.instance.copy()
    route[moved] = pools[x.rng(26).integers(0, len(pools), int(moved.sum()))]
    return Lever(
        "scaled_out_early",
        f"Scale-out ready before the queue: {len(late)} instance(s) that joined mid-run serving, warm, "
        "from the start",
        CAPACITY,
        "the instances that joined mid-run (cold, while the calls queued for threads) are there from the "
        "start: each call of their service goes to one of its instances at random (requests spread "
        "evenly) and the run's arrivals are replayed through their threads, the cold requests' spans "
        "taking warm ones' times (a model: the arrivals as measured, the scale-out's timing changed)",
        warm.edit,
        pattern="cold_start",
        requeue=warm.requeue,
        handler_pools=route,
        params={"instances_joined_late": len(late), "instances": len(pools)},
    )


def stretches(when: np.ndarray) -> np.ndarray:
    """Per value, which of the run's CALM_BINS equal stretches of `when` (arrival, start) it falls in."""
    t = when.astype(np.float64)
    span = float(t.max() - t.min()) or 1.0
    return np.minimum(((t - t.min()) / span * CALM_BINS).astype(np.int64), CALM_BINS - 1)


def _calm(when: np.ndarray, wait: np.ndarray, ratio: float = CALM_RATIO, deep: bool = False
          ) -> np.ndarray | None:
    """Per wait, whether it falls in a calm stretch of the run (CALM_BINS stretches by `when`): one whose
    mean wait is at most CALM_RATIO times the typical stretch's, the typical being the quieter
    quarter's (a backlog can outlast half the run: the median stretch is then a backlogged one); `deep`:
    the quieter tenth's where the quarter's is over `ratio` times it (a plan flipped, a job started
    early and ran on: over three quarters of the run disturbed; for the waits a lever redraws, not
    the steps it reads as held). None where every wait is calm or fewer than 20 are."""
    b = stretches(when)
    count = np.bincount(b, minlength=CALM_BINS)
    mean = np.bincount(b, weights=wait, minlength=CALM_BINS) / np.maximum(count, 1)
    typical = float(np.quantile(mean[count > 0], CALM_QUANTILE))
    quieter = float(np.quantile(mean[count > 0], QUIETER_QUANTILE))
    if deep and typical > ratio * max(quieter, 1.0):  # the quieter quarter disturbed too
        typical = quieter
    calm = mean[b] <= ratio * max(typical, 1.0)
    return None if calm.all() or calm.sum() < 20 else calm


def requests_as_calm(x: Inputs) -> Lever | None:
    """A queueing finding with no wait span of its own and no queue the run shows (no batcher, no
    handler threads seen waiting: a thread pool's global queue, every await's completion waiting in
    it): each request of a stretch whose mean latency is over twice the quieter quarter's takes the
    time of a request of a calm stretch (drawn from the run, of the same route where one is), its
    wait to be accepted (the gap after its caller's call began) cut to that one's. Every step of the
    request shrinks by the same ratio (its critical path with it), so that another fix composed with
    this one still changes its own spans."""
    reqs, f, lay = x.frame.requests, x.frame, x.lay
    if reqs is None or len(reqs) < 2 * CALM_BINS:
        return None
    root = reqs.root
    gap = np.where(reqs.client_span >= 0, lay.gap[root], 0).astype(np.float64)
    calm = _calm(reqs.arrival, f.dur[root] + gap, LATENCY_CALM_RATIO)
    if calm is None:
        return None
    rows = np.nonzero(~calm)[0]
    pick = np.nonzero(calm)[0][x.rng(28).integers(0, int(calm.sum()), len(rows))]
    route = f.name[root]
    for code in np.unique(route[rows]).tolist():  # a calm request of the same route where there is one
        mine = route[rows] == code
        calm_route = np.nonzero(calm & (route == code))[0]
        if len(calm_route):
            pick[mine] = calm_route[x.rng(30).integers(0, len(calm_route), int(mine.sum()))]
    edit = Edit.none(len(f))
    # the request's every step scaled to the drawn calm request's latency (the whole critical path
    # shrinks by the ratio): another fix composed with this one still finds its spans to change
    ratio = np.ones(len(f))
    ratio[root[rows]] = np.minimum(f.dur[root[pick]] / np.maximum(f.dur[root[rows]], 1), 1.0)
    scale_subtrees(x, ratio, edit)
    edit.cut_before[root[rows]] = np.maximum(gap[rows] - gap[pick], 0)
    name = f.names[f.name[root[0]]]
    return Lever(
        f"queue_as_calm:{name}",
        f"'{name}' as in calm stretches (peaks absorbed)",
        CAPACITY,
        "no span shows the queue: each request of a stretch whose mean latency is over twice the quieter "
        "quarter's takes the time of a request in a calm stretch, its wait to be accepted included (drawn "
        "from the run): the peaks met with capacity",
        edit,
        pattern="queueing",
        span_name=name,
    )


def scale_subtrees(x: Inputs, ratio: np.ndarray, edit: Edit) -> None:
    """Each span with a ratio other than 1 and everything below it take that multiple of their time:
    leaves their durations, parents their own time after their children, every child the gap before
    it (the critical path scales by the ratio). A span's own duration is never set, so another fix composed
    with this one still changes the spans below it."""
    f, lay = x.frame, x.lay
    factor = ratio.astype(np.float64).copy()
    child = np.nonzero(lay.parent >= 0)[0]
    depth = f.depth[child]
    for d in np.unique(depth).tolist():  # top down: a child takes its parent's ratio
        sel = child[depth == d]
        up = factor[lay.parent[sel]]
        factor[sel] = np.where(up != 1.0, up, factor[sel])
    rows = np.nonzero(factor != 1.0)[0]
    shrink = 1.0 - factor[rows]  # negative where a drawn calm call took longer: time added
    parent = lay.has_children[rows]
    edit.cut_after[rows[parent]] += lay.trailing[rows[parent]] * shrink[parent]
    edit.dur[rows[~parent]] = np.fmin(edit.dur[rows[~parent]], f.dur[rows[~parent]] * factor[rows[~parent]])
    inner = rows[lay.parent[rows] >= 0]
    inner = inner[factor[lay.parent[inner]] != 1.0]  # a top span's own gap: its caller's, not scaled
    edit.cut_before[inner] += lay.gap[inner] * (1.0 - factor[inner])


def no_queue_in_sight(x: Inputs, levers: list) -> bool:
    """Whether a queueing finding has no queue lever to answer it (requests_as_calm then): no
    'queue as calm' lever at all, or only the handler threads' one while the queues it sees are at
    other services than the findings name (a front's workers held by a backend whose own waits no
    traced call shows: an untraced client fills its workers)."""
    # a pool's holders as calm (pool_levers.pool_as_calm) fixes the holders, not a queue it sees; a
    # named span whose own times are calm throughout and only the gaps before it were cut shows none
    keys = [lever.key for lever in levers if lever is not None and lever.key.startswith("queue_as_calm")
            and not lever.key.startswith("queue_as_calm_held") and lever.params.get("waits_redrawn") != 0]
    if not keys:
        return True
    if keys != ["queue_as_calm:handlers"] or x.handlers is None:
        return False
    f = x.frame
    named = set()
    for fd in x.findings:
        if fd.get("pattern") == "queueing":
            stats = (fd.get("evidence") or {}).get("stats") or {}
            named |= {s.strip() for s in str(stats.get("service") or "").split(",") if s.strip()}
    seen = {f.services[k] for k in np.unique(f.service[x.handlers.server]).tolist()}
    return bool(named) and not named & seen
