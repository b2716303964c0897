"""What an inference costs, from the hardware's hourly price and the throughput it served. Standard
library only: `tailscope pipeline sweep` prices its table with it on a GPU box that has the pipeline
extra and nothing else (no pandas, no store)."""

from __future__ import annotations


def cost_per_1k(price_per_hour: float | None, throughput_rps: float | None) -> float | None:
    """USD per 1,000 inferences: price_per_hour / 3600 / throughput × 1000 (None when either is
    unknown or throughput is 0)."""
    if price_per_hour is None or not throughput_rps:
        return None
    return price_per_hour / 3600.0 / throughput_rps * 1000.0
