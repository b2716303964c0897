"""The refusals a run's span events report (whatif_retry_events.sql): a client that records each
retry of a call as an event on the call's span (OpenInference's LangChain callbacks: `retry` with
`retry.after_s`), where the refused attempts and the sleeps between them have no spans of their own.
Read lazily, per span name, while the store's reader is open (as the attributes are)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from tailscope.store.interface import Reader

# span name -> (span indices, the event's time after its span's start, the wait it asked for), ns
RetrySource = Callable[[str], tuple[np.ndarray, np.ndarray, np.ndarray]]


def retry_source(conn: Reader, run: str, span_keys: np.ndarray, plan, match: Callable) -> RetrySource:
    """A function: span name -> its spans' retry events (rows of spans the frame lacks left out; a
    sample's (sample.SamplePlan) windows only). `match`: the loader's (span keys, keys) -> rows."""
    windows = None if plan is None else plan.read_windows()
    def read(span_name: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        table = conn.span_table("whatif_retry_events", run, windows=windows, span_name=span_name)
        idx = match(span_keys, table.column("SpanKey").to_numpy().astype(np.int64))
        keep = idx >= 0
        offset = table.column("OffsetNs").to_numpy().astype(np.int64)
        wait = table.column("WaitNs").to_numpy().astype(np.int64)
        order = np.lexsort((offset[keep], idx[keep]))
        return idx[keep][order], offset[keep][order], wait[keep][order]

    return read
