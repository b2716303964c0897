"""The receiver's flushes into a ClickHouse store (`tailscope collect --store clickhouse://...`).

A flush's spans go into the exporter's otel_traces (dedupe.append_spans_once: staged, converted
inside ClickHouse, the spans the run already has left out: an exporter's retry sends them again)
and the run's selection in tailscope_runs is widened to the time they cover. Per-request rows are
derived incrementally by time window: at most every DERIVE_EVERY_S, and when the receiver stops,
the requests whose roots can be in the spans received since the last derive (their start times,
widened by the run's longest span and the clock-skew allowance: write.refresh_window) are derived
again. There is no reader to give way to: ClickHouse readers never wait for writers.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import pyarrow as pa
import pyarrow.compute as pc

from tailscope.store.clickhouse import dedupe, write
from tailscope.store.clickhouse.statements import RunSelection, scoped
from tailscope.store.clickhouse.store import ClickHouseClient
from tailscope.store.interface import SpanBatch

DERIVE_EVERY_S = 2.0


class ClickHouseSink:
    """The SpanSink of a ClickHouse store: flushes appended, what they touched derived."""

    def __init__(self, store: ClickHouseClient, run_label: str, source: str) -> None:
        self.store = store
        self.run_label = run_label
        self.source = source
        self.where = f"store={store.location.url}"
        self.span_range: tuple[int, int] | None = None
        self.touched: tuple[int, int] | None = None  # span starts received since the last derive
        self.longest_ns = 0
        self.last_derive = time.monotonic()

    def reader_waiting(self) -> bool:
        return False

    def write(self, batches: Sequence[SpanBatch]) -> None:
        table = pa.concat_tables([batch.to_arrow() for batch in batches], promote_options="default")
        first, last = dedupe.append_spans_once(self.store, table, self.run_label)
        if self.span_range is None:
            earlier = write.run_selection(self.store, self.run_label)
            self.span_range = (first, last) if earlier is None else (earlier.start_ns, earlier.end_ns)
            if earlier is not None:  # spans of an earlier collect under this label: their longest
                text, params = scoped("run_reach", earlier)
                self.longest_ns = int(self.store.query(text, params).first()[1] or 0)
        self.span_range = (min(self.span_range[0], first), max(self.span_range[1], last))
        self.longest_ns = max(self.longest_ns, int(pc.max(table.column("Duration")).as_py() or 0))
        self.touched = (
            (first, last)
            if self.touched is None
            else (min(self.touched[0], first), max(self.touched[1], last))
        )
        selection = RunSelection(*self.span_range, {write.RUN_ATTRIBUTE: self.run_label})
        write.define_run(self.store, self.run_label, selection, files=[self.source])
        if time.monotonic() - self.last_derive >= DERIVE_EVERY_S:
            self.derive_touched()

    def derive_touched(self) -> None:
        """Derive again the requests the spans received since the last derive can belong to."""
        if self.touched is not None:
            reach = self.longest_ns + write.CLOCK_SKEW_NS
            keep = (self.touched[0] - reach, self.touched[1] + write.CLOCK_SKEW_NS + 1)
            write.refresh_window(self.store, self.run_label, keep, self.longest_ns)
            self.touched = None
        self.last_derive = time.monotonic()

    def close(self) -> None:
        """Derive what the last flushes touched."""
        if self.touched is not None:
            self.derive_touched()
