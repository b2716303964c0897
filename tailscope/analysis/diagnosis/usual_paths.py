"""The part of a call's wire gap that is its path's usual one, the same in every part of the run.

A service spread over locations (points of presence, regions, zones) has callers far from their
callees: each such path's every call crosses the same distance, so its gaps are long beside the run's
median however healthy the network is. That spread is the topology, not a cause: it is there in every
minute of the run, on every call of the path. The wire's causes show against the path itself: a
change over time (a failover to a farther region, a congested link, a storm of reconnects), or some
of the path's calls far beyond its own usual gap (retransmit timers, handshakes, a subset of calls
sent farther). `usual_path_share` is the share of the large gaps' excess (over the run's median gap)
that their path's usual gap accounts for, counting only paths whose usual gap holds in every part of
the run they called in and that called in most of it (a path that appears for a while, as one to the
region a failover sends calls to, is a change, not the topology), and whose calls sit close to that
usual gap (a distance; a link whose jitter spreads its calls far apart is a cause, however steady)."""

from __future__ import annotations

import numpy as np

BINS = 8  # parts of the run
MIN_CALLS = 20  # a path's usual gap from at least this many calls
MIN_PER_BIN = 4  # a part of the run judged from at least this many of the path's calls
PRESENT = 0.75  # a path that called in at least this share of the parts its caller called in
TOLERANCE = 0.25  # a part's median gap within this share of the path's usual gap (or ...)
TOLERANCE_NS = 3_000_000  # ... within 3 ms of it
TIGHT = 0.25  # a distance: the path's interquartile range within a quarter of its usual gap


def usual_path_share(f, cli: np.ndarray, srv: np.ndarray, g: np.ndarray, big: np.ndarray,
                     p50: float) -> float:
    """Share of the large gaps' excess over `p50` that is their path's usual gap (a path: the calling
    instance and the called instance), where that usual gap is the same in every part of the run.
    `cli`, `srv`: the CLIENT spans and their SERVER children; `g`: their gaps; `big`: the large ones."""
    excess = np.maximum(g[big] - p50, 0.0)
    total = float(excess.sum())
    if total <= 0 or len(g) < MIN_CALLS:
        return 0.0
    caller = f.instance[cli].astype(np.int64)
    path = caller * (int(f.instance.max()) + 1) + f.instance[srv].astype(np.int64)
    paths, inverse = np.unique(path, return_inverse=True)
    inverse = inverse.reshape(-1)
    t = f.start[cli]
    t0, span = int(t.min()), max(int(t.max() - t.min()), 1)
    part = np.minimum((t - t0) * BINS // span, BINS - 1).astype(np.int64)
    # the parts each caller called in, as a bit mask per caller (BINS bits)
    bits = np.zeros(int(caller.max()) + 1, np.int64)
    np.bitwise_or.at(bits, caller, np.left_shift(1, part))
    order = np.argsort(inverse, kind="stable")
    bounds = np.searchsorted(inverse[order], np.arange(len(paths) + 1))
    usual = np.full(len(paths), np.nan)
    for k in np.unique(inverse[big]).tolist():  # only the paths that hold large gaps matter
        mine = order[bounds[k]:bounds[k + 1]]
        if len(mine) < MIN_CALLS:
            continue
        gk, pk = g[mine], part[mine]
        m = float(np.median(gk))
        per_part = np.bincount(pk, minlength=BINS)
        judged = np.nonzero(per_part >= MIN_PER_BIN)[0].tolist()
        called = bin(int(bits[caller[mine[0]]])).count("1")
        if int((per_part > 0).sum()) < PRESENT * called or len(judged) < 2:
            continue
        tol = max(TOLERANCE * m, TOLERANCE_NS)
        q25, q75 = np.quantile(gk, [0.25, 0.75])
        # a distance: the path's calls close to its usual gap (a jittery link spreads them: a cause)
        tight = float(q75 - q25) <= TIGHT * m
        if tight and all(abs(float(np.median(gk[pk == b])) - m) <= tol for b in judged):
            usual[k] = m
    own = usual[inverse[big]]
    part_usual = np.where(np.isnan(own), 0.0, np.clip(own - p50, 0.0, excess))
    return float(part_usual.sum() / total)
