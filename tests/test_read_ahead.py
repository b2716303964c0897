"""Reads started ahead (Reader.ahead, tailscope.store.ahead): the diagnosis starts its stage mapping, GC
event and attribute reads beside the span read (DuckDB: on a cursor, in a thread) and gets the same
answers as when every read runs on its one reader in turn."""

from __future__ import annotations

import threading

import pytest

from tailscope.analysis.diagnosis import diagnose_frame
from tailscope.analysis.diagnosis.load import load_frame
from tailscope.store.ahead import Pending
from tailscope.store.duckdb.store import DuckDBStore as Store
from tests.app_data import raw_simulated_store

pytest.importorskip("reference_pipeline.simulate.api")  # the stores are the simulator's runs


def test_a_started_read_runs_in_another_thread_and_hands_back_its_answer_or_its_error() -> None:
    seen = []
    assert Pending(lambda: seen.append(threading.get_ident()) or 7, start=True).get() == 7
    assert seen and seen[0] != threading.get_ident()
    closed = []
    failing = Pending(lambda: 1 / 0, cleanup=lambda: closed.append(True), start=True)
    with pytest.raises(ZeroDivisionError):
        failing.get()
    assert closed == [True]  # its reader closed, error or not


def test_a_deferred_read_runs_once_at_the_first_ask_on_the_asking_thread() -> None:
    calls = []
    pending = Pending(lambda: calls.append(threading.get_ident()) or len(calls))
    assert calls == []
    assert pending.get() == 1 and pending.get() == 1
    assert calls == [threading.get_ident()]


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Store:
    db = tmp_path_factory.mktemp("ahead") / "store.duckdb"
    return Store(raw_simulated_store(db, [("r", "gc-pressure", 1_200, 3)]))


def test_duckdb_reads_ahead_on_a_cursor_and_the_reading_waits_for_them(store: Store) -> None:
    finished = []
    with store.reading() as reader:
        def read(side):
            assert side is not reader and side.conn is not reader.conn  # a second connection
            rows = side.run("diagnosis_runs").fetchall()
            finished.append(threading.get_ident())
            return rows

        pending = reader.ahead(read)
    assert finished and finished[0] != threading.get_ident()  # done before the connection closed
    assert pending.get() == [("r",)]


class _OneReader:
    """The store's reader without `ahead`: every read on it, in turn, when asked."""

    def __init__(self, reader) -> None:
        self._reader = reader

    def __getattr__(self, name: str):
        if name == "ahead":
            raise AttributeError(name)
        return getattr(self._reader, name)


@pytest.mark.parametrize("max_spans", [0, 4_000])  # read whole, and as a sample of windows
def test_the_diagnosis_reads_ahead_and_finds_what_it_finds_reading_in_turn(store: Store, max_spans) -> None:
    with store.reading() as reader:
        started = []
        original = reader.ahead

        def counting(read):
            started.append(read)
            return original(read)

        reader.ahead = counting
        ahead = diagnose_frame(load_frame(reader, "r", max_spans=max_spans))
        assert len(started) == 4  # the stage mapping, the GC events, the phase spans, the names' attributes
        in_turn = diagnose_frame(load_frame(_OneReader(reader), "r", max_spans=max_spans))
    assert ahead.to_dict() == in_turn.to_dict()
    assert any(fd.pattern == "gc_pause" for fd in ahead.findings)


def test_a_reader_over_a_bare_connection_defers_its_reads_and_closes_cleanly(store: Store) -> None:
    """A DuckDBReader made over a connection nobody settles (a test's or a bench's) must not leave a cursor
    busy in a thread: closing the connection then fails with 'connection is busy' (seen in test_tiers)."""
    from tailscope.store.duckdb.connection import connect_reader
    from tailscope.store.duckdb.reader import DuckDBReader

    for _ in range(5):
        with connect_reader(store.path) as conn:
            frame = load_frame(DuckDBReader(conn), "r")  # starts its reads ahead and never asks for one
        assert len(frame.requests.root) > 0
    calls = []
    with connect_reader(store.path) as conn:
        pending = DuckDBReader(conn).ahead(lambda side: calls.append(threading.get_ident()) or 1)
        assert calls == []  # deferred: nothing runs until asked
        assert pending.get() == 1 and calls == [threading.get_ident()]
