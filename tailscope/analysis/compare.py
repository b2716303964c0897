"""Run A vs run B: per-stage p50/p99 with bootstrap confidence intervals, throughput and cost.

Bootstrap of a quantile without materialising resamples: the k-th smallest of n draws with replacement
from a sample is the sample's order statistic at index ceil(n·U) where U is the k-th smallest of n
uniforms, and that U is Beta(k, n − k + 1). So each resample's quantile is one Beta draw and one index
into the sorted sample: exact in distribution, O(n) for a partition around the ranks drawn plus O(resamples),
instead of O(n · resamples). k = ceil(q·n) (the lower "inverted CDF" quantile); point estimates are the same
order statistic so estimate and interval agree. Seeded with numpy's default_rng(seed).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd

from tailscope.analysis.costs import cost_per_1k, recorded_price
from tailscope.analysis.histogram import Buckets, run_histogram
from tailscope.analysis.runs import runs_with_requests
from tailscope.analysis.source import Source, reading
from tailscope.analysis.types import Comparison, Filter, RunCost, StageComparison
from tailscope.analysis.views import summary_rows
from tailscope.vocabulary import ALL_STAGES

QUANTILES = (0.5, 0.99)
CONFIDENCE = 0.95


def order_statistic_rank(n: int, q: float) -> int:
    """1-based rank of the q-quantile among n sorted values (inverted CDF)."""
    return min(n, max(1, int(np.ceil(q * n))))


def bootstrap_quantiles(
    values: np.ndarray, quantiles: tuple[float, ...], rng: np.random.Generator, resamples: int
) -> list[tuple[float, np.ndarray]]:
    """For each q: the q-quantile of the sample (order statistic k = ceil(q·n)) and `resamples`
    bootstrap replicates of it. Needs only the ranks the Beta draws land on: one O(n) np.partition
    around all of them and a sort of each narrow window, never a sort of the whole sample."""
    n = len(values)
    plans = []
    for q in quantiles:
        k = order_statistic_rank(n, q)
        u = rng.beta(k, n - k + 1, size=resamples)
        index = np.clip(np.ceil(u * n).astype(np.int64) - 1, 0, n - 1)
        plans.append((k, index, int(min(index.min(), k - 1)), int(max(index.max(), k - 1))))
    kth = sorted({bound for _, _, low, high in plans for bound in (low, high)})
    part = np.partition(values, kth) if n > 1 else values
    results = []
    for k, index, low, high in plans:
        window = np.sort(part[low : high + 1])
        results.append((float(window[k - 1 - low]), window[index - low].astype(np.float64)))
    return results


def bootstrap_quantile(
    values: np.ndarray, q: float, rng: np.random.Generator, resamples: int
) -> tuple[float, np.ndarray]:
    """`bootstrap_quantiles` for one quantile."""
    return bootstrap_quantiles(values, (q,), rng, resamples)[0]


def bootstrap_histogram_quantiles(
    buckets: Buckets, quantiles: tuple[float, ...], rng: np.random.Generator, resamples: int
) -> list[tuple[float, np.ndarray]]:
    """`bootstrap_quantiles` over a run's histogram (analysis.histogram) instead of its values: the
    same Beta draws (the same rng use), each drawn rank's value read from its bucket (Buckets.order_values:
    within a bucket's width, 1.005 %)."""
    n = int(buckets.requests.sum())
    results = []
    for q in quantiles:
        k = order_statistic_rank(n, q)
        u = rng.beta(k, n - k + 1, size=resamples)
        index = np.clip(np.ceil(u * n).astype(np.int64) - 1, 0, n - 1)
        results.append((float(buckets.order_values(np.array([k - 1]))[0]), buckets.order_values(index)))
    return results


Values = dict[str, "np.ndarray | Buckets"]


def _run_data(conn, flt: Filter) -> tuple[Values, int, float | None]:
    """Each stage's (and e2e's) values, or its histogram for a whole large run; requests; throughput."""
    histogram = run_histogram(conn, flt)
    values: Values
    if histogram is not None:
        values = {"e2e": histogram.e2e, **histogram.stages}
        n = int(histogram.e2e.requests.sum())
    else:
        arrays = conn.run("compare_values", where=flt).numpy()
        values = {"e2e": np.asarray(arrays["Duration"])}
        for stage in ALL_STAGES:
            values[stage] = np.asarray(arrays[f"{stage}_ns"])
        n = len(values["e2e"])
    rows = summary_rows(conn, flt)
    row = rows[0] if rows else None
    throughput = None
    if row is not None and row[6] is not None and row[6] > row[5]:
        throughput = row[1] / ((row[6] - row[5]) / 1e9)
    return values, n, throughput


def _bootstrap(values: np.ndarray | Buckets, rng: np.random.Generator, resamples: int) -> list:
    if isinstance(values, Buckets):
        return bootstrap_histogram_quantiles(values, QUANTILES, rng, resamples)
    return bootstrap_quantiles(values, QUANTILES, rng, resamples)


def _setup_table(a: dict[str, str], b: dict[str, str]) -> pd.DataFrame:
    keys = sorted(set(a) | set(b))
    return pd.DataFrame(
        [(k, a.get(k), b.get(k), a.get(k) != b.get(k)) for k in keys], columns=["key", "a", "b", "differs"]
    )


def compare(
    source: Source,
    run_a: str,
    run_b: str,
    flt: Filter | None = None,
    price_a_per_hour: float | None = None,
    price_b_per_hour: float | None = None,
    resamples: int = 1000,
    seed: int = 0,
) -> Comparison:
    """Run A vs run B: per-stage (and e2e) p50/p99 with 95 % bootstrap intervals (seeded), deltas
    B − A with intervals, throughput, cost per 1,000 inferences from each run's hourly price (the
    price given, else the one the run recorded, tailscope.analysis.costs), and the runs' setup
    attributes side by side. `flt` narrows both runs (its `run` is ignored). A whole run of at least
    histogram.MIN_REQUESTS requests is bootstrapped from its pre-aggregates (each value within 0.5 %)."""
    base = flt or Filter()
    with reading(source) as conn:
        known = set(runs_with_requests(conn))
        a_vals, a_n, a_tp = _run_data(conn, replace(base, run=run_a))
        b_vals, b_n, b_tp = _run_data(conn, replace(base, run=run_b))
        a_setup = dict(conn.run("run_setup", [run_a]).fetchall())
        b_setup = dict(conn.run("run_setup", [run_b]).fetchall())
    setup = _setup_table(a_setup, b_setup)
    if price_a_per_hour is None:
        price_a_per_hour = recorded_price(a_setup)
    if price_b_per_hour is None:
        price_b_per_hour = recorded_price(b_setup)
    a_cost = RunCost(run_a, a_n, a_tp, price_a_per_hour, cost_per_1k(price_a_per_hour, a_tp))
    b_cost = RunCost(run_b, b_n, b_tp, price_b_per_hour, cost_per_1k(price_b_per_hour, b_tp))
    result = Comparison(
        run_a=run_a, run_b=run_b, stages=[], a=a_cost, b=b_cost, setup=setup, resamples=resamples, seed=seed
    )
    missing = [r for r in (run_a, run_b) if r not in known]
    if missing:
        result.reason = (
            f"no requests for run {', '.join(repr(m) for m in missing)} "
            f"(runs with requests: {', '.join(sorted(known)) or 'none'})"
        )
        return result
    if not a_n or not b_n:
        result.reason = "no requests match the filter in " + (run_a if not a_n else run_b)
        return result
    rng = np.random.default_rng(seed)
    tail = (1 - CONFIDENCE) / 2 * 100
    for stage in ("e2e", *ALL_STAGES):
        a_all = _bootstrap(a_vals[stage], rng, resamples)
        b_all = _bootstrap(b_vals[stage], rng, resamples)
        for q, (a_est, a_boot), (b_est, b_boot) in zip(QUANTILES, a_all, b_all, strict=True):
            a_lo, a_hi = (float(v) for v in np.percentile(a_boot, [tail, 100 - tail]))
            b_lo, b_hi = (float(v) for v in np.percentile(b_boot, [tail, 100 - tail]))
            d_lo, d_hi = (float(v) for v in np.percentile(b_boot - a_boot, [tail, 100 - tail]))
            result.stages.append(
                StageComparison(
                    stage=stage,
                    quantile=q,
                    a_ms=a_est / 1e6,
                    a_low_ms=a_lo / 1e6,
                    a_high_ms=a_hi / 1e6,
                    b_ms=b_est / 1e6,
                    b_low_ms=b_lo / 1e6,
                    b_high_ms=b_hi / 1e6,
                    delta_ms=(b_est - a_est) / 1e6,
                    delta_low_ms=d_lo / 1e6,
                    delta_high_ms=d_hi / 1e6,
                )
            )
    return result
