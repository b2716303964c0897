"""What each run costs: throughput, end-to-end p50/p99 and the cost per 1,000 inferences, side by side
for any number of runs (a hardware comparison's runs, e.g. `tailscope pipeline sweep`'s).

A run's hourly price is the one given for it, else the one it recorded (resource attribute
`tailscope.price.usd_per_hour`, which `pipeline sweep --price-per-hour` writes), else unknown.
Throughput is the run's requests over the time they span (first start to last end), as in the
overview: for a run at saturation, what the setup serves.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import pandas as pd

from tailscope.analysis.runs import runs_with_requests
from tailscope.analysis.source import Source, reading
from tailscope.analysis.types import Filter
from tailscope.pricing import cost_per_1k
from tailscope.vocabulary import PRICE_ATTRIBUTE

__all__ = ["RunCosts", "cost_per_1k", "recorded_price", "run_costs"]

# setup attributes shown beside each run (column name → resource attribute)
SETUP_COLUMNS = {
    "device": "tailscope.device",
    "gpu": "tailscope.gpu.name",
    "dtype": "tailscope.dtype",
    "executor": "tailscope.model.executor",
    "max_batch": "tailscope.batch.max_size",
    "max_wait_ms": "tailscope.batch.max_wait_ms",
}
COLUMNS = [
    "run", *SETUP_COLUMNS, "requests", "throughput_rps", "p50_ms", "p99_ms",
    "price_per_hour", "price_from", "cost_per_1k",
]  # fmt: skip


NUMBERS = ("throughput_rps", "p50_ms", "p99_ms", "price_per_hour", "cost_per_1k")  # NaN where unknown


def recorded_price(setup: dict[str, str]) -> float | None:
    """The hourly price a run recorded, if one parses as a non-negative number."""
    try:
        price = float(setup.get(PRICE_ATTRIBUTE, ""))
    except ValueError:
        return None
    return price if price >= 0 else None


@dataclass
class RunCosts:
    """DataFrame[run, device, gpu, dtype, executor, max_batch, max_wait_ms, requests, throughput_rps,
    p50_ms, p99_ms, price_per_hour, price_from ('given' | 'recorded' | None), cost_per_1k] (numbers
    as floats, NaN where unknown), one row per run that has requests, in the order asked;
    `cheapest` / `fastest`: the run with the lowest cost per 1,000 and the highest throughput (None
    when none is known)."""

    table: pd.DataFrame
    cheapest: str | None = None
    fastest: str | None = None
    missing: list[str] = field(default_factory=list)  # runs asked for that have no requests
    reason: str | None = None


def _row(conn, run: str, flt: Filter, given: float | None) -> dict | None:
    found = conn.run("overview", where=replace(flt, run=run)).fetchone()
    if found is None or not found[1]:
        return None
    _, requests, _, _, _, first_ns, last_ns, e2e_ns, _ = found
    span_s = (last_ns - first_ns) / 1e9 if first_ns is not None and last_ns is not None else 0.0
    throughput = requests / span_s if span_s > 0 else None
    setup = dict(conn.run("run_setup", [run]).fetchall())
    price, source = (given, "given") if given is not None else (recorded_price(setup), "recorded")
    return {
        "run": run,
        **{column: setup.get(key) for column, key in SETUP_COLUMNS.items()},
        "requests": int(requests),
        "throughput_rps": throughput,
        "p50_ms": float(e2e_ns[0]) / 1e6,
        "p99_ms": float(e2e_ns[2]) / 1e6,
        "price_per_hour": price,
        "price_from": source if price is not None else None,
        "cost_per_1k": cost_per_1k(price, throughput),
    }


def run_costs(
    source: Source,
    runs: list[str],
    flt: Filter | None = None,
    prices: dict[str, float | None] | None = None,
) -> RunCosts:
    """For each run: its setup, requests, throughput (req/s), e2e p50/p99 (ms), hourly price (USD)
    and cost per 1,000 inferences (USD). `prices` overrides a run's recorded price (None: keep it);
    `flt` narrows every run (its `run` is ignored)."""
    base, given = flt or Filter(), prices or {}
    rows, missing = [], []
    with reading(source) as conn:
        known = set(runs_with_requests(conn))
        for run in runs:
            row = _row(conn, run, base, given.get(run)) if run in known else None
            if row is None:
                missing.append(run)
            else:
                rows.append(row)
    table = pd.DataFrame(rows, columns=COLUMNS).astype({column: "float64" for column in NUMBERS})
    if table.empty:
        asked = ", ".join(repr(r) for r in runs) or "none"
        return RunCosts(table, missing=missing, reason=f"no requests in the runs asked for ({asked})")
    costs = table.dropna(subset=["cost_per_1k"])
    speeds = table.dropna(subset=["throughput_rps"])
    return RunCosts(
        table,
        cheapest=None if costs.empty else str(costs.loc[costs["cost_per_1k"].idxmin(), "run"]),
        fastest=None if speeds.empty else str(speeds.loc[speeds["throughput_rps"].idxmax(), "run"]),
        missing=missing,
    )
