"""A full disk under the store (issue 30): ingest, migrate, the rule editors and collect.

The store lives on a small tmpfs mounted for the test (root can `mount -t tmpfs`; the tests skip
with the reason where mounting is not allowed), filled to the last byte by a filler file. Each
writer must stop with one line naming the store and the cause (exit 2 for the commands), leave the
store as it was, and work again once the filler is removed.
"""

from __future__ import annotations

import contextlib
import gzip
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from hostile_inputs import otlp_jsonl
from receiver_support import Collector, json_request, spans_of
from test_crash_safety import CHECKSUM, big_jsonl

from tailscope import analysis
from tailscope.cli.main import main
from tailscope.store.duckdb.connection import connect_reader
from tailscope.store.duckdb.migrate import CURRENT_VERSION
from tailscope.store.duckdb.store import DuckDBStore as Store
from tailscope.store.errors import StoreFullError

CLI = [sys.executable, "-c", "from tailscope.cli.main import entrypoint; entrypoint()"]
REPO_ROOT = Path(__file__).resolve().parents[1]
V1_FIXTURE = Path(__file__).parent / "fixtures" / "store_v1.duckdb.gz"


@pytest.fixture
def tmpfs(tmp_path: Path) -> Iterator[Path]:
    """A 48 MiB tmpfs of our own (skips where mounting is not allowed)."""
    where = tmp_path / "fs"
    where.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=48m", "tmpfs", str(where)],
        capture_output=True,
        text=True,
        check=False,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({mounted.stderr.strip() or 'mount failed'}; needs root)")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


class Filler:
    """A file taking every free byte of a filesystem until `release()`."""

    def __init__(self, folder: Path) -> None:
        self.path = folder / "filler"

    def fill(self) -> None:
        chunk = b"\0" * (1 << 20)
        with open(self.path, "ab", buffering=0) as out:
            for size in (1 << 20, 1 << 12, 1):
                with contextlib.suppress(OSError):
                    while True:
                        out.write(chunk[:size])
        assert os.statvfs(self.path.parent).f_bavail == 0

    def release(self) -> None:
        self.path.unlink()


def checksum(db: Path) -> tuple[int, int]:
    with connect_reader(db) as conn:
        return conn.execute(CHECKSUM).fetchone()


def runs(db: Path) -> list[str]:
    with connect_reader(db) as conn:
        return [row[0] for row in conn.execute("SELECT RunLabel FROM runs ORDER BY 1").fetchall()]


def test_ingest_on_a_full_disk_is_one_line_exit_2_and_the_store_survives(tmpfs: Path, tmp_path: Path) -> None:
    db = tmpfs / "store.duckdb"
    early = tmp_path / "early.jsonl"
    early.write_bytes(otlp_jsonl(3, 2, trace="ee" * 16))
    big = tmp_path / "big.jsonl"
    spans = big_jsonl(big, lines=60, per_line=50)  # ~2.7 MB of text, more than the store can take
    assert main(["ingest", str(early), "--db", str(db), "--run", "early"]) == 0
    before = checksum(db)
    filler = Filler(tmpfs)
    filler.fill()

    done = subprocess.run(
        [*CLI, "ingest", str(big), "--db", str(db), "--run", "big"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
    )

    err = done.stderr.strip().splitlines()
    assert done.returncode == 2, done.stderr
    assert len(err) == 1, done.stderr
    assert err[0].startswith(
        f"tailscope: {db}: the disk is full (No space left on device) while loading {big}"
    )
    filler.release()
    assert checksum(db) == before and runs(db) == ["early"], "the store opens, as it was"
    assert main(["ingest", str(big), "--db", str(db), "--run", "big"]) == 0
    assert runs(db) == ["big", "early"]
    with connect_reader(db) as conn:
        assert conn.execute("SELECT count(*) FROM otel_traces WHERE RunLabel = 'big'").fetchone()[0] == spans


def test_migrate_on_a_full_disk_is_one_line_exit_2_and_the_store_survives(
    tmpfs: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmpfs / "v1.duckdb"
    db.write_bytes(gzip.decompress(V1_FIXTURE.read_bytes()))
    before = db.read_bytes()
    filler = Filler(tmpfs)
    filler.fill()

    assert main(["migrate", "--db", str(db)]) == 2

    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(
        f"tailscope: {db}: the disk is full (No space left on device)"
    ), err
    filler.release()
    wal = db.with_name(db.name + ".wal")
    assert db.read_bytes() == before or wal.exists(), "the store file is unchanged (or its WAL replays)"
    assert main(["migrate", "--db", str(db)]) == 0
    with connect_reader(db) as conn:
        assert conn.execute("SELECT version FROM schema_version").fetchone()[0] == CURRENT_VERSION


def test_the_rule_editors_save_on_a_full_disk_raises_store_full_and_changes_nothing(tmpfs: Path) -> None:
    db = tmpfs / "store.duckdb"
    store = Store(db)
    from app_data import build_store

    build_store(db, requests=60)
    rules = analysis.list_rules(store)
    edited = [*rules[:-1]]  # one rule fewer: every run derived again
    filler = Filler(tmpfs)
    filler.fill()

    with pytest.raises(StoreFullError, match=r"the disk is full \(No space left on device\)"):
        analysis.save_rules(store, edited)

    filler.release()
    assert analysis.list_rules(store) == rules
    analysis.save_rules(store, edited)
    assert len(analysis.list_rules(store)) == len(rules) - 1


def test_collect_keeps_what_it_accepted_answers_503_and_recovers(tmpfs: Path) -> None:
    db = tmpfs / "store.duckdb"
    collector = Collector(db, "live", "--flush-interval-ms", "50")
    try:
        first = collector.post(json_request("svc", spans_of(1, 5)), "application/json")
        assert first.status_code == 200
        wait_until(lambda: stored(db) == 5)
        filler = Filler(tmpfs)
        filler.fill()
        accepted = collector.post(json_request("svc", spans_of(2, 7)), "application/json")
        assert accepted.status_code == 200  # queued (--ack queued): it must not be lost
        wait_until(lambda: "the disk is full" in collector.output())
        refused = collector.post(json_request("svc", spans_of(3, 4)), "application/json")
        assert refused.status_code == 503 and refused.headers["retry-after"] == "1"
        assert "disk is full" in refused.json()["message"]

        filler.release()
        wait_until(lambda: "space again" in collector.output())
        assert (
            collector.post_until_accepted(json_request("svc", spans_of(3, 4)), "application/json").status_code
            == 200
        )
        assert collector.stop() == -15
    finally:
        collector.kill()
    log = collector.output()
    assert log.count("the disk is full") == 1, log
    assert "keeping 7 spans queued, answering 503" in log and "stored the 7 spans kept" in log
    assert stored(db) == 5 + 7 + 4, "nothing acknowledged was lost"


def stored(db: Path) -> int:
    try:
        with connect_reader(db, wait_seconds=1) as conn:
            return conn.execute("SELECT count(*) FROM otel_traces").fetchone()[0]
    except Exception:  # the writer holds it: not yet
        return -1


def wait_until(condition, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


@pytest.mark.slow
def test_ingest_into_chdb_on_a_full_disk_is_one_line_exit_2_and_the_store_survives(
    tmpfs: Path, tmp_path: Path
) -> None:
    pytest.importorskip("chdb", reason="chdb not installed ([clickhouse] extra)")
    url = f"chdb://{tmpfs / 'ch'}"
    early = tmp_path / "early.jsonl"
    early.write_bytes(otlp_jsonl(3, 2, trace="ee" * 16))
    big = tmp_path / "big.jsonl"
    spans = big_jsonl(big, lines=60, per_line=50)
    assert main(["ingest", str(early), "--store", url, "--run", "early"]) == 0
    filler = Filler(tmpfs)
    filler.fill()

    done = subprocess.run(
        [*CLI, "ingest", str(big), "--store", url, "--run", "big"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
    )

    err = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(err) == 1, done.stderr
    assert err[0].startswith(f"tailscope: {url}: ") and "not enough space" in err[0]
    filler.release()
    again = subprocess.run(
        [*CLI, "ingest", str(big), "--store", url, "--run", "big", "--json"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
    )
    assert again.returncode == 0, again.stderr
    assert '"duplicates": 0' in again.stdout and f'"spans": {spans}' in again.stdout, (
        "nothing was stored before"
    )
