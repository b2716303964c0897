"""The views of a whole large run from its pre-aggregates: log-bucketed histograms the derive keeps
per run (e2e: counts, error weight, weighted sums of Duration and of each stage per bucket; each
stage: counts and weights per bucket of its exclusive time), read through `Reader.histograms`.

Buckets: bucket b >= 0 holds values in [e^(b/100), e^((b+1)/100)) ns (1.005 % wide), b = -1 holds 0
(and a stage's negative rounding remainder of a few ns). A percentile read from them is the
geometric middle of the bucket its rank falls in (interpolated between the two ranks quantile_cont
reads; for weighted runs the smallest bucket whose cumulative weight reaches q), so it lies within
RELATIVE_ERROR (0.50 %) of the exact percentile. Counts, error counts and the run's means are exact
(sums). A percentile band's means take the buckets its cumulative weight spans, the two edge buckets
by the fraction of their weight inside the band (the band's size is exact, its edges' members
approximated as spread evenly in their bucket).

Used where a view reads one whole run (a filter with nothing but the run set) of at least
MIN_REQUESTS requests: smaller runs and filtered views take the exact path (its statements are fast
there), and so does a run whose histogram does not count its requests (a store derived before the
histograms existed, until its next derive).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

import numpy as np

from tailscope.analysis.types import Filter
from tailscope.store.interface import Reader
from tailscope.vocabulary import ALL_STAGES

BUCKETS_PER_UNIT = 100  # buckets per unit of ln(ns)
RELATIVE_ERROR = math.expm1(0.5 / BUCKETS_PER_UNIT)  # the farthest a value is from its bucket's middle
MIN_REQUESTS = 100_000  # smaller runs: the exact path (~0.1 s at this size)
PERCENTILES = (0.5, 0.95, 0.99, 0.999)
MEDIAN_BAND = (0.45, 0.55)


def bucket_values(buckets: np.ndarray) -> np.ndarray:
    """Each bucket's representative value (ns): its geometric middle, 0 for bucket -1."""
    return np.where(buckets < 0, 0.0, np.exp((buckets + 0.5) / BUCKETS_PER_UNIT))


def bucket_of(value_ns: float) -> int:
    """The bucket a value falls in (as the derive's SQL computes it)."""
    return math.floor(math.log(value_ns) * BUCKETS_PER_UNIT) if value_ns > 0 else -1


@dataclass
class Buckets:
    """One metric's histogram of one run, by ascending bucket."""

    bucket: np.ndarray
    requests: np.ndarray
    weight: np.ndarray

    @property
    def weighted(self) -> bool:
        """Whether a request stands for other than one (requests.Weight): weighted quantiles then."""
        return not np.allclose(self.weight, self.requests, rtol=1e-12, atol=1e-9)

    def quantiles(self, qs: tuple[float, ...] | list[float]) -> list[float]:
        """Percentiles (ns) within RELATIVE_ERROR: quantile_cont's, or the weighted quantile (the
        smallest value whose cumulative weight reaches q of the total) for a weighted run."""
        values = bucket_values(self.bucket)
        if self.weighted:
            cumulative = np.cumsum(self.weight)
            total = cumulative[-1] * (1 - 1e-12)
            index = np.searchsorted(cumulative, [q * total for q in qs], side="left")
            return [float(values[min(i, len(values) - 1)]) for i in index]
        cumulative = np.cumsum(self.requests)
        n = int(cumulative[-1])

        def at(rank: int) -> float:  # the value of the 0-based rank-th smallest request
            return float(values[np.searchsorted(cumulative, rank, side="right")])

        out = []
        for q in qs:
            h = (n - 1) * q
            low = math.floor(h)
            out.append(at(low) + (h - low) * (at(min(low + 1, n - 1)) - at(low)))
        return out

    def floor_of_top(self, count: int) -> int | None:
        """A duration (ns) that at least `count` requests reach or pass: the lower edge of the
        highest bucket whose requests and those above it number `count` or more, less a margin for
        the derive's float rounding at the edge (None: fewer requests, or only the 0-ns bucket
        reaches it). The `count` slowest requests all lie at or above it, so a read of the slowest
        may skip every request below it and still give the exact list."""
        from_top = np.cumsum(self.requests[::-1])[::-1]
        reaching = np.nonzero(from_top >= count)[0]
        if count <= 0 or reaching.size == 0 or self.bucket[reaching[-1]] < 0:
            return None
        return math.floor(math.exp(self.bucket[reaching[-1]] / BUCKETS_PER_UNIT) * (1 - 1e-9))

    def order_values(self, ranks: np.ndarray) -> np.ndarray:
        """The values of the 0-based ranks (ascending order, counts: compare's bootstrap), each
        bucket's requests taken as spread evenly over its log width by rank: within a bucket's
        width (1.005 %) of the exact value, and two runs' close values are not rounded to the same."""
        cumulative = np.cumsum(self.requests)
        index = np.clip(np.searchsorted(cumulative, ranks, side="right"), 0, len(self.bucket) - 1)
        before = cumulative[index] - self.requests[index]
        inside = (np.asarray(ranks) - before + 0.5) / np.maximum(self.requests[index], 1)
        bucket = self.bucket[index]
        return np.where(bucket < 0, 0.0, np.exp((bucket + np.clip(inside, 0, 1)) / BUCKETS_PER_UNIT))


@dataclass
class RunHistogram:
    """A run's pre-aggregates: the e2e histogram with its per-bucket sums, and each stage's."""

    e2e: Buckets
    errors: np.ndarray  # weight of error requests per e2e bucket
    duration_sum: np.ndarray  # sum of Weight × Duration per e2e bucket
    stage_sums: np.ndarray  # [stage, bucket]: sum of Weight × stage ns per e2e bucket
    stages: dict[str, Buckets]

    @property
    def requests(self) -> int:
        """Requests, or for a weighted run the requests they stand for (rounded), as the views count."""
        return round(float(self.e2e.weight.sum())) if self.e2e.weighted else int(self.e2e.requests.sum())

    @property
    def error_count(self) -> int:
        return round(float(self.errors.sum()))

    def band_fractions(self, lo: float, hi: float) -> np.ndarray:
        """Per e2e bucket, the fraction of its weight inside the band [lo, hi] of cumulative weight."""
        cumulative = np.cumsum(self.e2e.weight)
        total = cumulative[-1]
        before = cumulative - self.e2e.weight
        inside = np.clip(np.minimum(cumulative, hi * total) - np.maximum(before, lo * total), 0, None)
        return np.divide(inside, self.e2e.weight, out=np.zeros_like(inside), where=self.e2e.weight > 0)

    def band(self, lo: float, hi: float) -> tuple[float, float, float | None, list[float | None]]:
        """(requests in the band, weight in it, mean e2e ns, mean ns per stage) of a quantile band."""
        share = self.band_fractions(lo, hi)
        weight = float((share * self.e2e.weight).sum())
        count = float((share * self.e2e.requests).sum())
        if weight <= 0:
            return count, weight, None, [None] * len(ALL_STAGES)
        means = [float((share * row).sum() / weight) for row in self.stage_sums]
        return count, weight, float((share * self.duration_sum).sum() / weight), means

    def waterfall_row(self, lo: float, hi: float) -> tuple[float | int | None, ...]:
        """waterfall.sql's row (n, band_n, median_n, q_lo, q_hi, band_mean, median_mean, band
        means per stage, median means per stage) from the histogram."""
        band_n, band_w, band_mean, band_stages = self.band(lo, hi)
        median_n, median_w, median_mean, median_stages = self.band(*MEDIAN_BAND)
        if self.e2e.weighted:
            band_n, median_n = band_w, median_w
        q_lo, q_hi = self.e2e.quantiles([lo, hi])
        return (
            self.requests,
            round(float(band_n)),
            round(float(median_n)),
            q_lo,
            q_hi,
            band_mean,
            median_mean,
            *band_stages,
            *median_stages,
        )

    def stage_percentiles(self) -> list[list[float]]:
        """stage_percentiles.sql's row: [p50, p95, p99, p99.9] ns per stage (ALL_STAGES order)."""
        return [self.stages[stage].quantiles(PERCENTILES) for stage in ALL_STAGES]


def _buckets(rows: list[tuple]) -> Buckets:
    array = np.array(rows, dtype=np.float64).reshape(-1, 3)
    return Buckets(array[:, 0].astype(np.int64), array[:, 1], array[:, 2])


def from_rows(e2e_rows: list[tuple], stage_rows: list[tuple]) -> RunHistogram | None:
    """A RunHistogram from histogram_read_e2e.sql's and histogram_read_stages.sql's rows (None: no rows)."""
    if not e2e_rows:
        return None
    e2e = np.array(e2e_rows, dtype=np.float64)
    by_stage: dict[str, list[tuple]] = {stage: [] for stage in ALL_STAGES}
    for stage, bucket, requests, weight in stage_rows:
        by_stage.setdefault(stage, []).append((bucket, requests, weight))
    return RunHistogram(
        e2e=Buckets(e2e[:, 0].astype(np.int64), e2e[:, 1], e2e[:, 2]),
        errors=e2e[:, 3],
        duration_sum=e2e[:, 4],
        stage_sums=e2e[:, 5 : 5 + len(ALL_STAGES)].T,
        stages={stage: _buckets(rows) for stage, rows in by_stage.items()},
    )


def whole_run(flt: Filter) -> bool:
    """Whether a filter names one run and nothing else (the views the histograms can answer)."""
    return flt.run is not None and all(getattr(flt, f.name) is None for f in fields(flt) if f.name != "run")


def run_histogram(conn: Reader, flt: Filter) -> RunHistogram | None:
    """The histogram of the filter's run where a view may read it instead of the requests: the
    filter is a whole run of at least MIN_REQUESTS requests and its histogram counts them all."""
    if not whole_run(flt) or flt.run is None:
        return None
    rows = conn.histograms(flt.run, MIN_REQUESTS)
    if rows is None:
        return None
    e2e_rows, stage_rows, requests = rows
    if requests < MIN_REQUESTS:
        return None
    histogram = from_rows(e2e_rows, stage_rows)
    if histogram is None or int(histogram.e2e.requests.sum()) != requests:
        return None
    return histogram


def exact_quantile(conn: Reader, run: str, buckets: Buckets, q: float) -> float | None:
    """The exact e2e percentile of a whole run (quantile_cont's, or the weighted quantile for a
    weighted run) from its histogram and the requests of the one or two buckets its ranks fall in
    (histogram_bucket_durations.sql): a read of a few thousand requests, not a sort of the run.
    None when the buckets' requests are not what the histogram counts (the caller goes exact)."""
    cumulative = np.cumsum(buckets.weight if buckets.weighted else buckets.requests)
    if buckets.weighted:
        target = q * cumulative[-1] * (1 - 1e-12)
        first = last = min(int(np.searchsorted(cumulative, target, side="left")), len(cumulative) - 1)
    else:
        n = int(cumulative[-1])
        h = (n - 1) * q
        low = math.floor(h)
        first = int(np.searchsorted(cumulative, low, side="right"))
        last = int(np.searchsorted(cumulative, min(low + 1, n - 1), side="right"))
    b1, b2 = int(buckets.bucket[first]), int(buckets.bucket[last])
    low_ns = -(2**62) if b1 < 0 else math.floor(math.exp(b1 / BUCKETS_PER_UNIT) * (1 - 1e-9)) - 1
    high_ns = math.ceil(math.exp((b2 + 1) / BUCKETS_PER_UNIT) * (1 + 1e-9)) + 1
    rows = conn.run("histogram_bucket_durations", [run, low_ns, high_ns, b1, b2]).fetchall()
    if len(rows) != int(buckets.requests[first : last + 1].sum()):
        return None
    before = cumulative[first] - (buckets.weight if buckets.weighted else buckets.requests)[first]
    if buckets.weighted:
        running = before + np.cumsum([weight for _, weight in rows])
        return float(rows[min(int(np.searchsorted(running, target, side="left")), len(rows) - 1)][0])
    values = [float(duration) for duration, _ in rows]
    offset = int(before)
    x_low, x_high = values[low - offset], values[min(low + 1, n - 1) - offset]
    return x_low + (h - low) * (x_high - x_low)


def tail_groups(conn: Reader, run: str, histogram: RunHistogram, threshold: float) -> dict[bool, tuple]:
    """tail_stages.sql's rows (selected, n, mean e2e ns, mean ns per stage) of a whole run split at
    `threshold`: the requests at or above it summed (tail_above_sums.sql), the rest the
    histogram's totals less them. Counts are weights (rounded) for a weighted run."""
    row = conn.run("tail_above_sums", [run, threshold]).fetchone()
    count, weight = float(row[0] or 0), float(row[1] or 0)
    sums = np.array([float(v or 0) for v in row[2:]])
    totals = np.array([histogram.duration_sum.sum(), *histogram.stage_sums.sum(axis=1)])
    all_count, all_weight = float(histogram.e2e.requests.sum()), float(histogram.e2e.weight.sum())
    weighted = histogram.e2e.weighted
    groups: dict[bool, tuple] = {}
    for selected, n, w, s in (
        (True, count, weight, sums),
        (False, all_count - count, all_weight - weight, totals - sums),
    ):
        if n <= 0 or w <= 0:
            continue
        means = [float(v) / w for v in s]
        groups[selected] = (selected, round(float(w if weighted else n)), *means)
    return groups
