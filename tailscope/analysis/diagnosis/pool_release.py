"""Whether a call's long waits end when another caller gives a pooled connection back.

Mechanism. A pool of connections to a peer shared by callers (PgBouncer's transaction pool in front
of a database, a per-process socket pool) makes a call wait for a connection while others hold all of
them. The call cannot start until one is given back: when another caller's last call to that peer on
its connection ends (the COMMIT that ends a transaction, a request's reply). So, for a CLIENT span name
whose callee is not traced (the wait and the peer's work cannot be told apart by the callee's span):
its long calls (over LONG x its median and 1 ms) end, less their own usual round trip (the median),
within a moment (HANDOFF_NS, or the median) after the end of a *release*: a call to the same peer
(spans of the names whose peer attribute is the waiter's) that is the last such call of its parent,
made for another request. A slow peer makes its calls long whatever the others do; their ends do
not follow other callers' releases more often than a moment picked at random would (the releases'
rate x the window). The share is (observed - chance) / (1 - chance). Where the long calls' callee
is traced after all (a SERVER span under most of them) and their extra time is mostly (>= half) the
callee's own (its span over its median), the callee was slow, not the connection late: no pool wait
(a callee whose workers wait on a stopped store frees them together, so its answers follow each
other's ends too).
"""

from __future__ import annotations

import numpy as np

from tailscope.analysis.diagnosis.frame import KIND_CLIENT, KIND_SERVER
from tailscope.analysis.diagnosis.model import Context

HANDOFF_NS = 500_000
LONG = 5.0
MIN_WAITS = 20
MAX_CHANCE = 0.5  # a window that some release covers half the time by chance tells nothing
SHARED = "pool_release:by_grouping"  # notes: per name, {per caller instance?: hand-off share}
PEER_KEYS = ("server.address", "net.peer.name", "peer.service", "db.instance", "http.host")


def peer_of(ctx: Context, code: int) -> str | None:
    """The most common peer named on the spans of a name (server.address or an older convention); once
    per name and run (head_of_line, transaction_waits and pool_release each ask for the same names)."""
    peers = ctx.notes.setdefault("pool_release:peers", {})
    if code not in peers:
        peers[code] = _peer_of(ctx, code)
    return peers[code]


def _peer_of(ctx: Context, code: int) -> str | None:
    for key in PEER_KEYS:
        idx, values = ctx.frame.attributes(code).get(key, (np.zeros(0, np.int64), []))
        if len(idx):
            uniq, counts = np.unique(np.array([str(v) for v in values]), return_counts=True)
            return str(uniq[int(np.argmax(counts))])
    return None


def pool_sentence(share: float) -> str:
    """The evidence's words for a pool wait found by release_handoff."""
    return (f"; {share:.0%} of its long calls (beyond chance) start their round trip as another request's "
            "last call to the same peer ends: a wait for a pooled connection others hold (a pool run dry), "
            "not for the peer's work")


def callee_own(ctx: Context, spans: np.ndarray, waiters: np.ndarray, median: float) -> float:
    """The share of the long calls' extra time (over the calls' median) spent in their callee's own
    SERVER span over its median; 0 where most long calls have no traced callee."""
    f = ctx.frame
    servers = np.nonzero((f.kind == KIND_SERVER) & (f.parent >= 0))[0]
    servers = servers[np.isin(f.parent[servers], spans)]
    if not len(servers):
        return 0.0
    child = np.full(len(f), -1, np.int64)
    child[f.parent[servers]] = servers
    mine = child[waiters]
    if float((mine >= 0).mean()) < 0.5:
        return 0.0
    usual = float(np.median(f.dur[servers]))
    extra = np.maximum(f.dur[waiters].astype(np.float64) - median, 0.0)
    far = np.where(mine >= 0, np.maximum(f.dur[np.maximum(mine, 0)].astype(np.float64) - usual, 0.0), 0.0)
    return float(np.minimum(far, extra).sum() / max(extra.sum(), 1.0))


def shared_pool(ctx: Context, code: int) -> bool:
    """Whether release_handoff found the waits of `code` ended by releases of the callers on *other*
    instances, not of their own: counted over every caller the hand-off holds (>= 0.5), counted per
    caller instance it does not (< 0.5). A pool inside a process (HikariCP, a socket pool) is given back
    by that process's own calls; one that the callers' own releases do not explain is shared by all of
    them outside their processes (a pooler such as PgBouncer in front of a database, a proxy's upstream
    connections): a queue for its N server connections, which any of the N ends, growing with every
    caller's arrivals; not a lock held inside the caller."""
    got = ctx.notes.get(SHARED, {}).get(code, {})
    return got.get(False, 0.0) >= 0.5 and got.get(True, 0.0) < 0.5


def release_handoff(ctx: Context, code: int, spans: np.ndarray) -> float:
    """Share of the long calls among `spans` (of name `code`, mostly CLIENT spans) that start their own
    round trip right after another request gave a connection to the same peer back; NaN where the peer
    is unknown, the spans are no calls or the long calls are too few."""
    f = ctx.frame
    peer = peer_of(ctx, code)
    if peer is None or len(spans) < MIN_WAITS or float((f.kind[spans] == KIND_CLIENT).mean()) < 0.5:
        return float("nan")
    d = f.dur[spans].astype(np.float64)
    median = float(np.median(d))
    waiters = spans[d > max(LONG * median, 1e6)]
    if len(waiters) < MIN_WAITS or callee_own(ctx, spans, waiters, median) >= 0.5:
        return float("nan")
    client = np.nonzero((f.kind == KIND_CLIENT) & (f.request >= 0) & (f.parent >= 0))[0]
    names = [c for c in np.unique(f.name[client]).tolist() if peer_of(ctx, c) == peer]
    calls = client[np.isin(f.name[client], names)]
    # the last call to the peer under each parent: the connection goes back when it ends
    order = np.lexsort((f.end[calls], f.parent[calls]))
    calls = calls[order]
    last = calls[np.r_[f.parent[calls][1:] != f.parent[calls][:-1], True]]
    if len(last) < MIN_WAITS:
        return float("nan")
    # the waiter's own round trip (about the median) ends it: the release comes just before that
    # starts, or while it runs (the releaser's reply and the waiter's take their own time)
    before, after = median + HANDOFF_NS, HANDOFF_NS / 2
    best = float("nan")
    # one pool for every caller (a pooler in front of a database) or one per caller instance
    for per_instance in (False, True):
        scale = int(f.end.max() + before + after) + 2 + 4 * max(CLOCK_PERIODS_NS)  # room for clock_chance
        group = f.instance[last].astype(np.int64) if per_instance else np.zeros(len(last), np.int64)
        mine = f.instance[waiters].astype(np.int64) if per_instance else np.zeros(len(waiters), np.int64)
        ends = np.sort(group * scale + f.end[last])
        at = mine * scale + f.end[waiters]
        found = np.searchsorted(ends, at + after, side="right") - np.searchsorted(ends, at - before,
                                                                                  side="left")
        # a request's own last call frees no slot for itself: those in the window are left out
        own = _own_releases(f, last, waiters, before, after, ctx.n_requests)
        observed = float(((found - own) > 0).mean())
        # chance: a moment lands within the window of some release of its group
        per_group = np.bincount(group, minlength=int(group.max()) + 1).astype(np.float64)
        lo = np.full(len(per_group), np.inf)
        hi = np.zeros(len(per_group))
        np.minimum.at(lo, group, f.end[last].astype(np.float64))
        np.maximum.at(hi, group, f.end[last].astype(np.float64))
        rate = per_group / np.maximum(hi - np.where(np.isfinite(lo), lo, 0.0), 1.0)
        chance = float(np.mean(1.0 - np.exp(-rate[np.minimum(mine, len(rate) - 1)] * (before + after))))
        # ... or lands there as often a whole clock period earlier or later: a server that tells its
        # callers to retry at the next second lines the waits' ends and the other calls' ends up with
        # the clock, not with one another (and busy stretches have denser releases than the run's mean)
        chance = max(chance, clock_chance(ends, at, before, after))
        if chance > MAX_CHANCE:
            continue  # releases too dense for the window: the test has no power
        share = max(0.0, (observed - chance) / max(1.0 - chance, 1e-9))
        ctx.notes.setdefault(SHARED, {}).setdefault(code, {})[per_instance] = share
        best = share if np.isnan(best) else max(best, share)
    return best


CLOCK_PERIODS_NS = (100_000_000, 1_000_000_000)  # rate limits and retry-after hints count by these
CLOCK_SHIFTS = (-2, -1, 1, 2)


def clock_chance(ends: np.ndarray, at: np.ndarray, before: float, after: float) -> float:
    """How often a waiter's window holds a release when moved by whole clock periods (100 ms, 1 s;
    one and two periods either way), for the period where that is most often: the share a hand-off
    must beat where the releases and the waits both keep time with the clock (a retry-after that
    points at the next second), or bunch in busy stretches. A hand-off pairs a wait with one
    release: moved a period away, the window finds only the releases' local density."""
    best = 0.0
    for period in CLOCK_PERIODS_NS:
        hits = []
        for k in CLOCK_SHIFTS:
            moved = at + k * period
            n = np.searchsorted(ends, moved + after, side="right") - np.searchsorted(ends, moved - before,
                                                                                    side="left")
            hits.append(float((n > 0).mean()))
        best = max(best, float(np.mean(hits)))
    return best


def _own_releases(f, last: np.ndarray, waiters: np.ndarray, before: float, after: float,
                  n: int) -> np.ndarray:
    """Per waiter: how many of its own request's releases end within its window."""
    horizon = int(f.end.max() + before + after) + 2
    if horizon * (n + 1) >= 2**62:  # a run too long to key by request and time: none left out
        return np.zeros(len(waiters), np.int64)
    mine = np.sort(f.request[last].astype(np.int64) * horizon + f.end[last])
    key = f.request[waiters].astype(np.int64) * horizon + f.end[waiters]
    return np.searchsorted(mine, key + int(after), side="right") - np.searchsorted(mine, key - int(before),
                                                                                   side="left")
