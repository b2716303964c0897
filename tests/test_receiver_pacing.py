"""The receiver's writer paces its transactions: the flush interval always, and the length of its last
transaction only while a reader is waiting for the file (so readers get their turn, and a writer with
no reader about does not idle half of the time, which capped `--ack committed`)."""

from __future__ import annotations

import itertools
import os
import threading
import time
from pathlib import Path

from analysis_spans import S, SpanColumns, add_trace

from ingest.receiver.limits import Limits
from ingest.receiver.writer import BatchWriter
from tailscope.store.duckdb.writer import DuckDBSink

INTERVAL_MS = 50


def batch(n: int) -> SpanColumns:
    cols = SpanColumns()
    add_trace(cols, S("root", 0, 10, kind="Server", children=[S("child", 1, 9)]), n)
    return cols


def gaps_between_transactions(
    db: Path, reader_waiting: bool, interval_ms: int = INTERVAL_MS
) -> tuple[list[float], list[float]]:
    """Submit a request whenever the previous one is committed; (idle gaps, transaction lengths)."""
    spans: list[tuple[float, float]] = []

    def slow_store(conn, run_label, batches, sources):  # real work: a transaction of ~0.2 s or more
        started = time.monotonic()
        conn.execute("SELECT sum(hash(i)) FROM range(80000000) AS r(i)").fetchall()
        spans.append((started, time.monotonic()))
        return None

    marker = db.with_name(f"{db.name}.waiting-reader.{os.getpid()}-{threading.get_ident()}")
    if reader_waiting:
        marker.touch()
    writer = BatchWriter(
        DuckDBSink(db, "r", "test", store=slow_store),
        Limits(flush_interval_ms=interval_ms),
    )
    writer.start()
    try:
        for n in range(4):
            writer.submit(batch(n)).result(timeout=60)
    finally:
        writer.close(30)
        marker.unlink(missing_ok=True)
    gaps = [spans[i + 1][0] - spans[i][1] for i in range(len(spans) - 1)]
    return gaps, [end - start for start, end in spans]


def test_no_reader_waiting_the_writer_flushes_at_the_interval(tmp_path: Path) -> None:
    gaps, lengths = gaps_between_transactions(tmp_path / "s.duckdb", reader_waiting=False)
    assert min(lengths) > 2 * INTERVAL_MS / 1000
    assert max(gaps) < min(lengths), (gaps, lengths)


def test_a_waiting_reader_gets_a_turn_as_long_as_the_last_transaction(tmp_path: Path) -> None:
    gaps, lengths = gaps_between_transactions(tmp_path / "s.duckdb", reader_waiting=True)
    assert all(gap >= 0.9 * length for gap, length in zip(gaps, lengths, strict=False)), (gaps, lengths)


def paced_decisions(db: Path, interval_ms: int, ack_waits: bool) -> tuple[list[str], list[float]]:
    """One client that sends its next request the moment its last one is committed (from the future's
    done-callback, in the writer's thread: the soonest a client can be back), five requests. Returns
    the writer's pacing decisions after the first commit, each as the clock its not-before time counted
    the interval from ("start" or "end" of the last transaction, "other"), and the transactions' starts
    on the writer's clock. What the writer decided, not how long it took: the same at any machine load."""
    decisions: list[str] = []
    starts: list[float] = []
    done = threading.Event()
    sent = itertools.count()

    def store(conn, run_label, batches, sources):
        starts.append(writer._last_start)
        return None

    writer = BatchWriter(
        DuckDBSink(db, "r", "test", store=store), Limits(flush_interval_ms=interval_ms), ack_waits=ack_waits
    )
    decide = writer._not_before

    def recorded(interval: float) -> float:
        at = decide(interval)
        if writer.counters.transactions:  # the first waits from the writer's start
            counted_from = at - interval  # compared within a microsecond: float sums
            clocks = [(abs(counted_from - t), name) for name, t in (("start", writer._last_start),
                                                                     ("end", writer._last_end))]
            decisions.append(min(clocks)[1] if min(clocks)[0] < 1e-6 else "other")
        return at

    writer._not_before = recorded  # type: ignore[method-assign]

    def send(_: object = None) -> None:
        n = next(sent)
        if n == 5:
            done.set()
            return
        writer.submit(batch(n)).add_done_callback(send)

    writer.start()
    try:
        send()
        assert done.wait(60)
    finally:
        writer.close(30)
    return decisions, starts


def test_with_acks_after_commit_the_interval_counts_from_the_last_start(tmp_path: Path) -> None:
    # `--ack committed`: each client waits for its commit, so the next requests arrive right after
    # it; counting the interval from the last transaction's end idled the writer for all of it. A
    # client answered and back before the writer counted the clients was counted twice, and the
    # writer then waited for the missing one: the interval after the end again.
    interval_ms = 600
    decisions, starts = paced_decisions(tmp_path / "a.duckdb", interval_ms, ack_waits=True)
    assert decisions and set(decisions) == {"start"}, decisions
    # without acks, requests arrive whenever: the interval counts from the end
    decisions_q, starts_q = paced_decisions(tmp_path / "q.duckdb", interval_ms, ack_waits=False)
    assert decisions_q and set(decisions_q) == {"end"}, decisions_q
    # either way the transactions start at least the interval apart (a bound any load keeps)
    for begun in (starts, starts_q):
        apart = [later - earlier for earlier, later in itertools.pairwise(begun)]
        assert len(apart) == 4 and min(apart) >= interval_ms / 1000, apart


def test_with_acks_after_commit_every_waiting_client_goes_into_one_transaction(tmp_path: Path) -> None:
    # two clients that each send again once answered, transactions longer than the interval:
    # starting at once after a commit took the one already queued alone, and so on (alternating
    # halves); the writer waits for the one just answered too, up to the interval
    sizes: list[int] = []

    def slow_store(conn, run_label, batches, sources):
        sizes.append(len(batches))
        conn.execute("SELECT sum(hash(i)) FROM range(80000000) AS r(i)").fetchall()  # > the interval
        return None

    writer = BatchWriter(
        DuckDBSink(tmp_path / "s.duckdb", "r", "test", store=slow_store),
        Limits(flush_interval_ms=200),
        ack_waits=True,
    )
    writer.start()

    def client(first: int) -> None:
        for n in range(first, first + 6):
            time.sleep(0.02 * (first % 3))  # answered together, back at slightly different moments
            writer.submit(batch(n)).result(timeout=60)

    threads = [threading.Thread(target=client, args=(k * 100,)) for k in (1, 2)]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)
    finally:
        writer.close(30)
    assert sum(sizes) == 12
    assert sizes.count(2) >= 4, sizes  # together, not one per transaction
