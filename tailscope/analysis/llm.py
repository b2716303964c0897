"""LLM latency: time to first token and time per output token next to end-to-end latency.

For a language model, end-to-end latency mostly follows how many tokens it writes; what users feel
and what serving targets are set on is the time to the first token (queue + prefill) and the time
per output token (decode). Where the spans carry them (vLLM, the GenAI semantic conventions, TGI),
they are shown as percentiles per run, with the token counts (sql/llm_latency.sql)."""

from __future__ import annotations

import pandas as pd

from tailscope.analysis.source import Source, reading
from tailscope.analysis.types import Filter

COLUMNS = ["run", "metric", "requests", "p50", "p90", "p99"]


def llm_latency(source: Source, flt: Filter) -> pd.DataFrame:
    """DataFrame[run, metric, requests, p50, p90, p99]: one row per metric a run's requests report
    (end to end (ms), time to first token (ms), time per output token (ms), tokens in, tokens out).
    Empty when no request carries LLM attributes."""
    with reading(source) as conn:
        rows = conn.run("llm_latency", where=flt).fetchall()
    if not rows or all(metric.startswith("end to end") for _, metric, *_ in rows):
        return pd.DataFrame(columns=COLUMNS)
    return pd.DataFrame(
        [(run, metric, n, *(float(v) for v in q)) for run, metric, n, q in rows], columns=COLUMNS
    )
