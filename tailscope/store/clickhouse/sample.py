"""Sampled traces on ClickHouse, read where they are: the exporter's otel_traces is ordered by
(ServiceName, SpanName, second), so a sample of traces from all over a run has spans in every granule
and its read costs the run's (the attribute maps of 10 M spans). The sampled views therefore take
their traces from a few stretches of time (the samples' SQL: blocks of consecutive requests, drawn
alike, so every request stays equally likely), and read only the seconds those traces' spans start
in (trace_seconds: the exporter's lookup table otel_traces_trace_id_ts), which the primary key
finds."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from tailscope import sql
from tailscope.store.clickhouse.statements import (
    RESOURCE_MAP,
    RunSelection,
    sample_columns,
    seconds_params,
    seconds_where,
)
from tailscope.store.clickhouse.store import ClickHouseClient
from tailscope.store.errors import TableMissingError

# More separate stretches than this and a read is not bounded by them (the sample is spread out
# anyway; a long OR costs more than it saves).
MAX_STRETCHES = 64

Seconds = list[tuple[int, int]]
NS = 1_000_000_000


def merged(ranges: list[tuple[int, int]]) -> Seconds:
    """[first, last] second ranges, overlapping or adjacent ones merged, in order."""
    out: list[tuple[int, int]] = []
    for lo, hi in sorted(ranges):
        if out and lo <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(out[-1][1], hi))
        else:
            out.append((lo, hi))
    return out


def selection_seconds(selection: RunSelection) -> int:
    """How many seconds a run's selection spans."""
    return (selection.end_ns - selection.start_ns) // NS + 1


def trace_seconds(store: ClickHouseClient, ids: list[str], run_seconds: int) -> Seconds | None:
    """The merged seconds the traces' spans start in; None (read them across the run) when the lookup
    table is missing, does not know every one of them, or they spread over too many stretches or
    over half of the `run_seconds` the sample was taken from (a small run: the bound costs more
    than it saves)."""
    if not ids:
        return None
    try:
        rows = store.query(sql.load("trace_seconds", dialect="clickhouse"), {"ids": list(ids)}).rows
    except TableMissingError:
        return None
    if len(rows) < len(set(ids)):
        return None
    seconds = merged([(int(lo), int(hi)) for lo, hi in rows])
    covered = sum(hi - lo + 1 for lo, hi in seconds)
    return seconds if len(seconds) <= MAX_STRETCHES and 2 * covered <= run_seconds else None


@contextmanager
def sample_rows(
    store: ClickHouseClient, run: str, selection: RunSelection, ids: list[str], seconds: Seconds | None
) -> Iterator[list[str]]:
    """Read the sampled traces `ids` of `run` once, without the run's attribute filters, into
    _ts_sample_rows (sample_rows.sql) for the span tree's scope, and give those of them with no
    span outside the run there (proven_traces.sql); the table is dropped after. A run without
    attribute filters has nothing to spare: none then (the scope reads otel_traces as before)."""
    if not ids or not selection.filters:
        yield []
        return
    bound = seconds_where(len(seconds)) if seconds else "1"
    params = {"run": run, "sample_ids": list(ids), **selection.params(), **seconds_params(seconds)}
    drop = sql.load("sample_rows_drop", dialect="clickhouse")
    store.query(drop)
    try:
        text = sql.load("sample_rows", dialect="clickhouse").replace("{seconds}", bound)
        columns = sample_columns(f"CAST(map(), '{RESOURCE_MAP}')")
        store.query(text.replace("{columns}", columns), params)
        yield [row[0] for row in store.query(sql.load("proven_traces", dialect="clickhouse"), params).rows]
    finally:
        store.query(drop)
