"""Tail vs body's attributes of a large run on DuckDB: the sample from a few stretches of time.

The sampled traces' spans have to be read from otel_traces. A sample spread over the whole run
(tail_attributes.sql: the N smallest hash(TraceId) per side) makes that a read of the run's every
TraceId (random ids give no zone map: 50 M spans, seconds). For a run of at least MIN_REQUESTS
requests the sample is drawn from 16 stretches of time per side instead (tail_sample_windows.sql,
as ClickHouse's tail_sample_cte.sql), staged, and its spans read only within those stretches plus
the reach of a trace (the run's longest request and the clock skew a derive allows), so DuckDB
skips the other row groups by their Timestamp range (tail_attributes_windows.sql). Smaller runs,
filtered views and a rectangle keep the whole-run sample.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tailscope import sql
from tailscope.store.duckdb.derive import CLOCK_SKEW_NS, longest_request
from tailscope.store.duckdb.statements import filtered, padded_windows
from tailscope.store.interface import FILTER_FIELDS, SPAN_WINDOWS, RequestFilter

MIN_REQUESTS = 1_000_000  # below: the whole-run sample (measured: at 0.45 M requests it was the faster)

# SPAN_WINDOWS windows [first, end) ns as positional parameters (fixed SQL; unused ones are empty)
SPAN_WINDOWS_SQL = (
    "RunLabel = ? AND ("
    + " OR ".join(
        ["(Timestamp >= make_timestamp_ns(?::BIGINT) AND Timestamp < make_timestamp_ns(?::BIGINT))"]
        * SPAN_WINDOWS
    )
    + ")"
)


def _whole_run(where: RequestFilter) -> bool:
    return where.run is not None and all(getattr(where, f) is None for f in FILTER_FIELDS if f != "run")


def merged(windows: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    """Windows sorted, overlapping ones merged."""
    out: list[tuple[int, int]] = []
    for first, end in sorted(windows):
        if out and first <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], end))
        else:
            out.append((first, end))
    return out


def tail_attributes(
    conn: Any, where: RequestFilter, params: Sequence[Any], weighted: bool
) -> list[tuple] | None:
    """tail_attributes.sql's rows for a large whole run, from the windowed sample; None where it
    does not apply (the caller runs tail_attributes.sql)."""
    head, samples, max_values = list(params[:8]), int(params[8]), int(params[9])
    if head[1] or not _whole_run(where) or where.run is None:  # head[1]: a rectangle
        return None
    requests = conn.execute(sql.load("run_request_count"), [where.run]).fetchall()[0][0]
    if requests < MIN_REQUESTS:
        return None
    text, bound = filtered("tail_sample_windows", where, *head, samples, samples, weighted=weighted)
    sample = conn.sql(text, params=bound).to_arrow_table()
    if sample.num_rows == 0:
        return None
    reach = longest_request(conn, where.run) + CLOCK_SKEW_NS
    stretches: dict[tuple[bool, int], list[int]] = {}
    for selected, slot, root in zip(
        sample["selected"].to_pylist(), sample["Slot"].to_pylist(), sample["RootNs"].to_pylist(), strict=True
    ):
        stretch = stretches.setdefault((selected, slot), [root, root])
        stretch[0], stretch[1] = min(stretch[0], root), max(stretch[1], root)
    windows = merged([(low - reach, high + reach + 1) for low, high in stretches.values()])
    if len(windows) > SPAN_WINDOWS:
        return None
    conn.execute(sql.load("tail_sample_drop"))
    conn.register("_ts_tail_sample_rows", sample.drop_columns(["RootNs", "Slot"]))
    try:
        conn.execute(sql.load("tail_sample_stage"))
    finally:
        conn.unregister("_ts_tail_sample_rows")
    try:
        text, bound = filtered("tail_attributes_windows", where)
        text = text.replace("{span_windows}", SPAN_WINDOWS_SQL)
        return conn.execute(text, [*bound, where.run, *padded_windows(windows), max_values]).fetchall()
    finally:
        conn.execute(sql.load("tail_sample_drop"))
