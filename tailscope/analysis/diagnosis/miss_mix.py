"""Whether a cache's steady misses make the tail only through how many lookups a request makes
(cache_miss's cap on a stationary miss mix).

Mechanism. A lookup that misses sends its caller down the slow path (the store, a model provider);
a hit answers at once. Where every lookup misses with the same chance, independently of the request
that makes it, a request that makes more lookups (a loop of more steps, a page of more items) meets
more misses, and the tail is made of such requests and of the unlucky draws among them: the cache
costs every lookup alike, what makes the tail is the request's shape. A cache is a cause of the tail
where its misses fall on the tail's requests more often than that: some requests' keys miss
together (a cold tenant, a flushed namespace, a key space the cache cannot hold), so the tail's
lookups miss at a higher rate than any request making as many lookups would by chance.

Where every request makes one lookup (or the tail's as many as the body's), a tail made of misses is
what the cache does to the requests, and stays the cache's (a cause, as before).

Statistic. The lookups' durations (each with its hit or miss) are dealt again at random among the
run's lookups, each request keeping how many it makes and everything else it spends (its latency
less its lookups' time plus the time of the lookups it is dealt); the tail is taken again at the
same quantile, and its share of lookups that missed is the null's. Repeated REPEATS times. The
observed tail's share is compared with the null's mean and spread: at or below mean + Z_MARGIN sd
(or ABS_MARGIN, whichever is larger), with the tail's requests making >= MORE_LOOKUPS times the body's
lookups, the stationary mix through the requests' shape explains which requests are the tail.
"""

from __future__ import annotations

import numpy as np

from tailscope.analysis.diagnosis.model import Context

REPEATS = 24
Z_MARGIN = 3.0  # the observed tail's miss share above the null's mean by more than this many sd
ABS_MARGIN = 0.05  # ... and by more than this (a share of lookups): misses that fall on the tail
MORE_LOOKUPS = 1.25  # the tail's requests make this many times the body's lookups: the request's shape


def tail_miss_shares(ctx: Context, spans: np.ndarray, slow: np.ndarray) -> tuple[float, float, float, float]:
    """(the tail requests' share of their lookups that missed, the same under the null: its mean and
    standard deviation, the tail requests' mean number of lookups over the body's). `spans`: the
    lookups (one span name inside requests), `slow`: their misses."""
    f = ctx.frame
    sp = ctx.split
    n_req = len(f.requests)
    req = f.request[spans]
    ok = req >= 0
    req, d, miss = req[ok], f.dur[spans][ok].astype(np.float64), slow[ok]
    lookups = np.bincount(req, minlength=n_req).astype(np.float64)
    if not sp.tail.any() or not sp.body.any() or lookups[sp.tail].sum() == 0:
        return 0.0, 0.0, 0.0, 1.0
    more = sp.mean(lookups, sp.tail) / max(sp.mean(lookups, sp.body), 1e-9)
    observed = float(np.bincount(req, weights=miss, minlength=n_req)[sp.tail].sum() / lookups[sp.tail].sum())
    latency = f.requests.latency.astype(np.float64)
    rest = latency - np.bincount(req, weights=d, minlength=n_req)  # what each request spends besides
    rng = np.random.default_rng(len(spans))  # the same null for the same run, whatever ran before
    shares = np.empty(REPEATS)
    for i in range(REPEATS):
        order = rng.permutation(len(d))
        dealt = rest + np.bincount(req, weights=d[order], minlength=n_req)
        tail = dealt >= np.quantile(dealt, sp.quantile)
        misses = np.bincount(req, weights=miss[order], minlength=n_req)
        shares[i] = misses[tail].sum() / max(lookups[tail].sum(), 1.0)
    return observed, float(shares.mean()), float(shares.std()), float(more)


def mix_explains_tail(observed: float, null_mean: float, null_sd: float, more: float) -> bool:
    """Whether the tail is made of requests making more lookups (`more`: the tail's mean number over
    the body's, >= MORE_LOOKUPS) whose lookups miss no more often than a stationary mix dealt at random
    would make them: the misses fall on the tail by the requests' number of lookups and chance. Where
    the tail's requests make as many lookups as the body's, a tail of misses is the cache's."""
    return more >= MORE_LOOKUPS and observed <= null_mean + max(Z_MARGIN * null_sd, ABS_MARGIN)
