"""What one write transaction touched: the trace ids and time range of the spans it appends."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc


class TouchedTraces:
    """The trace ids and time range of the spans one transaction appends: what its dedupe and its
    derived-row refresh need to look at, so their cost follows the batch, not the run."""

    def __init__(self) -> None:
        self._ids: list[pa.Array] = []
        self.first_ns: int | None = None
        self.last_ns: int | None = None
        self.longest_ns = 0  # the longest span appended (bounds how far apart a trace's spans start)

    def add(self, table: pa.Table) -> None:
        self._ids.append(pc.unique(table.column("TraceId")))
        bounds = pc.min_max(table.column("Timestamp").cast(pa.int64()))
        low, high = bounds["min"].as_py(), bounds["max"].as_py()
        self.first_ns = low if self.first_ns is None else min(self.first_ns, low)
        self.last_ns = high if self.last_ns is None else max(self.last_ns, high)
        longest = pc.max(table.column("Duration")).as_py()
        self.longest_ns = max(self.longest_ns, int(longest or 0))
        if len(self._ids) >= 64:  # keep the list short: fold what was collected so far
            self._ids = [pc.unique(pa.chunked_array(self._ids, type=pa.string()))]

    def span_range(self) -> tuple[int, int, int] | None:
        """(first span start, last span start, longest span) in ns, or None when nothing was added."""
        if self.first_ns is None or self.last_ns is None:
            return None
        return self.first_ns, self.last_ns, self.longest_ns

    def table(self) -> pa.Table:
        ids = pc.unique(pa.chunked_array(self._ids, type=pa.string()))
        return pa.table({"TraceId": ids})
