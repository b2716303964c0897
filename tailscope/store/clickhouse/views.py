"""The named reads ClickHouse answers with more than its statement file, each with the rows the
DuckDB file of that name gives (tailscope.store.clickhouse.reader.VIEWS):

- quantiles: DuckDB's quantile_cont is one fused multiply-add over two order statistics; ClickHouse
  has no such function, so its files return the order statistics (`lo, hi` pairs) and
  `from_order_statistics` interpolates them here, bit for bit as DuckDB does (quantiles.py);
- waterfall, tail_stages, tail_attributes take quantiles as parameters on DuckDB: here the values
  are computed first (order_statistics.sql) and bound in their place;
- tail_attributes and the band breakdown read a sample of traces where it lies (sample.py).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, Protocol

from tailscope import sql
from tailscope.store.clickhouse import sample, write
from tailscope.store.clickhouse.quantiles import from_order_statistics
from tailscope.store.clickhouse.statements import (
    seconds_params,
    seconds_where,
    span_tree_statements,
)
from tailscope.store.clickhouse.store import ClickHouseClient
from tailscope.store.interface import FILTER_FIELDS, RequestFilter

Rows = list[tuple[Any, ...]]


class ClickHouseReader(Protocol):
    """What a view reads through (reader.ClickHouseReader)."""

    client: ClickHouseClient
    memo: dict[Any, Any]  # values computed for another statement of the same read

    def statement(self, name: str, params: Any, where: RequestFilter | None) -> tuple[str, Any]: ...

    def weighted(self, where: RequestFilter) -> bool: ...


# The quantiles the DuckDB files compute (overview.sql's e2e, stage_percentiles.sql's, llm_latency.sql's).
OVERVIEW_QUANTILES = (0.5, 0.95, 0.99, 0.999)
LINE_QUANTILES = (0.5, 0.99)  # heatmap.sql's lines
LLM_QUANTILES = (0.5, 0.9, 0.99)


def _rows(reader: ClickHouseReader, name: str, where: RequestFilter | None, *params: Any) -> Rows:
    """The rows of the statement file itself."""
    return reader.client.query(*reader.statement(name, params, where)).rows


def quantile_values(
    reader: ClickHouseReader, where: RequestFilter, quantiles: tuple[float, ...]
) -> tuple[list[float], int]:
    """quantile_cont(Duration, q) of the filtered requests for each q (NaN when none), and how many
    requests there are; computed once per read. Requests with weights (a head-sampled run): the
    weighted quantiles and the requests they stand for (weighted_quantiles.sql)."""
    key = (tuple(getattr(where, name) for name in FILTER_FIELDS), quantiles)
    if key not in reader.memo:
        if reader.weighted(where):
            values, n = _rows(reader, "weighted_quantiles", where, list(quantiles))[0]
            reader.memo[key] = ([float(v) for v in values] if n else [math.nan] * len(quantiles), int(n))
        else:
            pairs, n = _rows(reader, "order_statistics", where, list(quantiles))[0]
            reader.memo[key] = (from_order_statistics(pairs, n, quantiles), int(n))
    return reader.memo[key]


def overview(reader: ClickHouseReader, where: RequestFilter | None, params: list[Any]) -> Rows:
    rows = _rows(reader, "overview", where, *params)
    if where is not None and reader.weighted(where):  # overview_weighted.sql: the values themselves
        return [(*r[:7], [float(v) for v in r[7]], *r[8:]) for r in rows]
    return [(*r[:7], from_order_statistics(r[7], r[1], OVERVIEW_QUANTILES), *r[8:]) for r in rows]


def waterfall(reader: ClickHouseReader, where: RequestFilter | None, params: list[Any]) -> Rows:
    lo, hi, to_end = params
    assert where is not None
    bounds, _ = quantile_values(reader, where, (0.45, 0.55, lo, hi))
    return _rows(reader, "waterfall", where, *bounds, to_end)


def stage_percentiles(reader: ClickHouseReader, where: RequestFilter | None, params: list[Any]) -> Rows:
    rows = _rows(reader, "stage_percentiles", where, *params)
    if where is not None and reader.weighted(where):  # stage_percentiles_weighted.sql: the values
        return [tuple([float(v) for v in values] for values in r) for r in rows]
    return [tuple(from_order_statistics(pairs, r[0], OVERVIEW_QUANTILES) for pairs in r[1:]) for r in rows]


def heatmap(reader: ClickHouseReader, where: RequestFilter | None, params: list[Any]) -> Rows:
    rows = _rows(reader, "heatmap", where, *params)
    if where is not None and reader.weighted(where):  # heatmap_weighted.sql: the lines' values
        return [r if r[0] == "cell" else (*r[:4], float(r[4][0]), float(r[5][0]), *r[6:]) for r in rows]
    return [
        r if r[0] == "cell" else (*r[:4], *from_order_statistics(r[4:6], r[3], LINE_QUANTILES), *r[6:])
        for r in rows
    ]


def llm_latency(reader: ClickHouseReader, where: RequestFilter | None, params: list[Any]) -> Rows:
    """No row when no span has an attribute the statement reads (llm_keys_any.sql: the exporter's
    bloom filter index on the attribute keys), without reading the spans."""
    if not reader.client.query(sql.load("llm_keys_any", "clickhouse"), {}).single_value():
        return []
    rows = _rows(reader, "llm_latency", where, *params)
    return [(run, metric, n, from_order_statistics(q, n, LLM_QUANTILES)) for run, metric, n, q in rows]


def _tail_head(reader: ClickHouseReader, where: RequestFilter, params: list[Any]) -> list[Any]:
    """tail_stages.sql's leading parameters on ClickHouse from DuckDB's (tail quantile, is a
    rectangle, start, end, stage, low, stage, high): the stage first, the tail's threshold."""
    quantile, is_rect, start, end, stage, low, _, high = params[:8]
    threshold, n = quantile_values(reader, where, (quantile,))
    return [stage, threshold[0] if n else 0.0, is_rect, start, end, low, high]


def tail_stages(reader: ClickHouseReader, where: RequestFilter | None, params: list[Any]) -> Rows:
    assert where is not None
    return _rows(reader, "tail_stages", where, *_tail_head(reader, where, params))


def tail_attributes(reader: ClickHouseReader, where: RequestFilter | None, params: list[Any]) -> Rows:
    """The sample first (tail_sample.sql), its spans read once into a temporary table (tail_spans.sql),
    only in the seconds its traces' spans start in (sample.trace_seconds), their attributes and the
    roots' into another (tail_kv.sql)."""
    assert where is not None
    head = _tail_head(reader, where, params)
    samples, max_values = int(params[8]), int(params[9])
    rows = _rows(reader, "tail_sample", where, *head, samples)
    ids = [row[0] for row in rows]
    client = reader.client
    seconds = sample.trace_seconds(client, ids, int(rows[0][4]) if rows else 0)
    given = {
        "s_ids": ids,
        "s_roots": [row[1] for row in rows],
        "s_stages": [row[2] for row in rows],
        "s_selected": [bool(row[3]) for row in rows],
        "s_root_ns": [int(row[5]) for row in rows],
    }
    bound = seconds_where(len(seconds)) if seconds else "1"
    # only the run's spans: another run may hold traces with the same ids (DuckDB reads the RunLabel)
    selection = write.run_selection(client, where.run) if where.run else None
    scope = (
        selection.params()
        if selection
        else {"run_start": 0, "run_end": 0, "run_filter_keys": [], "run_filter_values": []}
    )
    spans = sql.load("tail_spans", "clickhouse").replace("{seconds}", bound)
    kv = sql.load("tail_kv", "clickhouse").replace("{seconds}", bound)
    drop = sql.load("tail_kv_drop", "clickhouse")
    tables = ("_ts_tail_kv", "_ts_tail_spans")
    for table in tables:
        client.query(drop, {"table": table})
    try:
        client.query(spans, {"s_ids": ids, **scope, **seconds_params(seconds)})
        client.query(kv, {**given, **scope, **seconds_params(seconds)})
        text = sql.load("tail_attributes", "clickhouse")
        return client.query(text, {"max_values": max_values, "s_selected": given["s_selected"]}).rows
    finally:
        for table in tables:
            client.query(drop, {"table": table})


VIEWS: dict[str, Callable[[ClickHouseReader, RequestFilter | None, list[Any]], Rows]] = {
    "overview": overview,
    "waterfall": waterfall,
    "stage_percentiles": stage_percentiles,
    "heatmap": heatmap,
    "llm_latency": llm_latency,
    "tail_stages": tail_stages,
    "tail_attributes": tail_attributes,
}


def band_breakdown(
    reader: ClickHouseReader, where: RequestFilter, lo: float, hi: float, samples: int
) -> tuple[Rows, dict[str, int]]:
    """(stage, span name, group, ns) rows and the sampled requests per group: the band bounds from
    order statistics, the span tree of the sampled traces inside ClickHouse (read in the seconds
    their spans start in, without the run's filters where no span of theirs is outside the run:
    sample.sample_rows)."""
    client = reader.client
    selection = write.run_selection(client, where.run) if where.run else None
    if selection is None:
        return [], {}
    bounds, n = quantile_values(reader, where, (0.45, 0.55, lo, hi))
    if not n:
        return [], {}
    scope = _rows(reader, "stage_breakdown_scope", where, bounds, hi >= 1.0, int(samples))
    groups = {row[0]: row[1] for row in scope}
    # a weighted run's sample (stage_breakdown_scope_weighted.sql): each request's time and count
    # weighed by its Weight, as DuckDB's stage_breakdown_weighted.sql does
    weights = {row[0]: float(row[2]) for row in scope} if reader.weighted(where) else None
    counts: dict[str, Any] = {
        grp: sum(1 if weights is None else weights[t] for t, g in groups.items() if g == grp)
        for grp in ("band", "median")
    }
    if not counts["band"] or not counts["median"]:
        return [], counts
    output = sql.load("stage_breakdown", "clickhouse")
    ids = list(groups)
    seconds = sample.trace_seconds(client, ids, sample.selection_seconds(selection))
    rules, phases = write.rules_in_force(client), write.phase_rules_for(client, selection, ids, seconds)
    with sample.sample_rows(client, where.run or "", selection, ids, seconds) as proven:
        statements = span_tree_statements(rules, selection, output, ids, phases, seconds, proven)
        result = client.query_steps(statements)
    rows: Rows = [
        (stage, name, groups[trace], ns if weights is None else ns * weights[trace])
        for stage, name, trace, ns in result.rows
    ]
    return rows, counts
