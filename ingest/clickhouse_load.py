"""Load trace files into a ClickHouse store (a server or chdb): the exporter's otel_traces, in batches.

The same decoders as ingest.loader; what differs is the write. ClickHouse has no transaction over a
file, so a file's spans are staged first, batch by batch while the next batch decodes (in a second thread,
where ClickHouse works without the GIL): each batch goes into an in-memory staging table in the
decoders' text form and is converted there into the exporter's columns (a second in-memory table),
and once the whole file decoded one insert writes it into otel_traces: a file rejected in strict
mode writes nothing, as on DuckDB. Each span's resource attributes carry tailscope.run = the label.
After the last file the run is (re)defined in tailscope_runs as a selection (tailscope.run = label,
over the time its spans cover, widened to any earlier definition's) and its per-request rows are
derived inside ClickHouse. A new run from one file on chdb keeps its converted spans in a shared
table instead, written into otel_traces by a second chdb session while the requests are derived
from that table (tailscope.store.ch_overlap).
Spans the run already has, or that a file repeats, are not written again (store.ch_dedupe), as on
DuckDB; a new run's one file that repeats spans is not written while derived but once each
(ch_overlap.repeats / move_once).
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pyarrow as pa

from ingest.errors import DecodeError
from ingest.loader import FileResult, LoadSummary, Progress, decode_file, default_run_label, expand_paths
from ingest.loader import reason_of as _reason
from ingest.parallel import PARALLEL_MIN_BYTES, DecodePool, decode_on_workers
from ingest.setup import setup_attributes
from tailscope import sql
from tailscope.query.clickhouse import RunSelection
from tailscope.store import ch_dedupe, ch_overlap, ch_write
from tailscope.store.clickhouse import ClickHouseStore

INSERT_ROWS = 100_000  # spans per insert into the staging table


def _stage_file(
    store: ClickHouseStore,
    path: Path,
    run_label: str,
    result: FileResult,
    skip_bad: bool,
    setup: dict[str, set[str]],
    pool: DecodePool | None = None,
    ready: str = ch_write.READY,
) -> tuple[int, int] | None:
    """Decode a file into the staging table (raises DecodeError in strict mode on the first bad
    record), counting its spans in result.spans; the (first, last) span start staged, None when the
    file had no spans."""

    def on_bad(error: DecodeError) -> None:
        result.rejected += 1
        result.reasons[_reason(error)] += 1

    bounds: tuple[int, int] | None = None
    with ThreadPoolExecutor(1, thread_name_prefix="tailscope-stage") as stager:
        pending: Future[tuple[int, int]] | None = None
        waiting: list[pa.Table] = []

        def flush() -> None:
            nonlocal pending, bounds
            if pending is not None:
                first, last = pending.result()
                bounds = (first, last) if bounds is None else (min(bounds[0], first), max(bounds[1], last))
            chunk = pa.concat_tables(waiting) if len(waiting) > 1 else waiting[0]
            waiting.clear()
            result.spans += chunk.num_rows
            pending = stager.submit(ch_write.stage_spans, store, chunk, run_label, ready)

        with open(path, "rb", buffering=1 << 20) as raw:
            for batch in decode_file(raw, str(path), result, on_bad if skip_bad else None, pool):
                if not len(batch):
                    continue
                setup_attributes(batch, setup)
                table = batch.to_arrow()
                if waiting and not table.schema.equals(waiting[0].schema):
                    flush()
                waiting.append(table)
                if sum(t.num_rows for t in waiting) >= INSERT_ROWS:
                    flush()
        if waiting:
            flush()
        if pending is not None:
            first, last = pending.result()
            bounds = (first, last) if bounds is None else (min(bounds[0], first), max(bounds[1], last))
    return bounds


def load_file(
    store: ClickHouseStore,
    path: Path,
    run_label: str,
    skip_bad: bool,
    setup: dict[str, set[str]],
    pool: DecodePool | None = None,
    ready: str = ch_write.READY,
) -> tuple[FileResult, tuple[int, int] | None]:
    """Load one file; its result and the (first, last) span start it wrote, None when nothing.
    With a shared `ready` table (ch_overlap) the spans stay there, converted, for the caller."""
    started = time.perf_counter()
    result = FileResult(path=str(path))
    bounds: tuple[int, int] | None = None
    try:
        ch_write.clear_staged(store, ready)
        bounds = _stage_file(store, path, run_label, result, skip_bad, setup, pool, ready)
        if bounds is not None and ready == ch_write.READY:
            stored = ch_dedupe.move_ready_once(store, run_label, *bounds)
            result.spans, result.duplicates = stored, result.spans - stored
    except DecodeError as error:
        ch_write.clear_staged(store, ready)
        result.error = str(error)
        result.spans, bounds = 0, None
    except OSError as error:
        ch_write.clear_staged(store, ready)
        result.error = f"{path}: {error.strerror or error}"
        result.spans, bounds = 0, None
    result.seconds = time.perf_counter() - started
    return result, bounds


def _define_and_derive(
    store: ClickHouseStore,
    label: str,
    span: tuple[int, int],
    summary: LoadSummary,
    setup: dict[str, set[str]],
    ready: str,
) -> int:
    """Define (or widen) the run's selection over the loaded spans and derive its requests (while
    a shared `ready` table is written, ch_overlap); how many traces the run has."""
    earlier = ch_write.run_selection(store, label)
    if earlier is not None:
        span = (min(span[0], earlier.start_ns), max(span[1], earlier.end_ns))
    selection = RunSelection(span[0], span[1], {ch_write.RUN_ATTRIBUTE: label})

    def define() -> None:
        ch_write.define_run(
            store,
            label,
            selection,
            files=[f.path for f in summary.files if f.error is None],
            setup={key: ",".join(sorted(values)) for key, values in sorted(setup.items())},
        )

    repeats = ch_overlap.repeats(store, ready) if ready != ch_write.READY else 0
    if ready != ch_write.READY and not repeats and summary.spans <= ch_write.PART_SPANS:
        traces = ch_overlap.write_and_derive(store, label, ready, selection, define)
        if traces is not None:
            return traces
    else:  # (a run bigger than one derive window is derived window by window from otel_traces)
        if repeats:  # the one file of a new run repeats some of its spans: each stored once
            stored = ch_overlap.move_once(store, ready)
            loaded = next(f for f in summary.files if f.error is None)
            loaded.duplicates, loaded.spans = loaded.spans - stored, stored
        elif ready != ch_write.READY:
            ch_write.move_ready(store, ready)
        define()
        ch_write.refresh_run(store, label)
    return int(store.query(sql.load("run_trace_count", "clickhouse"), selection.params()).single_value())


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
    sizes = [p.stat().st_size if p.exists() else 0 for p in files]
    # big OTLP files decode on worker processes, as ingest.loader does (forked before this load
    # starts a thread; the workers only decode, and leave by os._exit, never touching chdb)
    parallel = decode_on_workers(sizes)
    # a new run from one file on chdb: its spans written while its requests are derived (ch_overlap)
    ready = ch_overlap.ready_table(store) if ch_overlap.possible(store, len(files), label) else ch_write.READY
    try:
        with DecodePool() if parallel else contextlib.nullcontext() as pool:
            for path, size in zip(files, sizes, strict=True):
                use_pool = pool if size >= PARALLEL_MIN_BYTES else None
                result, bounds = load_file(store, path, label, skip_bad, setup, use_pool, ready)
                summary.files.append(result)
                if bounds is not None:
                    span = bounds if span is None else (min(span[0], bounds[0]), max(span[1], bounds[1]))
                done_bytes += size
                done_spans += result.spans
                if progress is not None:
                    progress(done_bytes, total, done_spans)
        if span is not None:
            summary.traces = _define_and_derive(store, label, span, summary, setup, ready)
    finally:
        if ready != ch_write.READY:
            ch_overlap.drop_ready(store, ready)
    summary.seconds = time.perf_counter() - started
    return summary
