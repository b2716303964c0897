"""Load trace files into a ClickHouse store (a server or chdb): the exporter's otel_traces, in batches.

The same decoders as ingest.loader; what differs is the write. ClickHouse has no transaction over a
file, so a file is decoded whole (Arrow, compact) before its first insert: a file rejected in strict
mode writes nothing, as on DuckDB. Its spans then go into otel_traces in inserts of INSERT_ROWS,
each span's resource attributes carrying tailscope.run = the run label. After the last file the run
is (re)defined in tailscope_runs as a selection (tailscope.run = label, over the time its spans
cover, widened to any earlier definition's) and its per-request rows are derived inside ClickHouse.
Unlike the DuckDB loader there is no duplicate check: spans loaded twice are stored twice.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable
from pathlib import Path

import pyarrow as pa

from ingest.errors import DecodeError
from ingest.loader import FileResult, LoadSummary, Progress, decode_file, default_run_label, expand_paths
from ingest.loader import reason_of as _reason
from ingest.setup import setup_attributes
from tailscope import sql
from tailscope.query.clickhouse import RunSelection
from tailscope.store import ch_write
from tailscope.store.clickhouse import ClickHouseStore

INSERT_ROWS = 100_000  # spans per insert: few, large parts for the MergeTree


def _decode(path: Path, result: FileResult, skip_bad: bool, setup: dict[str, set[str]]) -> list[pa.Table]:
    """A file's spans as Arrow tables (raises DecodeError in strict mode on the first bad record)."""

    def on_bad(error: DecodeError) -> None:
        result.rejected += 1
        result.reasons[_reason(error)] += 1

    tables = []
    with open(path, "rb", buffering=1 << 20) as raw:
        for batch in decode_file(raw, str(path), result, on_bad if skip_bad else None):
            if len(batch):
                setup_attributes(batch, setup)
                tables.append(batch.to_arrow())
    return tables


def _chunks(tables: list[pa.Table]) -> Iterable[pa.Table]:
    """The tables regrouped into inserts of about INSERT_ROWS spans (same schema only)."""
    pending: list[pa.Table] = []
    for table in tables:
        if pending and not table.schema.equals(pending[0].schema):
            yield pa.concat_tables(pending)
            pending = []
        pending.append(table)
        if sum(t.num_rows for t in pending) >= INSERT_ROWS:
            yield pa.concat_tables(pending)
            pending = []
    if pending:
        yield pa.concat_tables(pending)


def load_file(
    store: ClickHouseStore, path: Path, run_label: str, skip_bad: bool, setup: dict[str, set[str]]
) -> tuple[FileResult, tuple[int, int] | None]:
    """Load one file; its result and the (first, last) span start it wrote, None when nothing."""
    started = time.perf_counter()
    result = FileResult(path=str(path))
    bounds: tuple[int, int] | None = None
    try:
        tables = _decode(path, result, skip_bad, setup)
        for chunk in _chunks(tables):
            first, last = ch_write.append_spans(store, chunk, run_label)
            result.spans += chunk.num_rows
            bounds = (first, last) if bounds is None else (min(bounds[0], first), max(bounds[1], last))
    except DecodeError as error:
        result.error = str(error)
        result.spans = 0
    except OSError as error:
        result.error = f"{path}: {error.strerror or error}"
    result.seconds = time.perf_counter() - started
    return result, bounds


def load_paths(
    store: ClickHouseStore,
    paths: Iterable[str | os.PathLike[str]],
    run_label: str | None,
    skip_bad: bool = False,
    progress: Progress | None = None,
) -> LoadSummary:
    """As ingest.loader.load_paths, into a ClickHouse store: files into one run, then the run's
    selection and derived rows."""
    started = time.perf_counter()
    paths = list(paths)
    files = expand_paths(paths)
    label = run_label or default_run_label(paths)
    summary = LoadSummary(run_label=label)
    total = sum(p.stat().st_size for p in files if p.exists())
    done_bytes = done_spans = 0
    setup: dict[str, set[str]] = {}
    span: tuple[int, int] | None = None
    for path in files:
        result, bounds = load_file(store, path, label, skip_bad, setup)
        summary.files.append(result)
        if bounds is not None:
            span = bounds if span is None else (min(span[0], bounds[0]), max(span[1], bounds[1]))
        done_bytes += path.stat().st_size if path.exists() else 0
        done_spans += result.spans
        if progress is not None:
            progress(done_bytes, total, done_spans)
    if span is not None:
        earlier = ch_write.run_selection(store, label)
        if earlier is not None:
            span = (min(span[0], earlier.start_ns), max(span[1], earlier.end_ns))
        selection = RunSelection(span[0], span[1], {ch_write.RUN_ATTRIBUTE: label})
        ch_write.define_run(
            store,
            label,
            selection,
            files=[f.path for f in summary.files if f.error is None],
            setup={key: ",".join(sorted(values)) for key, values in sorted(setup.items())},
        )
        ch_write.refresh_run(store, label)
        summary.traces = int(
            store.query(sql.load("run_trace_count", "clickhouse"), selection.params()).single_value()
        )
    summary.seconds = time.perf_counter() - started
    return summary
