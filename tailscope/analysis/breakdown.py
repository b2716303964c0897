"""Inside each stage: which spans carry a band's time, against the median band.

A waterfall says which stage makes the tail; this says which span inside it does: prefill or decode
inside model_forward for an LLM server (its phase spans), the fallback query or the cache lookup
inside feature_hydration. Computed from the span tree of a seeded sample of the band's and the median
band's requests (the store's band_breakdown: sql/stage_breakdown*.sql), as mean attributed ms per
request of each group."""

from __future__ import annotations

from typing import Any

import pandas as pd

from tailscope.analysis.source import Source, reading
from tailscope.analysis.types import BAND_QUANTILES, BANDS, Band, Filter
from tailscope.analysis.views import one_run

COLUMNS = ["stage", "span_name", "band_ms", "median_ms", "delta_ms"]


def stage_breakdown(source: Source, flt: Filter, band: Band = "p99", sample: int = 500) -> pd.DataFrame:
    """DataFrame[stage, span_name, band_ms, median_ms, delta_ms]: mean attributed ms per request of
    the band and of the median band, per span name within its stage, largest difference first.
    Needs one run (flt.run, or the store's only run); empty when the band or the median is empty."""
    if band not in BAND_QUANTILES:
        raise ValueError(f"unknown band {band!r} (one of {', '.join(BANDS)})")
    lo, hi = BAND_QUANTILES[band]
    with reading(source) as reader:
        flt, reason = one_run(reader, flt)
        if reason:
            return pd.DataFrame(columns=COLUMNS)
        rows, counts = reader.band_breakdown(flt, lo, hi, int(sample))
    if not counts.get("band") or not counts.get("median"):
        return pd.DataFrame(columns=COLUMNS)
    return _table(rows, counts)


def _table(rows: list[Any], counts: dict[str, int]) -> pd.DataFrame:
    frame = pd.DataFrame(rows, columns=["stage", "span_name", "grp", "ns"])
    table = frame.pivot_table(
        index=["stage", "span_name"], columns="grp", values="ns", aggfunc="sum", fill_value=0
    )
    out = pd.DataFrame(
        {
            "band_ms": table.get("band", 0) / counts["band"] / 1e6,
            "median_ms": table.get("median", 0) / counts["median"] / 1e6,
        }
    ).reset_index()
    out["delta_ms"] = out["band_ms"] - out["median_ms"]
    return out.sort_values("delta_ms", ascending=False, ignore_index=True)[COLUMNS]
