"""Small statistics in numpy (no SciPy): tail attribution, rank correlation, a 1-D two-component
Gaussian mixture, robust fits and the logistic map that turns a test statistic into a confidence."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


def logistic(x: float, mid: float, scale: float) -> float:
    """0.5 at `mid`, ~0.88 at mid + 2 * scale, ~0.12 at mid - 2 * scale."""
    z = (x - mid) / scale
    return float(1.0 / (1.0 + math.exp(-max(min(z, 50.0), -50.0))))


# A cause is material when it carries this share of the tail excess or more (the report's own rule,
# shared with unexplained.py and bench/ground_truth.py): a mechanism that is surely present is named
# at >= 0.5 from there on, beside a larger cause as well as alone.
MATERIAL_SHARE = 0.15


def material_weight(share: float) -> float:
    """Weight of a surely present mechanism by its share of the tail excess: 0.5 at MATERIAL_SHARE,
    0.12 at 0.07, 0.88 at 0.23."""
    return logistic(share, MATERIAL_SHARE, 0.04)


def clamp01(x: float) -> float:
    return float(min(1.0, max(0.0, x)))


@dataclass(frozen=True)
class TailSplit:
    """Which requests are the tail and which the body, and the mean latency excess between them."""

    tail: np.ndarray  # bool per request
    body: np.ndarray  # bool per request
    threshold_ns: float
    quantile: float
    excess_ns: float  # mean tail latency - mean body latency
    # how many requests each stands for (a head-sampled run: tailscope.sample.weight); None: 1 each
    weight: np.ndarray | None = None

    def mean(self, per_request: np.ndarray, mask: np.ndarray) -> float:
        """Mean of a per-request quantity over `mask`, weighted by the requests' weights."""
        if self.weight is None:
            return float(per_request[mask].mean())
        return float(np.average(per_request[mask], weights=self.weight[mask]))


def weighted_quantile(values: np.ndarray, weight: np.ndarray, q: float) -> float:
    """The smallest value whose cumulative weight (in value order) reaches q of the total, less a
    relative 1e-12: the views' weighted quantile (waterfall_weighted.sql)."""
    order = np.argsort(values, kind="stable")
    cumulative = np.cumsum(weight[order])
    at = int(np.searchsorted(cumulative, q * cumulative[-1] * (1 - 1e-12), side="left"))
    return float(values[order][min(at, len(values) - 1)])


def tail_split(latency: np.ndarray, weight: np.ndarray | None = None) -> TailSplit:
    """Tail: at or above p99 (p95 or the top 10 requests for small runs). Body: the p25-p75 band.
    With `weight` (requests that stand for others: a head-sampled run; None or all 1: unweighted)
    the quantiles and means are weighted and the run's size is what it stands for, so the tail and
    body are those of the population the sample was drawn from."""
    if weight is not None and (len(weight) == 0 or bool((weight == 1).all())):
        weight = None
    n = len(latency) if weight is None else round(float(weight.sum()))
    q = 0.99 if n >= 2000 else (0.95 if n >= 200 else max(0.5, 1.0 - 10.0 / max(n, 1)))
    lat = latency.astype(np.float64)
    if len(latency) == 0:
        return TailSplit(np.zeros(0, bool), np.zeros(0, bool), 0.0, q, 0.0)
    if weight is None:
        thr = float(np.quantile(lat, q))
        lo, hi = np.quantile(lat, [0.25, 0.75])
    else:
        thr, lo, hi = (weighted_quantile(lat, weight, p) for p in (q, 0.25, 0.75))
    tail = lat >= thr
    body = (lat >= lo) & (lat <= hi)
    if not body.any():
        body = ~tail
    split = TailSplit(tail, body, thr, q, 0.0, weight)
    if tail.any() and body.any():
        split = TailSplit(tail, body, thr, q, split.mean(lat, tail) - split.mean(lat, body), weight)
    return split


def excess_share(per_request: np.ndarray, split: TailSplit) -> float:
    """Share of the tail's latency excess carried by a per-request quantity (can exceed [0, 1])."""
    if split.excess_ns <= 0 or not split.tail.any() or not split.body.any():
        return 0.0
    difference = split.mean(per_request, split.tail) - split.mean(per_request, split.body)
    return float(difference / split.excess_ns)


def per_request_sum(request: np.ndarray, values: np.ndarray, mask: np.ndarray, n_requests: int) -> np.ndarray:
    """Sum of `values` over the spans selected by `mask`, per request (spans outside requests dropped)."""
    sel = mask & (request >= 0)
    return np.bincount(request[sel], weights=values[sel].astype(np.float64), minlength=n_requests)


def ranks(x: np.ndarray) -> np.ndarray:
    """Ranks from 0, ties averaged. Every tie gets its group's average whatever order the sort left
    its members in, so an unstable sort gives the same ranks (a quicksort: 2-4x a stable sort's speed)."""
    order = np.argsort(x)
    r = np.empty(len(x), np.float64)
    r[order] = np.arange(len(x), dtype=np.float64)
    # average ties so constant stretches do not fake a correlation
    xs = x[order]
    if len(xs):
        first = np.r_[True, xs[1:] != xs[:-1]]
        gid = np.cumsum(first) - 1
        sums = np.bincount(gid, weights=r[order])
        cnts = np.bincount(gid)
        r[order] = (sums / cnts)[gid]
    return r


def pearson(x: np.ndarray, y: np.ndarray) -> float:
    if len(x) < 3:
        return 0.0
    x = x - x.mean()
    y = y - y.mean()
    den = math.sqrt(float((x * x).sum()) * float((y * y).sum()))
    return float((x * y).sum() / den) if den > 0 else 0.0


def spearman(x: np.ndarray, y: np.ndarray) -> float:
    return pearson(ranks(x), ranks(y))


def ols(x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """(slope, intercept) of the least-squares line."""
    if len(x) < 2 or float(np.var(x)) == 0.0:
        return 0.0, float(np.mean(y)) if len(y) else 0.0
    slope = float(np.cov(x, y, bias=True)[0, 1] / np.var(x))
    return slope, float(y.mean() - slope * x.mean())


def theil_sen(
    x: np.ndarray, y: np.ndarray, rng: np.random.Generator, pairs: int = 20000
) -> tuple[float, float]:
    """Median of pairwise slopes over random pairs: a fit the tail outliers cannot drag."""
    n = len(x)
    if n < 3:
        return ols(x, y)
    i = rng.integers(0, n, pairs)
    j = rng.integers(0, n, pairs)
    dx = x[j] - x[i]
    ok = dx != 0
    if not ok.any():
        return 0.0, float(np.median(y))
    slope = float(np.median((y[j] - y[i])[ok] / dx[ok]))
    return slope, float(np.median(y - slope * x))


@dataclass(frozen=True)
class Mixture:
    """Two Gaussians in 1-D: weights, means, standard deviations (component 1 is the slower)."""

    w: tuple[float, float]
    mu: tuple[float, float]
    sd: tuple[float, float]
    bic_gain: float  # BIC(one Gaussian) - BIC(two): > 10 is strong evidence of two modes
    separation: float  # Ashman's D: |mu1 - mu0| * sqrt(2) / sqrt(sd0^2 + sd1^2); > 2 means clean modes
    threshold: float  # the value above which a point more likely belongs to the slow mode

    def responsibility(self, x: np.ndarray) -> np.ndarray:
        return _resp(x, self.w, self.mu, self.sd)


def _resp(
    x: np.ndarray, w, mu, sd, out: np.ndarray | None = None, work: np.ndarray | None = None
) -> np.ndarray:
    """P(slow component | x): 1 / (1 + exp(clip(l0 - l1))), lk = log wk - log sdk - ((x - muk) / sdk)^2 / 2,
    computed in place (`out`, `work`: buffers of x's length; the same operations as the formula, so
    the same bits)."""
    l0 = _log_density(x, w[0], mu[0], sd[0], out)
    l0 -= _log_density(x, w[1], mu[1], sd[1], work)
    np.clip(l0, -50, 50, out=l0)
    np.exp(l0, out=l0)
    l0 += 1.0
    return np.divide(1.0, l0, out=l0)


def _log_density(x: np.ndarray, w: float, mu: float, sd: float, out: np.ndarray | None) -> np.ndarray:
    z = np.subtract(x, mu, out=out)
    z /= sd
    np.square(z, out=z)
    z *= 0.5
    return np.subtract(math.log(w) - math.log(sd), z, out=z)


def gmm2(x: np.ndarray, iters: int = 60) -> Mixture | None:
    """Fit a two-component Gaussian mixture by EM (initialised at the quartiles)."""
    x = np.asarray(x, np.float64)
    n = len(x)
    if n < 30:
        return None
    sd_all = float(x.std())
    if sd_all <= 0:
        return None
    floor = max(sd_all * 0.02, 1e-3)
    mu = [float(np.quantile(x, 0.25)), float(np.quantile(x, 0.9))]
    sd = [sd_all / 2, sd_all / 2]
    w = [0.7, 0.3]
    r, q, work = np.empty(n), np.empty(n), np.empty(n)  # buffers: 60 rounds allocate nothing
    for _ in range(iters):
        before = (w, mu, sd)
        _resp(x, w, mu, sd, r, work)
        n1 = float(r.sum())
        n0 = n - n1
        if n1 < 1 or n0 < 1:
            return None
        np.subtract(1, r, out=q)
        mu = [float(np.multiply(q, x, out=work).sum() / n0), float(np.multiply(r, x, out=work).sum() / n1)]
        sd = [max(math.sqrt(float(_weighted_square(q, x, mu[0], work).sum() / n0)), floor),
              max(math.sqrt(float(_weighted_square(r, x, mu[1], work).sum() / n1)), floor)]
        w = [n0 / n, n1 / n]
        if (w, mu, sd) == before:  # a fixed point, to the bit: every later round gives these again
            break
    if mu[1] < mu[0]:
        mu, sd, w = mu[::-1], sd[::-1], w[::-1]

    def loglik(ws, mus, sds) -> float:
        dens = np.zeros(n)
        for wk, mk, sk in zip(ws, mus, sds, strict=True):
            dens += wk / (sk * math.sqrt(2 * math.pi)) * np.exp(-0.5 * ((x - mk) / sk) ** 2)
        return float(np.log(np.maximum(dens, 1e-300)).sum())

    ll1 = loglik([1.0], [float(x.mean())], [max(sd_all, floor)])
    ll2 = loglik(w, mu, sd)
    bic_gain = (-2 * ll1 + 2 * math.log(n)) - (-2 * ll2 + 5 * math.log(n))
    separation = abs(mu[1] - mu[0]) * math.sqrt(2) / math.sqrt(sd[0] ** 2 + sd[1] ** 2)
    grid = np.linspace(mu[0], mu[1], 200)
    rg = _resp(grid, w, mu, sd)
    threshold = float(grid[np.argmax(rg >= 0.5)]) if (rg >= 0.5).any() else mu[1]
    return Mixture((w[0], w[1]), (mu[0], mu[1]), (sd[0], sd[1]), bic_gain, separation, threshold)


def _weighted_square(weight: np.ndarray, x: np.ndarray, mu: float, out: np.ndarray) -> np.ndarray:
    """weight * (x - mu) ** 2, in `out`."""
    np.subtract(x, mu, out=out)
    np.square(out, out=out)
    return np.multiply(weight, out, out=out)


def lagged_correlation(a: np.ndarray, b: np.ndarray, max_lag: int) -> tuple[int, float, np.ndarray]:
    """Correlation of a[t] with b[t + lag] for lag 0..max_lag; returns (best lag, its r, all r)."""
    rs = np.zeros(max_lag + 1)
    for lag in range(max_lag + 1):
        if len(a) - lag < 5:
            break
        rs[lag] = pearson(a[: len(a) - lag], b[lag:])
    best = int(np.argmax(rs))
    return best, float(rs[best]), rs


def kl_surprise(k: np.ndarray, n: np.ndarray, p: float) -> np.ndarray:
    """Chernoff bound on -ln P(X >= k) for X ~ Binomial(n, p), 0 where k <= n p."""
    p = min(max(p, 1e-9), 1 - 1e-9)
    n = np.maximum(n.astype(np.float64), 1e-12)
    q = np.clip(k / n, 1e-12, 1 - 1e-12)
    kl = q * np.log(q / p) + (1 - q) * np.log((1 - q) / (1 - p))
    return np.where(k > n * p, n * kl, 0.0)


def downsample(n: int, limit: int, rng: np.random.Generator | None = None) -> np.ndarray:
    """Indices of at most `limit` of n points (evenly spaced, so time series keep their shape)."""
    if n <= limit:
        return np.arange(n)
    return np.linspace(0, n - 1, limit).astype(np.int64)


def ms(ns: float) -> float:
    return round(float(ns) / 1e6, 3)


def slow_spans(d: np.ndarray, least: int = 10) -> np.ndarray:
    """The slow spans of one name: over twice its median duration; where a slow period holds most of
    them (fewer than `least` over twice the median: the median is itself slow), over twice its fastest
    tenth's (p10), the usual time the slow period stretched."""
    slow = d > 2.0 * float(np.median(d))
    if slow.sum() < least and len(d):
        slow = d > 2.0 * float(np.quantile(d, 0.1))
    return slow
