"""LLM latency: time to first token and time per output token next to end-to-end latency.

For a language model, end-to-end latency mostly follows how many tokens it writes; what users feel
and what serving targets are set on is the time to the first token (queue + prefill) and the time
per output token (decode). Where the spans carry them (vLLM, the GenAI semantic conventions, TGI),
they are shown as percentiles per run, with the token counts (sql/llm_latency.sql)."""

from __future__ import annotations

from typing import Any

import pandas as pd

from tailscope import sql
from tailscope.analysis.quantiles import from_order_statistics
from tailscope.analysis.source import Source, reading
from tailscope.analysis.types import Filter
from tailscope.query.builders import filtered
from tailscope.store.ch_conn import dialect_of

COLUMNS = ["run", "metric", "requests", "p50", "p90", "p99"]
QUANTILES = (0.5, 0.9, 0.99)  # llm_latency.sql's


def _any_llm_key(conn: Any) -> bool:
    """Whether any span of a ClickHouse store has an attribute llm_latency.sql reads (llm_keys_any.sql:
    a read of the exporter's bloom filter index on the attribute keys)."""
    return bool(conn.execute(sql.load("llm_keys_any", dialect="clickhouse"), {}).fetchone()[0])


def llm_latency(source: Source, flt: Filter) -> pd.DataFrame:
    """DataFrame[run, metric, requests, p50, p90, p99]: one row per metric a run's requests report
    (end to end (ms), time to first token (ms), time per output token (ms), tokens in, tokens out).
    Empty when no request carries LLM attributes."""
    with reading(source) as conn:
        dialect = dialect_of(conn)
        if dialect == "clickhouse" and not _any_llm_key(conn):
            return pd.DataFrame(columns=COLUMNS)
        rows = conn.execute(*filtered("llm_latency", flt, dialect=dialect)).fetchall()
    if dialect == "clickhouse":  # order statistics: one quantile definition on both engines
        rows = [(run, metric, n, from_order_statistics(q, n, QUANTILES)) for run, metric, n, q in rows]
    if not rows or all(metric.startswith("end to end") for _, metric, *_ in rows):
        return pd.DataFrame(columns=COLUMNS)
    return pd.DataFrame(
        [(run, metric, n, *(float(v) for v in q)) for run, metric, n, q in rows], columns=COLUMNS
    )
