"""One quantile definition for both engines: DuckDB's quantile_cont, from exact order statistics.

quantile_cont(q) over n sorted values x: h = (n - 1)·q, lo = x[floor h], hi = x[ceil h], and with
d = h - floor h the value is lo·(1 - d) + hi·d, which DuckDB computes as one fused multiply-add,
fma(lo, 1 - d, hi·d) (checked bit for bit against DuckDB by tests/parity/test_clickhouse_parity.py).
ClickHouse has no such function (its quantileExact* pick order statistics by other rules), so on
ClickHouse a view asks for the two order statistics of each quantile (clickhouse/*.sql: `lo, hi`
pairs) and `from_order_statistics` interpolates here: the same numbers on both engines.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from fractions import Fraction


def fma(a: float, b: float, c: float) -> float:
    """a·b + c rounded once (math.fma arrives in Python 3.13): exact in fractions, then to float."""
    if not all(math.isfinite(v) for v in (a, b, c)):
        return a * b + c
    return float(Fraction(a) * Fraction(b) + Fraction(c))


def position(n: int, q: float) -> tuple[int, int, float]:
    """0-based indexes of the order statistics quantile_cont(q) reads among n values, and the weight."""
    h = (n - 1) * q
    low = math.floor(h)
    return low, math.ceil(h), h - low


def interpolate(lo: float, hi: float, n: int, q: float) -> float:
    """quantile_cont(q) from its two order statistics (lo at floor h, hi at ceil h)."""
    low, high, d = position(n, q)
    if low == high:
        return float(lo)
    return fma(float(lo), 1.0 - d, float(hi) * d)


def from_order_statistics(
    pairs: Sequence[Sequence[float]], n: int, quantiles: Sequence[float]
) -> list[float]:
    """Each quantile's value from its (lo, hi) pair; NaN for every quantile when n is 0."""
    if n == 0:
        return [float("nan")] * len(quantiles)
    return [interpolate(lo, hi, n, q) for (lo, hi), q in zip(pairs, quantiles, strict=True)]
