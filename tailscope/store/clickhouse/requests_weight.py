"""tailscope_requests' Weight column (issue 28: a head-sampled run's weight per request) on a store
made before it existed: added on first open, with the weights of the runs derived before it.

The rows are copied into a new table with the column (each row's weight read from its root span in
otel_traces: `tailscope.sample.weight`, 1 without it), which then exchanges names with the old one:
an interrupted migration leaves the store as it was, and is done again on the next open. A writer
that adds rows meanwhile (a `collect` on the same store) would lose them: migrate with writers stopped.
"""

from __future__ import annotations

from tailscope import sql
from tailscope.store.clickhouse.store import ClickHouseClient


def _run(store: ClickHouseClient, name: str) -> None:
    store.query(sql.load(name, dialect="clickhouse"), {}, store.write_limit_s)


def ensure(store: ClickHouseClient) -> None:
    """The Weight column in place (no-op, one lookup, when it is there already)."""
    if store.query(sql.load("weight_column_exists", dialect="clickhouse")).single_value():
        return
    for name in ("weight_new_drop", "weight_new_ddl", "weight_new_column", "weight_new_fill"):
        _run(store, name)
    _run(store, "weight_exchange")
    _run(store, "weight_new_drop")
