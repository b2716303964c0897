"""The receiver's writer for a ClickHouse store (`tailscope collect --store clickhouse://...`).

The same queue, pacing and retries as BatchWriter; what a flush does differs: the batch's spans go
into the exporter's otel_traces (ch_dedupe.append_spans_once: staged, converted inside ClickHouse,
the spans the run already has left out: an exporter's retry sends them again) and the
run's selection in tailscope_runs is widened to the time they cover. Per-request rows are derived
incrementally by time window: at most every DERIVE_EVERY_S, and when the receiver stops, the
requests whose roots can be in the spans received since the last derive (their start times, widened
by the run's longest span and the clock-skew allowance: ch_write.refresh_window) are derived again.
There is no reader to give way to: ClickHouse readers never wait for writers.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO

import pyarrow as pa
import pyarrow.compute as pc

from ingest.receiver.limits import Limits
from ingest.receiver.writer import BatchWriter, _Item
from tailscope.query.clickhouse import RunSelection, scoped
from tailscope.store import ch_dedupe, ch_write
from tailscope.store.clickhouse import ClickHouseStore

DERIVE_EVERY_S = 2.0


class ClickHouseBatchWriter(BatchWriter):
    """BatchWriter whose flushes append to a ClickHouse store and derive what they touched."""

    def __init__(
        self,
        store: ClickHouseStore,
        run_label: str,
        limits: Limits,
        source: str = "otlp-http",
        log: TextIO = sys.stderr,
        ack_waits: bool = False,
    ) -> None:
        super().__init__(store.location.url, run_label, limits, source=source, log=log, ack_waits=ack_waits)
        self.store = store
        self.span_range: tuple[int, int] | None = None
        self.touched: tuple[int, int] | None = None  # span starts received since the last derive
        self.longest_ns = 0
        self.last_derive = time.monotonic()

    def start(self) -> None:
        self._store = lambda *args: None  # flushes go through _transaction below, not store_batches
        super().start()

    def _reader_waiting(self) -> bool:
        return False

    def _transaction(self, items: list[_Item]) -> None:
        table = pa.concat_tables([item.columns.to_arrow() for item in items], promote_options="default")
        first, last = ch_dedupe.append_spans_once(self.store, table, self.run_label)
        if self.span_range is None:
            earlier = ch_write.run_selection(self.store, self.run_label)
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
        selection = RunSelection(*self.span_range, {ch_write.RUN_ATTRIBUTE: self.run_label})
        ch_write.define_run(self.store, self.run_label, selection, files=[self.source])
        if time.monotonic() - self.last_derive >= DERIVE_EVERY_S:
            self.derive_touched()

    def derive_touched(self) -> None:
        """Derive again the requests the spans received since the last derive can belong to."""
        if self.touched is not None:
            reach = self.longest_ns + ch_write.CLOCK_SKEW_NS
            keep = (self.touched[0] - reach, self.touched[1] + ch_write.CLOCK_SKEW_NS + 1)
            ch_write.refresh_window(self.store, self.run_label, keep, self.longest_ns)
            self.touched = None
        self.last_derive = time.monotonic()

    def close(self, timeout: float | None = None) -> bool:
        """Flush and stop as BatchWriter does, then derive what the last flushes touched."""
        clean = super().close(timeout)
        if self.touched is not None:
            try:
                self.derive_touched()
            except Exception as error:
                print(f"collect: could not derive run {self.run_label}: {error}", file=self.log, flush=True)
                return False
        return clean
