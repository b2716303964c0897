"""The latency heatmap of a whole large run from its pre-aggregate (`heatmap_histogram`: per stage,
second of the request's start, 1.005 % bucket of the value and heatmap cell at 10 per decade,
counts and weights; kept by every derive, tailscope.store.duckdb.histogram), read through
`Reader.heatmap_histogram` instead of every request.

The picture is heatmap.sql's on a grid of whole seconds: time bins of the fewest whole seconds that
make at most `time_bins` bins, from the first request's second (heatmap.sql's start at the first
request's nanosecond and are (extent / bins) wide). Given that grid, the cells' counts are exact (a
cell at 1, 2, 5 or 10 per decade is a union of the stored cells) and the p50 / p99 lines lie within
analysis.histogram.RELATIVE_ERROR (0.50 %) of quantile_cont's (the weighted quantile for a weighted
run), read from the buckets. Used for a filter with nothing but the run set, a run of at least
histogram.MIN_REQUESTS requests whose requests start over at least `time_bins` seconds, and
bins_per_decade dividing 10; everything else reads the requests (heatmap.sql).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tailscope.analysis import histogram
from tailscope.analysis.types import Filter
from tailscope.store.interface import Reader

CELLS_PER_DECADE = 10  # the stored cells' resolution (histogram_heatmap_rows.sql)
NS_PER_SECOND = 1_000_000_000


def _rounded(weight: float) -> int:
    """round() as DuckDB's (half away from zero) for a sum of weights (>= 0)."""
    return int(np.floor(weight + 0.5))


def heatmap_rows(
    conn: Reader, flt: Filter, stage: str, time_bins: int, bins_per_decade: int
) -> list[tuple[Any, ...]] | None:
    """heatmap.sql's rows ('cell' | 'line', time bin, latency bin, count, p50 ns, p99 ns, t0 ns, bin
    width ns) from the run's pre-aggregate, or None where the view reads the requests instead."""
    if not histogram.whole_run(flt) or flt.run is None or CELLS_PER_DECADE % bins_per_decade:
        return None
    found = conn.heatmap_histogram(flt.run, stage, time_bins, histogram.MIN_REQUESTS)
    if found is None or found.requests < histogram.MIN_REQUESTS or found.counted != found.requests:
        return None
    table = np.array(found.rows, dtype=np.float64).reshape(-1, 5)
    if not table.size:
        return None
    tb, bucket, cell = (table[:, i].astype(np.int64) for i in range(3))
    count, weight = table[:, 3], table[:, 4]
    weighted = not np.allclose(weight, count, rtol=1e-12, atol=1e-9)
    t0, width = found.first * NS_PER_SECOND, found.width * NS_PER_SECOND
    out: list[tuple[Any, ...]] = []
    lb = np.floor_divide(cell, CELLS_PER_DECADE // bins_per_decade)
    (times, cells), cell_counts, cell_weights = _sums(tb, lb, count, weight)
    for t, b, n, w in zip(
        times.tolist(), cells.tolist(), cell_counts.tolist(), cell_weights.tolist(), strict=True
    ):
        if n > 0:
            out.append(("cell", t, b, _rounded(w) if weighted else round(n), None, None, t0, width))
    (bins, buckets), counts, weights = _sums(tb, bucket, count, weight)
    edges = np.flatnonzero(np.r_[True, bins[1:] != bins[:-1], True])
    for lo, hi in zip(edges[:-1].tolist(), edges[1:].tolist(), strict=True):
        kept = counts[lo:hi] > 0
        if not kept.any():
            continue
        parts = (buckets[lo:hi][kept], counts[lo:hi][kept], weights[lo:hi][kept])
        p50, p99 = _quantiles(*parts, weighted)
        n = _rounded(float(weights[lo:hi].sum())) if weighted else round(float(counts[lo:hi].sum()))
        out.append(("line", int(bins[lo]), None, n, p50, p99, t0, width))
    return out


def _sums(
    a: np.ndarray, b: np.ndarray, count: np.ndarray, weight: np.ndarray
) -> tuple[tuple[np.ndarray, np.ndarray], np.ndarray, np.ndarray]:
    """count and weight summed per distinct (a, b), in (a, b) order: ((a, b), counts, weights)."""
    span = int(b.max() - b.min()) + 1
    key = a * span + (b - b.min())
    keys, at = np.unique(key, return_inverse=True)
    counts = np.bincount(at.reshape(-1), weights=count, minlength=len(keys))
    weights = np.bincount(at.reshape(-1), weights=weight, minlength=len(keys))
    return (keys // span, keys % span + b.min()), counts, weights


def _quantiles(buckets: np.ndarray, counts: np.ndarray, weights: np.ndarray, weighted: bool) -> list[float]:
    """p50 and p99 of one time bin's buckets: quantile_cont's, or for a weighted run (every bin, as
    heatmap_weighted.sql) the smallest bucket whose cumulative weight reaches q of the bin's."""
    if not weighted:
        return histogram.Buckets(buckets, counts, counts).quantiles([0.5, 0.99])
    cumulative = np.cumsum(weights)
    index = np.searchsorted(cumulative, [q * cumulative[-1] * (1 - 1e-12) for q in (0.5, 0.99)], side="left")
    values = histogram.bucket_values(buckets)
    return [float(values[min(i, len(values) - 1)]) for i in index]
