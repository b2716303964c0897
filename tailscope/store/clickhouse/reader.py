"""Reading a ClickHouse store: the Reader every analysis function takes, over one ClickHouseClient.

`run(name, params, where)` loads clickhouse/<name>.sql (or the shared file), binds the filter's
fields by name (f_run, ...) and `params` as p1, p2, ..., and answers with the rows the DuckDB file
gives: where ClickHouse computes a read differently (quantiles from order statistics, the tail's
threshold first, its attributes from a sample) the statement's own implementation in
tailscope.store.clickhouse.views answers instead (VIEWS). The span tree, samples and the Gantt's
ranks run inside ClickHouse (write.stage_mapping, trace, sample).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar

import numpy as np
import pandas as pd
import pyarrow as pa

from tailscope import sql
from tailscope.rules import PhaseRule, StageRule
from tailscope.store.ahead import Pending
from tailscope.store.clickhouse import trace, views, write
from tailscope.store.clickhouse.statements import filtered, scoped
from tailscope.store.clickhouse.store import ClickHouseClient, rows_of
from tailscope.store.errors import StoreError, why_refused
from tailscope.store.interface import FILTER_FIELDS, HeatmapRows, RequestFilter, TraceTree

T = TypeVar("T")


class ClickHouseRows:
    """A statement's answer: an Arrow table, or rows a view made in Python."""

    def __init__(self, table: pa.Table | None = None, rows: list[tuple[Any, ...]] | None = None) -> None:
        self._table = table
        self._rows = rows

    def fetchall(self) -> list[tuple[Any, ...]]:
        if self._rows is None:
            self._rows = rows_of(self.arrow())
        return self._rows

    def fetchone(self) -> tuple[Any, ...] | None:
        rows = self.fetchall()
        return rows[0] if rows else None

    def df(self) -> pd.DataFrame:
        """Python values, timestamps naive UTC (as DuckDB's `.df()` gives them)."""
        table = self.arrow()
        return pd.DataFrame(self.fetchall(), columns=list(table.column_names))

    def numpy(self) -> dict[str, np.ndarray]:
        """The columns as numpy arrays, straight from Arrow (no Python rows)."""
        table = self.arrow()
        return {name: col.to_numpy() for name, col in zip(table.column_names, table.columns, strict=True)}

    def arrow(self) -> pa.Table:
        if self._table is None:
            raise TypeError("this read answers with rows only")
        return self._table


class ClickHouseReader:
    """The Reader of a ClickHouse store (statements run at once; nothing is held between them)."""

    def __init__(self, client: ClickHouseClient) -> None:
        self.client = client
        self.memo: dict[Any, Any] = {}  # values a view computed for another statement of this read

    @contextmanager
    def reading(self) -> Iterator[ClickHouseReader]:
        yield self

    def weighted(self, where: RequestFilter) -> bool:
        """Whether a filtered request has a weight other than 1 (requests_weighted.sql), once per
        filter and reader: the views then read their weighted versions."""
        key = ("weighted", *(getattr(where, name) for name in FILTER_FIELDS))
        if key not in self.memo:
            text, params = filtered("requests_weighted", where)
            self.memo[key] = bool(self.client.query(text, params).single_value())
        return self.memo[key]

    def run(
        self, name: str, params: Sequence[Any] | Mapping[str, Any] = (), where: RequestFilter | None = None
    ) -> ClickHouseRows:
        view = views.VIEWS.get(name)
        if view is not None:
            return ClickHouseRows(rows=view(self, where, list(params)))
        return ClickHouseRows(self.client.query_arrow(*self.statement(name, params, where)))

    def statement(
        self, name: str, params: Sequence[Any] | Mapping[str, Any] = (), where: RequestFilter | None = None
    ) -> tuple[str, Any]:
        """A named statement's text and parameters, as `run` binds them (a filtered statement's
        weighted version when it has one and a filtered request's weight is not 1)."""
        if where is not None:
            weighted = sql.weights_matter(name, "clickhouse") and self.weighted(where)
            return filtered(name, where, *params, weighted=weighted)
        return sql.load(name, "clickhouse"), params

    def histograms(
        self, run: str, min_requests: int = 0
    ) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]], int] | None:
        """Computed from tailscope_requests as they are read (histogram_read_e2e.sql): the same rows
        DuckDB's derive keeps, without a table to keep in step with the windowed derive's deletes."""
        if min_requests > 0:
            count = sql.load("run_request_count", "clickhouse")
            if int(self.client.query(count, {"run": run}).single_value() or 0) < min_requests:
                return None
        e2e = self.client.query(sql.load("histogram_read_e2e", "clickhouse"), [run]).rows
        stages = self.client.query(sql.load("histogram_read_stages", "clickhouse"), [run]).rows
        requests = sum(int(row[1]) for row in e2e)
        return [tuple(row) for row in e2e], [tuple(row) for row in stages], requests

    def heatmap_histogram(
        self, run: str, stage: str, time_bins: int, min_requests: int = 0
    ) -> HeatmapRows | None:
        """None: ClickHouse keeps no heatmap pre-aggregate; its heatmap reads the requests."""
        return None

    def stage_rules(self) -> list[StageRule]:
        return write.rules_in_force(self.client)

    def phase_rules(self) -> list[PhaseRule]:
        return write.phase_rules_in_force(self.client)

    def regex_error(self, pattern: str) -> str | None:
        try:
            self.client.query(sql.load("regex_check", "clickhouse"), {"pattern": pattern})
        except StoreError as error:
            return why_refused(str(error))
        return None

    def stage_mapping(
        self, run: str, sample_traces: int, window: tuple[int, int] | None = None
    ) -> list[tuple[Any, ...]]:
        del window  # the engine's own sample (sample_traces.sql) reads a few stretches of time already
        try:
            return write.stage_mapping(self.client, run, sample_traces)
        except KeyError:  # no such run: no spans to map
            return []

    def band_breakdown(
        self, where: RequestFilter, lo: float, hi: float, sample: int
    ) -> tuple[list[tuple[Any, ...]], dict[str, int]]:
        return views.band_breakdown(self, where, lo, hi, sample)

    def trace_tree(self, trace_id: str, run: str | None) -> TraceTree:
        return trace.trace_tree(self.client, trace_id, run)

    def ahead(self, read: Callable[[ClickHouseReader], T]) -> Pending[T]:
        """One client reads one statement at a time: `read` runs on this reader when first asked."""
        return Pending(lambda: read(self))

    def span_table(
        self, name: str, run: str, windows: Sequence[tuple[int, int]] | None = None, **params: Any
    ) -> pa.Table:
        """The statement over the run's selection ({scope}; diagnosis_spans with its phase spans),
        read once per window of `windows` (the selection narrowed to it) where given."""
        selection = write.run_selection(self.client, run)
        if selection is None:
            raise LookupError(f"no run {run!r}")
        phases = write.phase_rules_for(self.client, selection) if name == "diagnosis_spans" else []
        if windows is None:
            text, bound = scoped(name, selection, phases, run=run, **params)
            return self.client.query_arrow(text, bound)
        parts = []
        for first, end in windows:  # the selection's time range is inclusive at both ends
            start, last = max(selection.start_ns, first), min(selection.end_ns, end - 1)
            narrowed = dataclasses.replace(selection, start_ns=start, end_ns=last)
            text, bound = scoped(name, narrowed, phases, run=run, **params)
            parts.append(self.client.query_arrow(text, bound))
        return pa.concat_tables(parts, promote_options="permissive")
