"""Load trace files into a ClickHouse store (a server or chdb): the exporter's otel_traces, in batches.

ingest.loader decodes; this is the write (the store's RunWriter). ClickHouse has no transaction over a
file, so a file's spans are staged first, batch by batch while the next batch decodes (in a second thread,
where ClickHouse works without the GIL): each batch goes into an in-memory staging table in the
decoders' text form and is converted there into the exporter's columns (a second in-memory table),
and once the whole file decoded one insert writes it into otel_traces: a file rejected in strict
mode writes nothing, as on DuckDB. Each span's resource attributes carry tailscope.run = the label.
After the last file the run is (re)defined in tailscope_runs as a selection (tailscope.run = label,
over the time its spans cover, widened to any earlier definition's) and its per-request rows are
derived inside ClickHouse. A new run from one file on chdb keeps its converted spans in a shared
table instead, written into otel_traces by a second chdb session while the requests are derived
from that table (overlap.py).
Spans the run already has, or that a file repeats, are not written again (dedupe.py), as on
DuckDB; a new run's one file that repeats spans is not written while derived but once each
(overlap.repeats / move_once).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager

from tailscope import sql
from tailscope.store.clickhouse import dedupe, overlap, write
from tailscope.store.clickhouse.statements import RunSelection
from tailscope.store.clickhouse.store import ClickHouseClient
from tailscope.store.interface import FileWrite, SpanBatch
from tailscope.store.setup import arrow_chunks

INSERT_ROWS = 100_000  # spans per insert into the staging table

Bounds = tuple[int, int]


def _widen(bounds: Bounds | None, first: int, last: int) -> Bounds:
    return (first, last) if bounds is None else (min(bounds[0], first), max(bounds[1], last))


def _stage_file(
    store: ClickHouseClient,
    batches: Iterable[SpanBatch],
    run_label: str,
    setup: dict[str, set[str]],
    ready: str = write.READY,
) -> tuple[Bounds | None, int]:
    """Stage a file's batches (the iterable raises DecodeError in strict mode on the first bad
    record), each converted in a second thread while the next decodes; the (first, last) span start
    staged (None when the file had no spans) and how many spans."""
    bounds: Bounds | None = None
    spans = 0
    with ThreadPoolExecutor(1, thread_name_prefix="tailscope-stage") as stager:
        pending: Future[Bounds] | None = None
        for chunk in arrow_chunks(batches, setup, INSERT_ROWS):
            if pending is not None:
                bounds = _widen(bounds, *pending.result())
            spans += chunk.num_rows
            pending = stager.submit(write.stage_spans, store, chunk, run_label, ready)
        if pending is not None:
            bounds = _widen(bounds, *pending.result())
    return bounds, spans


def _define_and_derive(
    store: ClickHouseClient,
    label: str,
    span: tuple[int, int],
    writes: list[tuple[str, FileWrite]],
    setup: dict[str, set[str]],
    ready: str,
) -> int:
    """Define (or widen) the run's selection over the loaded spans and derive its requests (while
    a shared `ready` table is written, overlap); how many traces the run has."""
    earlier = write.run_selection(store, label)
    if earlier is not None:
        span = (min(span[0], earlier.start_ns), max(span[1], earlier.end_ns))
    selection = RunSelection(span[0], span[1], {write.RUN_ATTRIBUTE: label})

    def define() -> None:
        write.define_run(
            store,
            label,
            selection,
            files=[source for source, _ in writes],
            setup={key: ",".join(sorted(values)) for key, values in sorted(setup.items())},
        )

    repeats = overlap.repeats(store, ready) if ready != write.READY else 0
    if ready != write.READY and not repeats and sum(w.stored for _, w in writes) <= write.PART_SPANS:
        traces = overlap.write_and_derive(store, label, ready, selection, define)
        if traces is not None:
            return traces
    else:  # (a run bigger than one derive window is derived window by window from otel_traces)
        if repeats:  # the one file of a new run repeats some of its spans: each stored once
            stored = overlap.move_once(store, ready)
            loaded = writes[0][1]
            loaded.duplicates, loaded.stored = loaded.stored - stored, stored
        elif ready != write.READY:
            write.move_ready(store, ready)
        define()
        write.refresh_run(store, label)
    return int(store.query(sql.load("run_trace_count", "clickhouse"), selection.params()).single_value())


class ClickHouseRunWriter:
    """A RunWriter into a ClickHouse store: files staged one by one (a rejected file writes
    nothing), the run defined and derived at `finish`."""

    def __init__(self, store: ClickHouseClient, run: str, files: int) -> None:
        self.store = store
        self.run = run
        self.setup: dict[str, set[str]] = {}
        self.span: Bounds | None = None
        self.writes: list[tuple[str, FileWrite]] = []
        # a new run from one file on chdb: its spans written while its requests are derived (overlap)
        possible = overlap.possible(store, files, run)
        self.ready = overlap.ready_table(store) if possible else write.READY

    def write_file(self, source: str, batches: Iterable[SpanBatch]) -> FileWrite:
        """One file's spans staged and, unless they wait for `finish` in a shared table, written
        into otel_traces (those the run does not have yet)."""
        result = FileWrite()
        try:
            write.clear_staged(self.store, self.ready)
            bounds, spans = _stage_file(self.store, batches, self.run, self.setup, self.ready)
            result.stored = spans
            if bounds is not None and self.ready == write.READY:
                stored = dedupe.move_ready_once(self.store, self.run, *bounds)
                result.stored, result.duplicates = stored, spans - stored
        except BaseException:  # a rejected file (or a failure): nothing of it stays staged
            with contextlib.suppress(Exception):  # the first error is the one to report
                write.clear_staged(self.store, self.ready)
            raise
        if bounds is not None:
            self.span = _widen(self.span, *bounds)
        self.writes.append((source, result))
        return result

    def finish(self) -> int:
        if self.span is None:
            return 0
        return _define_and_derive(self.store, self.run, self.span, self.writes, self.setup, self.ready)

    def close(self) -> None:
        if self.ready != write.READY:
            overlap.drop_ready(self.store, self.ready)


@contextmanager
def run_writer(store: ClickHouseClient, run: str, files: int) -> Iterator[ClickHouseRunWriter]:
    writer = ClickHouseRunWriter(store, run, files)
    try:
        yield writer
    finally:
        writer.close()
