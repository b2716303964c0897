"""Tail vs body's attribute sample of a large selection on DuckDB, taken in blocks of consecutive
requests so that its spans are read where they lie instead of by a scan of the run's trace ids.

tail_attributes.sql samples up to N requests of each side by hash(TraceId): traces from all over the
run, whose spans DuckDB can only find by probing every span's TraceId of the run (its cost grows with
the run: 76 ms of CPU at 5 M spans). Here, as the ClickHouse engine's sample (tail_sample_cte.sql),
each side's requests in (Timestamp, TraceId) order are cut into blocks of ceil(N / BLOCKS)
consecutive ones and BLOCKS blocks of each side are drawn, equally likely (so is every request, wherever
its time); their spans start within their roots' intervals give or take the clock skew (as the
Gantt's, reader.trace_tree), a few windows of the run whose row groups DuckDB finds by their
Timestamp range. The blocks are numbered from per-second counts of each side (tail_block_counts.sql)
and read from their seconds only (tail_block_rows.sql), so no statement sorts the run's requests.

Another sample than the hash one (the same set when N covers a side; ClickHouse draws the same blocks,
tailscope.store.block_sample): where attributes do not drift over time its shares are within 4
binomial standard errors of the whole selection's (tests/test_tail_block_sample.py; at 10 M spans as
close as the hash sample's, bench/RESULTS.md); where one changes over the run (a deploy, a bad host
for an hour) 8 blocks vary more than as many independent traces."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from tailscope import sql
from tailscope.store.block_sample import BLOCKS, drawn_blocks
from tailscope.store.duckdb.derive import CLOCK_SKEW_NS
from tailscope.store.duckdb.statements import WINDOWS_WHERE, filtered
from tailscope.store.interface import SPAN_WINDOWS, RequestFilter

MIN_REQUESTS = 100_000  # smaller selections: the hash sample (tail_attributes.sql, ~0.1 s there)


def block_parts(slices: Sequence[tuple[Any, ...]], sample: int) -> list[dict[str, Any]]:
    """tail_block_rows.sql's parts from tail_block_counts.sql's rows (second, side, requests, first
    ns, last ns, threshold; in time order): each drawn block as the root starts of the seconds its
    requests lie in, how many of that side's requests there come before it (skip) and its size
    (take)."""
    parts: list[dict[str, Any]] = []
    for side in (True, False):
        rows = [row for row in slices if bool(row[1]) == side]
        if not rows:
            continue
        counts = np.array([int(row[2]) for row in rows], dtype=np.int64)
        ends = np.cumsum(counts)
        for first, end in drawn_blocks(int(ends[-1]), sample, side):
            a = int(np.searchsorted(ends, first, side="right"))
            z = int(np.searchsorted(ends, end - 1, side="right"))
            before = int(ends[a] - counts[a])
            parts.append(
                {
                    "part": len(parts),
                    "first_ns": int(rows[a][3]),
                    "last_ns": int(rows[z][4]),
                    "sel": side,
                    "skip": first - before,
                    "take": end - first,
                }
            )
    return parts


def span_windows(rows: Sequence[tuple[Any, ...]]) -> list[tuple[int, int]]:
    """[first, end) ns windows where the sampled traces' spans can start (tail_block_rows.sql's rows:
    root start ns at 4, longest ns at 5, part at 6): per part, its roots' intervals widened by their
    durations and the clock skew, overlapping ones merged (none for an empty sample)."""
    by_part: dict[int, tuple[int, int]] = {}
    for row in rows:
        start, longest, part = int(row[4]), int(row[5]), int(row[6])
        lo, hi = start - longest - CLOCK_SKEW_NS, start + longest + CLOCK_SKEW_NS + 1
        old = by_part.get(part)
        by_part[part] = (min(lo, old[0]), max(hi, old[1])) if old else (lo, hi)
    merged: list[tuple[int, int]] = []
    for lo, hi in sorted(by_part.values()):
        if merged and lo <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], hi))
        else:
            merged.append((lo, hi))
    if len(merged) > SPAN_WINDOWS:  # never with 2 x BLOCKS parts; else one window over them all
        merged = [(merged[0][0], merged[-1][1])]
    return merged


# tail_selection_at.sql's {parts}: one root-start range per part (fixed SQL, `?` bounds; unused: empty)
PARTS_WHERE = " OR ".join(
    ["(Timestamp BETWEEN make_timestamp_ns(?::BIGINT) AND make_timestamp_ns(?::BIGINT))"] * (2 * BLOCKS)
)


def tail_attributes(
    conn: Any, where: RequestFilter, params: Sequence[Any], weighted: bool
) -> pa.Table | None:
    """tail_attributes.sql's rows (as a table) over a block sample where the filtered requests are at
    least MIN_REQUESTS (params: tail_selection.sql's eight, the sample size per side, the maximum
    number of values per key); None for a smaller selection (the caller reads the hash sample)."""
    head, sample, max_values = list(params[:8]), int(params[8]), int(params[9])
    text, bound = filtered("tail_block_counts", where, *head, weighted=weighted)
    slices = conn.execute(text, bound).fetchall()
    if sum(int(row[2]) for row in slices) < MIN_REQUESTS:
        return None
    parts = block_parts(slices, sample)
    ranges = [(p["first_ns"], p["last_ns"]) for p in parts]
    ranges += [(0, -1)] * (2 * BLOCKS - len(ranges))
    text, bound = filtered(
        "tail_block_rows",
        where,
        *[t for pair in ranges for t in pair],
        slices[0][5],
        *head[1:],
        parts,
        sample,
        weighted=weighted,
    )
    rows = conn.execute(text.replace("{parts}", PARTS_WHERE), bound).fetchall()
    table = pa.table(
        {
            "RunLabel": pa.array([row[7] for row in rows], pa.string()),
            "TraceId": pa.array([row[0] for row in rows], pa.string()),
            "RootSpanId": pa.array([row[1] for row in rows], pa.string()),
            "DominantStage": pa.array([row[2] for row in rows], pa.string()),
            "selected": pa.array([bool(row[3]) for row in rows], pa.bool_()),
        }
    )
    windows = span_windows(rows)
    drop = sql.load("tail_sample_drop")
    conn.execute(drop)
    try:
        conn.register("_ts_tail_sample_rows", table)
        try:
            conn.execute(sql.load("tail_sample_create"))
        finally:
            conn.unregister("_ts_tail_sample_rows")
        padded = windows + [(0, 0)] * (SPAN_WINDOWS - len(windows))
        text = sql.load_expanded("tail_attributes_blocks").replace("{windows}", WINDOWS_WHERE)
        named = {
            "from_ns": [lo for lo, _ in padded],
            "to_ns": [hi for _, hi in padded],
            "max_values": max_values,
        }
        return conn.sql(text, params=named).to_arrow_table()
    finally:
        conn.execute(drop)
