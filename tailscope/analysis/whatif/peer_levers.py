"""One process's pauses and the backlog they leave, answered by its peers (see levers.py). A process
that pauses often (a leak filling the heap: back-to-back collections, allocation stalls) delays more
than the spans in flight through a pause: a single-threaded event loop (or an executor's queue)
runs, once the pause ends, every callback and request that queued during it, one after another, so
requests accepted well after the pause still wait. `no_gc_stalls` removes the pauses from the spans
they cover and leaves that drain. Where the pauses sit on a few instances of a service whose other
instances serve the same routes at the same time, those peers show what the paused ones' requests
would take without them: each request of a paused instance in a stretch where its requests were
slower than its peers' takes the time of a peer's request of the same route in the same stretch."""

from __future__ import annotations

import numpy as np

from tailscope.analysis.whatif.levers import SOFTWARE, Inputs, Lever, stall_edit
from tailscope.analysis.whatif.queue_levers import CALM_BINS, LATENCY_CALM_RATIO, scale_subtrees, stretches

PAUSED_RATIO = 5.0  # an instance pausing this many times as long as its service's median instance
MIN_PEERS = 2  # instances of the service that did not pause, to take times from


def paused_instances(x: Inputs) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(paused, peers, per request the instance of the paused instances' service it went through, -1
    where none): the instances that hold the pauses (stall time at least PAUSED_RATIO times the median
    instance's of their service, and over 1 % of the run) and the other instances of their service
    that requests go through (a sidecar's or a gateway's root above them: the request is the one
    served by the instance below); empty where no such service has MIN_PEERS peers."""
    f, reqs = x.frame, x.frame.requests
    empty = np.zeros(0, np.int64)
    if x.stalls is None or len(x.stalls[0]) == 0 or reqs is None:
        return empty, empty, empty
    inst, s, e = x.stalls
    stalled = np.bincount(inst, weights=(e - s).astype(np.float64), minlength=len(f.instances))
    span = float(reqs.arrival.max() - reqs.arrival.min()) or 1.0
    in_req = f.request >= 0
    served_by = np.full(len(reqs), -1, np.int64)
    paused, peers = [], []
    for svc in np.unique(f.service[np.isin(f.instance, np.nonzero(stalled > 0)[0])]).tolist():
        rows = in_req & (f.service == svc)
        mine = np.unique(f.instance[rows])
        if len(mine) <= MIN_PEERS:
            continue
        typical = float(np.median(stalled[mine]))
        hot = mine[(stalled[mine] >= PAUSED_RATIO * typical) & (stalled[mine] > 0.01 * span)]
        rest = np.setdiff1d(mine, hot)
        if len(hot) and len(rest) >= MIN_PEERS:
            paused.append(hot)
            peers.append(rest)
            served_by[f.request[rows]] = f.instance[rows]
    if not paused:
        return empty, empty, empty
    return np.concatenate(paused), np.concatenate(peers), served_by


def no_pauses_as_peers(x: Inputs) -> Lever | None:
    """No pauses (`no_gc_stalls`' edit), and on the paused instances the drain behind them gone: each
    of their requests in a stretch (CALM_BINS by arrival) where their mean latency is over a quarter
    above their peers' takes the latency of a peer's request of the same route in that stretch (any
    peer request of the stretch where its route has none), every step scaled to it and its wait to be
    accepted cut to that one's (queue_levers.scale_subtrees, as `requests_as_calm`)."""
    paused, peers, served_by = paused_instances(x)
    if len(paused) == 0:
        return None
    f, lay, reqs = x.frame, x.lay, x.frame.requests
    root = reqs.root
    gap = np.where(reqs.client_span >= 0, lay.gap[root], 0).astype(np.float64)
    lat = f.dur[root] + gap
    b = stretches(reqs.arrival)
    on_paused = np.isin(served_by, paused)
    on_peer = np.isin(served_by, peers)

    def mean(mask: np.ndarray) -> np.ndarray:
        count = np.bincount(b[mask], minlength=CALM_BINS)
        return np.bincount(b[mask], weights=lat[mask], minlength=CALM_BINS) / np.maximum(count, 1), count

    m_paused, _ = mean(on_paused)
    m_peer, n_peer = mean(on_peer)
    disturbed = (n_peer > 0) & (m_paused > LATENCY_CALM_RATIO * m_peer)
    rows = np.nonzero(on_paused & disturbed[b])[0]
    if len(rows) == 0:
        return None
    rng = x.rng(34)
    pick = np.empty(len(rows), np.int64)
    route = f.name[root]
    for k in np.unique(b[rows]).tolist():
        here = rows[b[rows] == k]
        bin_peers = np.nonzero(on_peer & (b == k))[0]
        for code in np.unique(route[here]).tolist():
            mine = np.nonzero(b[rows] == k)[0][route[here] == code]
            same = bin_peers[route[bin_peers] == code]
            pool = same if len(same) else bin_peers
            pick[mine] = pool[rng.integers(0, len(pool), len(mine))]
    edit = stall_edit(x, x.stalls)
    mask = np.isin(f.request, rows)  # the redrawn requests' spans: scaled, not cut twice
    edit.dur[mask], edit.cut_before[mask], edit.cut_after[mask] = np.nan, 0.0, 0.0
    ratio = np.ones(len(f))
    ratio[root[rows]] = np.minimum(f.dur[root[pick]] / np.maximum(f.dur[root[rows]], 1), 1.0)
    scale_subtrees(x, ratio, edit)
    edit.cut_before[root[rows]] = np.maximum(gap[rows] - gap[pick], 0)
    return Lever(
        "no_gc_stalls_as_peers",
        f"No pauses, and no backlog behind them on the {len(paused)} paused instance(s)",
        SOFTWARE,
        "the pauses removed (as 'no GC pauses'), and each request of a paused instance in a stretch where "
        "its requests were over a quarter slower than its peers' takes the time of a peer's request of the "
        "same route in that stretch (drawn from the run): the queue that drained after each pause gone",
        edit,
        pattern="gc_pause",
        params={"paused_instances": len(paused), "requests_redrawn": len(rows)},
    )

