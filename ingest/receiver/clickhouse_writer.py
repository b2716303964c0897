"""The receiver's writer for a ClickHouse store (`tailscope collect --store clickhouse://...`).

The same queue, pacing and retries as BatchWriter; what a flush does differs: the batch's spans go
into the exporter's otel_traces (ch_write.append_spans: staged, converted inside ClickHouse) and the
run's selection in tailscope_runs is widened to the time they cover. Per-request rows are derived
once, when the receiver stops (a ClickHouse run is derived whole; `tailscope select` derives it
again at any time). There is no reader to give way to: ClickHouse readers never wait for writers.
"""

from __future__ import annotations

import sys
from typing import TextIO

import pyarrow as pa

from ingest.receiver.limits import Limits
from ingest.receiver.writer import BatchWriter, _Item
from tailscope.query.clickhouse import RunSelection
from tailscope.store import ch_write
from tailscope.store.clickhouse import ClickHouseStore


class ClickHouseBatchWriter(BatchWriter):
    """BatchWriter whose flushes append to a ClickHouse store; derives the run when it closes."""

    def __init__(
        self,
        store: ClickHouseStore,
        run_label: str,
        limits: Limits,
        source: str = "otlp-http",
        log: TextIO = sys.stderr,
    ) -> None:
        super().__init__(store.location.url, run_label, limits, source=source, log=log)
        self.store = store
        self.span_range: tuple[int, int] | None = None
        self.derived_requests: int | None = None

    def start(self) -> None:
        self._store = lambda *args: None  # flushes go through _transaction below, not store_batches
        super().start()

    def _reader_waiting(self) -> bool:
        return False

    def _transaction(self, items: list[_Item]) -> None:
        table = pa.concat_tables([item.columns.to_arrow() for item in items], promote_options="default")
        first, last = ch_write.append_spans(self.store, table, self.run_label)
        if self.span_range is None:
            earlier = ch_write.run_selection(self.store, self.run_label)
            self.span_range = (first, last) if earlier is None else (earlier.start_ns, earlier.end_ns)
        self.span_range = (min(self.span_range[0], first), max(self.span_range[1], last))
        selection = RunSelection(*self.span_range, {ch_write.RUN_ATTRIBUTE: self.run_label})
        ch_write.define_run(self.store, self.run_label, selection, files=[self.source])

    def close(self, timeout: float | None = None) -> bool:
        """Flush and stop as BatchWriter does, then derive the run's requests (when it got spans)."""
        clean = super().close(timeout)
        if self.span_range is not None:
            try:
                self.derived_requests = ch_write.refresh_run(self.store, self.run_label)
            except Exception as error:
                print(f"collect: could not derive run {self.run_label}: {error}", file=self.log, flush=True)
                return False
        return clean
