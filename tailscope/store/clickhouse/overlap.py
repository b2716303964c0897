"""A new run loaded from one file into chdb: its spans written into otel_traces while its requests
are derived from the same converted spans, on two chdb sessions at once.

The loader converts a file's spans into a shared in-memory table (ingest_shared_ready_ddl.sql),
then a second chdb session on the same folder (a thread of its own; ClickHouse works there without
the GIL) writes that table into otel_traces while the store's session derives the run's requests
from it (write's derive statements with the table as their source) into a held-back temporary
table. Only when both are done is the run defined and do the derived rows reach
tailscope_requests: a failed write leaves neither. The writer first counts the spans the run's
selection already finds in otel_traces: when there were any (spans of that label written earlier),
the run is derived again from otel_traces as write.refresh_run does, so the rows are always the
whole run's.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from tailscope import sql
from tailscope.store.clickhouse import write
from tailscope.store.clickhouse.statements import ALL_TIME, RunSelection, derive_statements, scoped
from tailscope.store.clickhouse.store import WRITE_TIME_LIMIT_S, ClickHouseClient
from tailscope.store.clickhouse.transport import ChdbTransport


def possible(store: ClickHouseClient, files: int, run: str) -> bool:
    """Whether a load can write and derive at once: chdb, one file, a run not defined yet."""
    return (
        files == 1
        and isinstance(store.transport, ChdbTransport)
        and write.run_selection(store, run) is None
    )


def ready_table(store: ClickHouseClient) -> str:
    """A new shared table for one load's converted spans (its name: _tailscope_ready_<random hex>),
    after dropping any an interrupted load left behind."""
    for (stale,) in store.query(sql.load("ingest_shared_ready_stale", dialect="clickhouse")).rows:
        drop_ready(store, stale)
    name = f"_tailscope_ready_{secrets.token_hex(8)}"
    store.query(sql.load("ingest_shared_ready_ddl", dialect="clickhouse"), {"ready": name})
    return name


def repeats(store: ClickHouseClient, ready: str) -> int:
    """How many of `ready`'s spans may repeat one before them (ingest_ready_repeats.sql: 0 means
    none does; more, that move_once must decide): a file that repeats spans is not written while
    derived, it goes through move_once."""
    return int(
        store.query(sql.load("ingest_ready_repeats", dialect="clickhouse"), {"ready": ready}).single_value()
    )


def move_once(store: ClickHouseClient, ready: str) -> int:
    """`ready` into otel_traces with each span once (ingest_ready_move_once.sql); how many spans
    were written."""
    try:
        count = sql.load("ingest_ready_count_once", dialect="clickhouse")
        once = int(store.query(count, {"ready": ready}).single_value())
        store.query(
            sql.load("ingest_ready_move_once", dialect="clickhouse"), {"ready": ready}, WRITE_TIME_LIMIT_S
        )
        return once
    finally:
        write.clear_staged(store)


def drop_ready(store: ClickHouseClient, ready: str) -> None:
    store.query(sql.load("ingest_shared_ready_drop", dialect="clickhouse"), {"ready": ready})


def _write(store: ClickHouseClient, ready: str, selection: RunSelection) -> tuple[int, int]:
    """On a second session: the spans of `selection` already in otel_traces and the traces of
    `ready`, then `ready` written into otel_traces; (spans there before, traces)."""
    assert isinstance(store.transport, ChdbTransport)
    second = ClickHouseClient(store.location, store.time_limit_s, store.transport.second_session())
    try:
        text, params = scoped("run_reach", selection)
        earlier = int((second.query(text, params).first() or (0, 0))[0])
        count = sql.load("ingest_ready_trace_count", dialect="clickhouse")
        traces = int(second.query(count, {"ready": ready}).single_value())
        move = sql.load("ingest_ready_move", dialect="clickhouse")
        second.query(move, {"ready": ready}, WRITE_TIME_LIMIT_S)
        return earlier, traces
    finally:
        second.close()


def _derive(store: ClickHouseClient, run: str, ready: str, selection: RunSelection) -> None:
    """The run's requests derived from `ready` into the held-back _ts_derived."""
    _staged(store, "drop")
    _staged(store, "ddl")
    rules = write.rules_in_force(store)
    phases = write.phase_rules_for(store, selection, source=ready)
    statements = derive_statements(
        rules,
        run,
        selection,
        ALL_TIME,
        phases,
        source=ready,
        into="_ts_derived",
        durations_into="_ts_derived_durations",
    )
    for statement, values in statements:
        store.query(statement, values, WRITE_TIME_LIMIT_S)


def write_and_derive(
    store: ClickHouseClient, run: str, ready: str, selection: RunSelection, define: Callable[[], None]
) -> int | None:
    """`ready` into otel_traces (a second session) while the run's requests are derived from it;
    once the spans are written the run is defined (`define`: write.define_run; a failed write
    defines nothing), once both are done the derived rows are stored (derived again from
    otel_traces when the selection already had spans there). The run's trace count, None when the
    selection had spans before (then count the run in otel_traces)."""
    try:
        with ThreadPoolExecutor(1, thread_name_prefix="tailscope-write") as writer:
            written = writer.submit(_write, store, ready, selection)
            try:
                _derive(store, run, ready, selection)
            finally:
                earlier, traces = written.result()
                define()  # the spans are in otel_traces, derived or not (as a sequential load)
        if earlier:
            write.refresh_run(store, run)
            return None
        write.forget_derived(store, run)
        _staged(store, "move")
        return traces
    finally:
        _staged(store, "drop")


def _staged(store: ClickHouseClient, step: str) -> None:
    """One step (ddl, move, drop) of the held-back derived rows and span durations
    (derive_staged_<step>.sql, derive_staged_durations_<step>.sql)."""
    for name in (f"derive_staged_{step}", f"derive_staged_durations_{step}"):
        store.query(sql.load(name, dialect="clickhouse"), None, WRITE_TIME_LIMIT_S)
