"""The Store interface: everything the code above the store may ask of one, whichever engine answers.

    store = open_store(url)                  tailscope.store.engine: the one place an engine is chosen
    with store.reading() as reader:          one unit of reading (DuckDB: one read-only connection)
        reader.run("overview", where=flt)    a named statement: rows shaped as its DuckDB file has them
    with store.run_writer("run-a") as w:     ingest: w.write_file(path, batches) each, w.finish()
    store.span_sink("run-a", "otlp-http")    the receiver's flushes

Callers name statements; each engine loads its dialect's file (tailscope/sql, tailscope/sql/clickhouse)
and binds the parameters its own way. Where an engine computes a read differently (the span tree,
samples, quantiles) that is its own implementation of the same method. See ARCHITECTURE.md, "Store".
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol, TypeVar

import numpy as np
import pandas as pd
import pyarrow as pa

from tailscope.rules import PhaseRule, StageRule
from tailscope.store.ahead import Pending

T = TypeVar("T")


class RequestFilter(Protocol):
    """Which derived requests a statement's {where} keeps (tailscope.analysis.types.Filter)."""

    run: str | None
    service: str | None
    route: str | None
    instance: str | None
    start: datetime | None
    end: datetime | None


FILTER_FIELDS = ("run", "service", "route", "instance", "start", "end")


@dataclass(frozen=True)
class Result:
    """Rows of one query, with their column names and how long the query took."""

    columns: list[str]
    rows: list[tuple[Any, ...]]
    seconds: float

    def first(self) -> tuple[Any, ...] | None:
        return self.rows[0] if self.rows else None

    def single_value(self) -> Any:
        return self.rows[0][0] if self.rows else None


class Rows(Protocol):
    """A named statement's answer, read in the form the caller wants."""

    def fetchone(self) -> tuple[Any, ...] | None: ...

    def fetchall(self) -> list[tuple[Any, ...]]: ...

    def df(self) -> pd.DataFrame: ...

    def numpy(self) -> dict[str, np.ndarray]: ...

    def arrow(self) -> pa.Table: ...


@dataclass
class TraceTree:
    """One trace's reads for the Gantt: its run (None: no run has the trace), the span tree
    (span_tree_spans.sql's columns; None: the trace has no request root in the run), the client
    span (client_span.sql's row), each span's duration rank in the run by 1-based position (the
    client span last), and without a tree how many spans the run has of the trace."""

    run: str | None
    tree: pd.DataFrame | None = None
    client: tuple[Any, ...] | None = None
    ranks: dict[int, float] = field(default_factory=dict)
    spans: int = 0


@dataclass(frozen=True)
class HeatmapRows:
    """A run's heatmap pre-aggregate of one stage in time bins of `width` whole seconds from second
    `first` (epoch): rows (time bin, bucket, cell at 10 per decade, requests, weight), the requests
    they count and the run's requests (the same when the pre-aggregate is in step)."""

    first: int
    width: int
    rows: list[tuple[Any, ...]]
    counted: int
    requests: int


class Reader(Protocol):
    """One unit of reading. Every analysis function takes a Store or a Reader (both have `reading`)."""

    def reading(self) -> AbstractContextManager[Reader]: ...

    def run(self, name: str, params: Sequence[Any] = (), where: RequestFilter | None = None) -> Rows:
        """The statement `name` with `params` bound in order after the filter's; `where`: the
        statement's {where} keeps the derived requests the filter names (filtered statements)."""
        ...

    def histograms(
        self, run: str, min_requests: int = 0
    ) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]], int] | None:
        """The run's pre-aggregates (tailscope.analysis.histogram reads them): the rows of
        histogram_read_e2e.sql and histogram_read_stages.sql and how many requests the run has
        (the histogram counts them all when it is in step); None where the store keeps none or
        the run has fewer than `min_requests` requests (then nothing else is read)."""
        ...

    def heatmap_histogram(
        self, run: str, stage: str, time_bins: int, min_requests: int = 0
    ) -> HeatmapRows | None:
        """The run's heatmap pre-aggregate of one stage ('' for e2e; tailscope.analysis.heatmap_histogram
        reads it) summed into time bins of whole seconds, as few as make at most `time_bins` bins;
        None where the store keeps none, the run has fewer than `min_requests` requests, or its
        requests start within fewer seconds than `time_bins` (then the bins would be under a second)."""
        ...

    def stage_rules(self) -> list[StageRule]:
        """The stage rules in force (the defaults when the store has none)."""
        ...

    def phase_rules(self) -> list[PhaseRule]:
        """The phase rules in force (the defaults when the store has none)."""
        ...

    def regex_error(self, pattern: str) -> str | None:
        """None when the engine's RE2 compiles `pattern`, else why not (RE2's words)."""
        ...

    def stage_mapping(
        self, run: str, sample_traces: int, window: tuple[int, int] | None = None
    ) -> list[tuple[Any, ...]]:
        """(span name, span kind, stage, rule number, spans) over up to `sample_traces` traces of
        the run ([] for a run the store does not have); `window` (first, end) ns: traces with a span
        starting there (a sampled diagnosis: the read stays within it; an engine whose own sample
        is bounded may ignore it)."""
        ...

    def band_breakdown(
        self, where: RequestFilter, lo: float, hi: float, sample: int
    ) -> tuple[list[tuple[Any, ...]], dict[str, int]]:
        """(stage, span name, 'band' | 'median', ns) rows of the span trees of up to `sample`
        requests of the band [lo, hi) quantiles and of the median band of one run, and how many
        requests each group sampled."""
        ...

    def trace_tree(self, trace_id: str, run: str | None) -> TraceTree:
        """The Gantt's reads of one trace (`run` None: the first run that has it)."""
        ...

    def ahead(self, read: Callable[[Reader], T]) -> Pending[T]:
        """`read` (of a reader of this store) started now, answered by `get()`: on a second reader in a
        background thread where the engine runs two statements at once (DuckDB: a cursor), so it reads
        while the caller works in numpy; else on this reader at the first `get()` (ClickHouse).
        The reading ends after every read started ahead."""
        ...

    def span_table(
        self, name: str, run: str, windows: Sequence[tuple[int, int]] | None = None, **params: Any
    ) -> pa.Table:
        """The diagnosis' span reads (diagnosis_spans, with the run's phase spans;
        diagnosis_gc_events; diagnosis_span_attributes (one name's, param span_name);
        diagnosis_names_attributes (several names' in one read, param span_names);
        diagnosis_links, the CONSUMER spans' links; diagnosis_extent; diagnosis_weights, the weights of a
        head-sampled run's requests) over one run, as Arrow;
        `windows` (first, end) ns, at most SPAN_WINDOWS: only the spans starting in one of them
        [first, end) (a sampled diagnosis, tailscope.analysis.diagnosis.sample)."""
        ...


# The most time windows one span_table read takes (a sampled diagnosis reads its windows at once).
SPAN_WINDOWS = 32


@dataclass
class FileWrite:
    """What one file's write did (a RunWriter may correct it until `finish`)."""

    stored: int = 0  # spans new to the run
    duplicates: int = 0  # spans the run already had, or the file repeated
    run_traces: int | None = None  # the run's traces once the file was written (None: at finish)


class SpanBatch(Protocol):
    """A decoded batch of spans (ingest.columns.SpanColumns, ingest.arrow_batch.ArrowSpans)."""

    def __len__(self) -> int: ...

    def to_arrow(self) -> pa.Table: ...

    def unique_resources(self) -> list[dict[str, str]]: ...


class RunWriter(Protocol):
    """Loads files into one run (ingest): each file all or nothing."""

    def write_file(self, source: str, batches: Iterable[SpanBatch]) -> FileWrite:
        """Write every batch of one file, or nothing of it when `batches` raises (a rejected file)."""
        ...

    def finish(self) -> int:
        """After the last file: the run defined and derived where the engine waits for that; how
        many traces the run has."""
        ...


class SpanSink(Protocol):
    """Where the OTLP receiver's flushes go (ingest.receiver.writer.BatchWriter)."""

    where: str  # the store, for the receiver's log line

    def write(self, batches: Sequence[SpanBatch]) -> None:
        """One flush: the batches stored (all or nothing where the engine allows) and the run's
        derived rows brought up to date (ClickHouse: at most every few seconds)."""
        ...

    def reader_waiting(self) -> bool:
        """Whether a reader waits for the store (the writer then paces its flushes)."""
        ...

    def close(self) -> None:
        """After the last flush: derive what is pending. Raises when that fails."""
        ...


@dataclass(frozen=True)
class Migration:
    """What `migrate` did."""

    path: str
    from_version: int
    to_version: int
    spans: int
    seconds: float
    aggregated: tuple[str, ...] = ()  # runs whose pre-aggregates were built (a store derived before them)

    def describe(self) -> str:
        built = f"; pre-aggregates built for {len(self.aggregated)} runs" if self.aggregated else ""
        if self.from_version == self.to_version:
            return f"{self.path}: already at schema version {self.to_version}{built or ', nothing to do'}"
        return (
            f"{self.path}: schema version {self.from_version} -> {self.to_version}, "
            f"{self.spans:,} spans converted in {self.seconds:.1f} s{built}"
        )


class Store(Protocol):
    """A store handle, safe to keep for the life of a process (it opens what it needs on use)."""

    @property
    def name(self) -> str:
        """How messages name the store: a file's path, or its URL without the password."""
        ...

    @property
    def file(self) -> Path | None:
        """The one file that is the store (DuckDB), None for a folder or a server: a dashboard is
        handed a file on its command line, a URL (which may hold a password) in its environment."""
        ...

    def delete(self) -> None:
        """Delete the store's data (a demo starting over); UnsupportedError where that is not one
        file of this tool's own (ClickHouse)."""
        ...

    def reading(self) -> AbstractContextManager[Reader]: ...

    def data_version(self) -> tuple[Any, ...]:
        """Changes whenever the data does: a cache key for query results."""
        ...

    def prepare(self, writing: bool = False) -> None:
        """Before a command: the store checked and its tables created where missing (`writing`:
        also the span table a writer needs)."""
        ...

    def close(self) -> None: ...

    def replace_stage_rules(
        self, rules: list[StageRule], progress: Callable[[float, str], None] | None = None
    ) -> list[str]:
        """Validate and store an edited rule list (renumbered 1..n) and derive every run again with
        it; the runs derived. ValueError naming the problems (nothing changed then). `progress`:
        told (fraction of the store derived, what is being derived) as the derive goes."""
        ...

    def replace_phase_rules(
        self, rules: list[PhaseRule], progress: Callable[[float, str], None] | None = None
    ) -> list[str]:
        """As replace_stage_rules, for the phase rules."""
        ...

    def run_writer(self, run: str, files: int = 1) -> AbstractContextManager[RunWriter]:
        """A writer of `files` files into the run `run`."""
        ...

    def span_sink(self, run: str, source: str) -> SpanSink:
        """A sink for the receiver's flushes into the run `run`."""
        ...

    def select_run(
        self, run: str, start_ns: int | None, end_ns: int | None, filters: dict[str, str]
    ) -> tuple[int, int]:
        """Name the spans in [start_ns, end_ns] (None: from the first, to the last) whose resource
        attributes hold every filter as a run and derive it; (spans, requests) it holds. LookupError
        when no span matches; UnsupportedError where runs are not selections (DuckDB: a run is what
        ingest loaded under its label)."""
        ...

    def migrate(self) -> Migration:
        """Take the store to the current schema (one transaction where the engine has them)."""
        ...
