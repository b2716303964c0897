"""Inside each stage: which spans carry a band's time, against the median band.

A waterfall says which stage makes the tail; this says which span inside it does: prefill or decode
inside model_forward for an LLM server (its phase spans), the fallback query or the cache lookup
inside feature_hydration. Computed from the span tree of a seeded sample of the band's and the median
band's requests (sql/stage_breakdown*.sql), as mean attributed ms per request of each group."""

from __future__ import annotations

from typing import Any

import pandas as pd

from tailscope import sql
from tailscope.analysis.phases import phase_rules_in_force
from tailscope.analysis.quantiles import from_order_statistics
from tailscope.analysis.source import Source, reading
from tailscope.analysis.stages import rules_in_force
from tailscope.analysis.types import BAND_QUANTILES, BANDS, Band, Filter
from tailscope.analysis.views import one_run
from tailscope.query.builders import filtered, span_tree_query
from tailscope.store.ch_conn import ClickHouseConnection
from tailscope.store.clickhouse import ClickHouseStore

COLUMNS = ["stage", "span_name", "band_ms", "median_ms", "delta_ms"]


def stage_breakdown(source: Source, flt: Filter, band: Band = "p99", sample: int = 500) -> pd.DataFrame:
    """DataFrame[stage, span_name, band_ms, median_ms, delta_ms]: mean attributed ms per request of
    the band and of the median band, per span name within its stage, largest difference first.
    Needs one run (flt.run, or the store's only run); empty when the band or the median is empty."""
    if band not in BAND_QUANTILES:
        raise ValueError(f"unknown band {band!r} (one of {', '.join(BANDS)})")
    lo, hi = BAND_QUANTILES[band]
    if isinstance(source, ClickHouseStore):
        rows, counts = _clickhouse_rows(source, flt, lo, hi, sample)
        if not counts.get("band") or not counts.get("median"):
            return pd.DataFrame(columns=COLUMNS)
        return _table(rows, counts)
    with reading(source) as conn:
        flt, reason = one_run(conn, flt)
        if reason:
            return pd.DataFrame(columns=COLUMNS)
        conn.execute(sql.load("derive_drop_scope"))
        text, params = filtered("stage_breakdown_scope", flt, lo, hi, hi >= 1.0, int(sample))
        conn.execute(text, params)
        try:
            counts = dict(conn.execute(sql.load("stage_breakdown_counts")).fetchall())
            if not counts.get("band") or not counts.get("median"):
                return pd.DataFrame(columns=COLUMNS)
            tree, tree_params = span_tree_query(
                rules_in_force(conn), "traces", flt.run, phase_rules=phase_rules_in_force(conn)
            )
            rows = conn.execute(
                sql.load("stage_breakdown").replace("{span_tree}", tree), tree_params
            ).fetchall()
        finally:
            conn.execute(sql.load("derive_drop_scope"))
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


def _clickhouse_rows(
    store: ClickHouseStore, flt: Filter, lo: float, hi: float, sample: int
) -> tuple[list[Any], dict[str, int]]:
    """(stage, span name, group, ns) rows and the sampled requests per group, on ClickHouse: the
    band bounds from order statistics, the span tree of the sampled traces inside ClickHouse (read in
    the seconds their spans start in, without the run's filters where no span of theirs is outside
    the run: ch_sample)."""
    from tailscope.query.clickhouse import span_tree_statements
    from tailscope.store import ch_sample, ch_write

    conn = ClickHouseConnection(store)
    flt, reason = one_run(conn, flt)
    selection = ch_write.run_selection(store, flt.run) if not reason and flt.run else None
    if selection is None:
        return [], {}
    quantiles = (0.45, 0.55, lo, hi)
    text, params = filtered("order_statistics", flt, list(quantiles), dialect="clickhouse")
    pairs, n = conn.execute(text, params).fetchone()
    if not n:
        return [], {}
    bounds = from_order_statistics(pairs, n, quantiles)
    text, params = filtered(
        "stage_breakdown_scope", flt, bounds, hi >= 1.0, int(sample), dialect="clickhouse"
    )
    groups = dict(conn.execute(text, params).fetchall())
    counts = {grp: sum(1 for g in groups.values() if g == grp) for grp in ("band", "median")}
    if not counts["band"] or not counts["median"]:
        return [], counts
    output = sql.load("stage_breakdown", dialect="clickhouse")
    ids = list(groups)
    seconds = ch_sample.trace_seconds(store, ids, ch_sample.selection_seconds(selection))
    rules, phases = ch_write.rules_in_force(store), ch_write.phase_rules_for(store, selection, ids, seconds)
    rows: list[Any] = []
    with ch_sample.sample_rows(store, flt.run, selection, ids, seconds) as proven:
        statements = span_tree_statements(rules, selection, output, ids, phases, seconds, proven)
        for i, (text, params) in enumerate(statements):
            result = store.query(text, params)
            if i == len(statements) - 2:
                rows = [(stage, name, groups[trace], ns) for stage, name, trace, ns in result.rows]
    return rows, counts
