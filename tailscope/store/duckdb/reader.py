"""Reading a DuckDB store: one read-only connection per unit of work (DuckDBStore.reading), every
statement a named file of tailscope/sql with `?` (or `$name`) parameters, the span tree built in
SQL (span_tree.sql through tailscope.store.duckdb.statements) with the rules the store holds."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar

import duckdb
import numpy as np
import pandas as pd
import pyarrow as pa

from tailscope import sql
from tailscope.rules import PhaseRule, StageRule
from tailscope.store.ahead import Pending
from tailscope.store.duckdb import kept_mapping, rules, span_histogram, statements, tail_sample
from tailscope.store.duckdb.derive import CLOCK_SKEW_NS
from tailscope.store.duckdb.scope import staged_scope
from tailscope.store.duckdb.statements import (
    WINDOWS_WHERE,
    filtered,
    padded_windows,
    phase_spans_query,
    span_tree_query,
)
from tailscope.store.interface import FILTER_FIELDS, HeatmapRows, RequestFilter, TraceTree

T = TypeVar("T")


class DuckDBRows:
    """The answer of one statement on a DuckDB connection."""

    def __init__(self, cursor: Any) -> None:
        self._cursor = cursor

    def fetchone(self) -> tuple[Any, ...] | None:
        return self._cursor.fetchone()

    def fetchall(self) -> list[tuple[Any, ...]]:
        return self._cursor.fetchall()

    def df(self) -> pd.DataFrame:
        return self._cursor.df()

    def numpy(self) -> dict[str, np.ndarray]:
        return self._cursor.fetchnumpy()

    def arrow(self) -> pa.Table:
        return self._cursor.to_arrow_table()


class DuckDBReader:
    """The Reader of a DuckDB store over one open connection (read-only, or a writer's)."""

    def __init__(self, conn: Any, read_ahead: bool = False) -> None:
        """`read_ahead`: reads asked for ahead run at once on a cursor; only for an owner that calls
        `settle()` before the connection closes (DuckDBStore.reading). Without it they run when first
        asked, so a reader over a bare connection never leaves a cursor busy when it closes."""
        self.conn = conn
        self.read_ahead = read_ahead
        self._weighted: dict[tuple[Any, ...], bool] = {}  # per filter: any request weight other than 1
        self._ahead: list[Pending[Any]] = []

    def ahead(self, read: Callable[[DuckDBReader], T]) -> Pending[T]:
        """`read` started now in a thread on a cursor of this connection (a second connection to the
        same database: DuckDB runs its statements while this one is in use, and the GIL is released
        while it does) where the reader's owner settles them (`read_ahead`); else (a bare connection,
        a test's wrapper without cursors) when first asked."""
        make_cursor = getattr(self.conn, "cursor", None)
        if make_cursor is None or not self.read_ahead:
            return Pending(lambda: read(self))
        cursor = make_cursor()
        cursor.execute(sql.load("duckdb_no_progress_bar")).fetchall()  # as connection._open does
        pending = Pending(lambda: read(DuckDBReader(cursor)), cursor.close, start=True)
        self._ahead.append(pending)
        return pending

    def settle(self) -> None:
        """Wait for the reads started ahead (their cursors closed): before the connection closes."""
        for pending in self._ahead:
            pending.wait()
        self._ahead.clear()

    def weighted(self, where: RequestFilter) -> bool:
        """Whether a filtered request has a weight other than 1 (requests_weighted.sql), once per
        filter and reader: the views then read their weighted versions."""
        key = tuple(getattr(where, name) for name in FILTER_FIELDS)
        if key not in self._weighted:
            text, params = filtered("requests_weighted", where)
            self._weighted[key] = bool(self.conn.execute(text, params).fetchone()[0])
        return self._weighted[key]

    @contextmanager
    def reading(self) -> Iterator[DuckDBReader]:
        yield self

    def run(
        self, name: str, params: Sequence[Any] | Mapping[str, Any] = (), where: RequestFilter | None = None
    ) -> DuckDBRows:
        if where is not None:
            weighted = sql.weights_matter(name) and self.weighted(where)
            if name == "tail_attributes":  # a large selection: its sample in blocks (tail_sample.py)
                table = tail_sample.tail_attributes(self.conn, where, list(params), weighted)
                if table is not None:
                    return DuckDBRows(self.conn.from_arrow(table))
            text, bound = filtered(name, where, *params, weighted=weighted)
            return DuckDBRows(self.conn.execute(text, bound))
        bound_params = dict(params) if isinstance(params, Mapping) else list(params)
        return DuckDBRows(self.conn.execute(sql.load(name), bound_params))

    def histograms(
        self, run: str, min_requests: int = 0
    ) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]], int] | None:
        try:
            requests = self.conn.execute(sql.load("run_request_count"), [run]).fetchall()[0][0]
            if requests < min_requests:
                return None
            e2e = self.conn.execute(sql.load("histogram_read_e2e"), [run]).fetchall()
            stages = self.conn.execute(sql.load("histogram_read_stages"), [run]).fetchall()
        except duckdb.CatalogException:  # a store no writer of this version has opened yet
            return None
        return e2e, stages, int(requests)

    def heatmap_histogram(
        self, run: str, stage: str, time_bins: int, min_requests: int = 0
    ) -> HeatmapRows | None:
        try:
            requests = self.conn.execute(sql.load("run_request_count"), [run]).fetchall()[0][0]
            if requests < min_requests:
                return None
            scope = {"run": run, "stage": stage}
            extent = self.conn.execute(sql.load("histogram_heatmap_extent"), scope).fetchall()
            first, last, counted = extent[0]
            if first is None or last - first + 1 < time_bins:
                return None
            width = -(-(last - first + 1) // time_bins)
            text = sql.load("histogram_read_heatmap")
            rows = self.conn.execute(text, {**scope, "first": first, "width": width}).fetchall()
        except duckdb.CatalogException:  # a store no writer of this version has opened yet
            return None
        return HeatmapRows(first, width, rows, int(counted), int(requests))

    def stage_rules(self) -> list[StageRule]:
        return rules.rules_in_force(self.conn)

    def phase_rules(self) -> list[PhaseRule]:
        return rules.phase_rules_in_force(self.conn)

    def regex_error(self, pattern: str) -> str | None:
        return rules.regex_error(self.conn, pattern)

    def stage_mapping(
        self, run: str, sample_traces: int, window: tuple[int, int] | None = None
    ) -> list[tuple[Any, ...]]:
        """The mapping's rows: the one a whole derive recorded for this scope where it still speaks
        for the run (a diagnosis' scope: kept_mapping.py), else computed now."""
        found = kept_mapping.kept(self.conn, run, sample_traces, window)
        return found if found is not None else kept_mapping.live(self.conn, run, sample_traces, window)

    def band_breakdown(
        self, where: RequestFilter, lo: float, hi: float, sample: int
    ) -> tuple[list[tuple[Any, ...]], dict[str, int]]:
        conn = self.conn
        weighted = self.weighted(where)
        conn.execute(sql.load("derive_drop_scope"))
        text, params = filtered(
            "stage_breakdown_scope", where, lo, hi, hi >= 1.0, int(sample), weighted=weighted
        )
        conn.execute(text, params)
        try:
            counts = dict(
                conn.execute(sql.load(sql.variant("stage_breakdown_counts", "duckdb", weighted))).fetchall()
            )
            if not counts.get("band") or not counts.get("median"):
                return [], counts
            stored = self._stored_breakdown(where.run or "", weighted)
            if stored is not None:
                return stored, counts
            with staged_scope(conn, "traces", where.run or "") as staged:
                tree, tree_params = span_tree_query(
                    self.stage_rules(), staged, where.run or "", phase_rules=self.phase_rules()
                )
                output = sql.load(sql.variant("stage_breakdown", "duckdb", weighted))
                rows = conn.execute(output.replace("{span_tree}", tree), tree_params)
                return rows.fetchall(), counts
        finally:
            conn.execute(sql.load("derive_drop_scope"))

    def _stored_breakdown(self, run: str, weighted: bool) -> list[tuple[Any, ...]] | None:
        """The stage breakdown of the sample in _ts_scope from its requests' SpanTimes (kept by their
        derive), or None when a sampled request has none (derived before schema version 4): its
        spans are read then. No read of the run's spans (bench/RESULTS.md, "Scale: the stage
        breakdown from the derive's SpanTimes")."""
        conn = self.conn
        highest = conn.execute(sql.load("stage_breakdown_scope_max_hash")).fetchall()[0][0]
        if highest is None or int(highest) > statements.SPAN_TIMES_MAX_HASH:  # a small band's sample
            return None
        conn.execute(sql.load(sql.variant("stage_breakdown_pick", "duckdb", weighted)), [run])
        try:
            picked, missing = conn.execute(sql.load("stage_breakdown_pick_missing")).fetchall()[0]
            scope = conn.execute(sql.load("stage_breakdown_scope_size")).fetchall()[0][0]
            if missing or picked != scope:
                return None
            return conn.execute(sql.load("stage_breakdown_stored")).fetchall()
        finally:
            conn.execute(sql.load("stage_breakdown_pick_drop"))

    def trace_tree(self, trace_id: str, run: str | None) -> TraceTree:
        conn = self.conn
        if run is None:
            row = conn.execute(sql.load("trace_run"), [trace_id]).fetchone()
            run = row[0] if row else None
        if run is None:
            return TraceTree(None)
        request = conn.execute(sql.load("trace_window"), [run, trace_id]).fetchone()
        scope, window = "trace", None
        if request is not None:  # its spans start within the request's interval, give or take the skew
            start, longest = int(request[0]), int(request[1])
            scope, window = "trace_window", (start - longest - CLOCK_SKEW_NS, start + longest + CLOCK_SKEW_NS)
        with staged_scope(conn, scope, run, trace_id=trace_id, window=window) as staged:
            text, params = span_tree_query(self.stage_rules(), staged, run, phase_rules=self.phase_rules())
            tree = conn.execute(text, params).df()
            if tree.empty:
                spans = conn.execute(sql.load("trace_span_count"), [run, trace_id]).fetchone()[0]
                return TraceTree(run, spans=int(spans))
            client_id = tree["ClientSpanId"].iloc[0]
            client = None
            if isinstance(client_id, str):  # among the trace's staged spans
                client = conn.execute(sql.load("client_span"), [run, trace_id, client_id]).fetchone()
        names = [*tree["SpanName"], *([client[2]] if client else [])]
        durations = [int(d) for d in tree["Duration"]] + ([int(client[6])] if client else [])
        ranks = span_histogram.ranks(conn, run, names, durations)  # a large run: by buckets
        if ranks is None:
            ranks = dict(conn.execute(sql.load("gantt_rank"), [names, durations, durations, run]).fetchall())
        return TraceTree(run, tree, client, ranks)

    def span_table(
        self, name: str, run: str, windows: Sequence[tuple[int, int]] | None = None, **params: Any
    ) -> pa.Table:
        if name == "diagnosis_spans":  # the stored spans, and the run's phase spans beside them
            if not self._has_phase_candidates(run):  # the phase spans' statement would find none
                return self._statement(name, run, windows, spans="diagnosis_spans_stored", **params)
            phases = self.ahead(lambda reader: reader._phase_span_rows(run, windows))
            stored = self._statement(name, run, windows, spans="diagnosis_spans_stored", **params)
            return _joined(stored, phases.get())
        return self._statement(name, run, windows, **params)

    def _has_phase_candidates(self, run: str) -> bool:
        """Whether the run may hold a span the phase rules could read: False only where its last
        derive found none (derive_state.PhaseCandidates false) and it reflects every span the run
        holds; True where that is not known (a store derived before the record, a run written
        since). A phase rule edit derives every run again, so the record follows the rules in force.
        Skipping the phase spans' statement saves its scan of the read's spans for the rules' keys
        (a sampled 1 M-span run: ~0.32 s of CPU, bench/RESULTS.md "Scale", scale17)."""
        cursor = self.conn.execute(sql.load("diagnosis_phase_state"), {"run": run})
        rows = cursor.fetchall()  # (all: DuckDB 2 refuses other work beside a half-read result)
        columns = [column[0] for column in cursor.description]
        if not rows or "PhaseCandidates" not in columns:
            return True
        state = dict(zip(columns, rows[0], strict=True))
        return state["PhaseCandidates"] is not False or state["SpanRows"] != state["SpansNow"]

    def _statement(
        self,
        name: str,
        run: str,
        windows: Sequence[tuple[int, int]] | None,
        spans: str | None = None,
        **params: Any,
    ) -> pa.Table:
        """One named statement over a run as Arrow; `spans`: the fragment its {spans} reads."""
        text, bound = sql.load(name), {"run": run, **params}
        if spans is not None:
            text = text.replace("{spans}", sql.load(spans))
        if "{windows}" in text:  # a read the sampled diagnosis narrows (diagnosis_weights is not)
            flat = padded_windows(windows)
            text = text.replace("{windows}", WINDOWS_WHERE)
            bound.update(from_ns=flat[0::2], to_ns=flat[1::2])
        used = {key: value for key, value in bound.items() if f"${key}" in text}
        return self.conn.sql(text, params=used).to_arrow_table()

    def _phase_span_rows(self, run: str, windows: Sequence[tuple[int, int]] | None) -> pa.Table:
        """The run's phase spans (phase_spans.sql over the same windows) in diagnosis_spans' columns."""
        text, phase_params = phase_spans_query(self.phase_rules(), "windows", run, windows=windows)
        self.conn.execute(sql.load("diagnosis_phase_drop"))
        self.conn.execute(f"CREATE TEMP TABLE _ts_phase_spans AS {text}", phase_params)
        return self._statement("diagnosis_spans", run, None, spans="diagnosis_spans_phases")


def _joined(stored: pa.Table, phases: pa.Table) -> pa.Table:
    """The stored spans' rows, then the phase spans' (in the stored ones' column types)."""
    if phases.num_rows == 0:
        return stored
    return pa.concat_tables([stored, phases.cast(stored.schema)])
