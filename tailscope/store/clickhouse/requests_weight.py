"""tailscope_requests' Weight column (issue 28: a head-sampled run's weight per request) on a store
made before it existed: added on first open, with the weights of the runs derived before it.

The rows are copied into a new table with the column (each row's weight read from its root span in
otel_traces: `tailscope.sample.weight`, 1 without it), which then exchanges names with the old one:
an interrupted migration leaves the store as it was, and is done again on the next open. A writer
that adds rows meanwhile (a `collect` on the same store) would lose them: migrate with writers stopped.
"""

from __future__ import annotations

from tailscope import sql
from tailscope.store.clickhouse.statements import RunSelection, run_scope
from tailscope.store.clickhouse.store import ClickHouseClient
from tailscope.store.errors import StoreError


def _load(name: str) -> str:
    return sql.load(name, dialect="clickhouse")


def _run(store: ClickHouseClient, name: str) -> None:
    store.query(_load(name), {}, store.write_limit_s)


def ensure(store: ClickHouseClient) -> None:
    """The Weight column in place (no-op, one lookup, when it is there already)."""
    if store.query(_load("weight_column_exists")).single_value():
        return
    for name in ("weight_new_drop", "weight_new_ddl", "weight_new_column"):
        _run(store, name)
    filled = []
    for run, start, end, filters in store.query(_load("durations_backfill_runs")).rows:
        selection = RunSelection(int(start), int(end), dict(filters))
        text = _load("weight_new_fill").replace("{scope}", run_scope(len(selection.filters)))
        store.query(text, {"run": run, **selection.params()}, store.write_limit_s)
        filled.append(run)
    store.query(_load("weight_new_fill_rest"), {"runs": filled}, store.write_limit_s)
    old, new = store.query(_load("weight_new_counts")).rows[0]
    if old != new:  # a writer added rows meanwhile: leave the store as it was, try on the next open
        _run(store, "weight_new_drop")
        raise StoreError(
            f"{store.location.url}: adding the Weight column to tailscope_requests: {old} rows, "
            f"{new} copied (a writer at work?); nothing changed, it is tried again on the next open"
        )
    _run(store, "weight_exchange")
    _run(store, "weight_new_drop")
