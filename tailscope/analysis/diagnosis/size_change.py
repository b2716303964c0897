"""Whether the sizes a stage handles changed or are outsized: what makes work that grows with size a
cause.

Mechanism. Time that follows a size is how most work behaves: an LLM decodes one token per step, a
serialiser touches every byte, a query reads every row. When the sizes are those the service always
handles (the same spread from the first minute to the last, one population), the largest of them
make its slowest requests in every run: the tail is the service's normal physics, not a change that
a fix undoes. Sizes become a cause when they changed: they grow or shift during the run (a new
client version's share growing, a setting that lengthens inputs from one moment on), or a second
population of much larger sizes sits beside the usual one (some callers sending far more), or the
largest requests ask for an order of magnitude more than the typical one (whole catalogue pages,
90-day histories: what a cap or pagination stops), where a bounded spread (answers under a
max-token limit, within a few times the median) is the work's usual range. All read from the sizes
alone:

- drift: the spans split into ten equal-count time bins; the count of above-median sizes per bin
  against the binomial spread it would have if sizes did not depend on time (a dispersion index,
  ~1 when stationary, chi-square over its degrees of freedom).
- a second population: a two-component mixture on log size with clean modes (Ashman's D > 2, BIC
  in favour of two), the larger at least 4x the smaller in size, holding 2-60 % of the spans, and
  spread over >= 10 distinct values (a cap such as a max-token limit piles answers on one value: a
  spike, not callers of another kind).
- outsized: the sizes' p99 at least 8x their median.
"""

from __future__ import annotations

import math

import numpy as np

from tailscope.analysis.diagnosis.stats import gmm2, logistic, material_weight

BINS = 10
DRIFT = 3.0  # dispersion index above which the sizes are taken to change with time
MIN_RATIO = math.log(4.0)  # a second population's sizes at least 4x the usual ones
OUTSIZED = 8.0  # p99 / median of the sizes: the largest requests an order of magnitude beyond the typical


def drift_index(sizes: np.ndarray, start: np.ndarray) -> float:
    """Dispersion of the above-median share of sizes over ten equal-count time bins (~1: stationary)."""
    n = len(sizes)
    if n < 5 * BINS:
        return 1.0
    order = np.argsort(start, kind="stable")
    above = (sizes > np.median(sizes))[order].astype(np.float64)
    p = float(above.mean())
    if p <= 0.0 or p >= 1.0:
        return 1.0
    edges = np.linspace(0, n, BINS + 1).astype(int)
    counts = np.add.reduceat(above, edges[:-1])
    expected = np.diff(edges) * p
    chi2 = float(((counts - expected) ** 2 / (expected * (1 - p))).sum())
    return chi2 / (BINS - 1)


def second_population(sizes: np.ndarray, rng: np.random.Generator) -> float | None:
    """The share of spans in a second, much larger population of sizes; None where there is none."""
    pos = sizes[sizes > 0]
    if len(pos) < 100:
        return None
    x = np.log(pos)
    fit = x if len(x) <= 5000 else rng.choice(x, 5000, replace=False)
    mix = gmm2(fit)
    if mix is None or mix.bic_gain < 10 or mix.separation < 2.0 or mix.mu[1] - mix.mu[0] < MIN_RATIO:
        return None
    upper = x >= mix.threshold
    share = float(upper.mean())
    if not 0.02 <= share <= 0.6 or len(np.unique(pos[upper])) < 10:
        return None
    return share


def size_change(sizes: np.ndarray, start: np.ndarray, rng: np.random.Generator) -> dict:
    """{'drift': index, 'second_population': share or None, 'p99_over_median': ratio, 'changed':
    bool (any of the three)} for one size per span."""
    drift = drift_index(sizes, start)
    second = second_population(sizes, rng)
    p50, p99 = np.quantile(sizes, [0.5, 0.99]) if len(sizes) else (0.0, 0.0)
    spread = float(p99 / p50) if p50 > 0 else float("inf")
    changed = drift > DRIFT or second is not None or spread >= OUTSIZED
    return {"drift": round(drift, 2), "second_population": second, "p99_over_median": round(spread, 2),
            "changed": changed}


def size_confidence(rho: float, share: float, added: float) -> float:
    """How sure a size-driven finding is: how closely the time follows the size (Spearman rho) times
    how much it matters, the larger of its share of the tail excess and what the sizes above the small
    ones (p10) add to the mean request over the median latency (`added`: slowing many requests beside a
    rarer, heavier cause that owns the p99)."""
    weight = max(material_weight(share), 0.9 * logistic(added, 0.1, 0.03))
    return logistic(rho, 0.65, 0.07) * weight
