"""Decode workers cannot hang `tailscope ingest` (issue 30).

A real `tailscope ingest` process loads an OTLP JSON lines file on its decode workers; the thresholds
are lowered in the process (a 64 KiB decode block, every file parallel, a progress line per batch) so
that a 3 MB file is many blocks and the test stays quick. Faults: kill -9 of a worker mid-file,
SIGTERM to the command during and right after the decode, kill -9 of the command. Each must end
the command within seconds, leave no process behind and the store as it was (or the file wholly
committed). A loop of parallel loads in one process must never hang.
"""

from __future__ import annotations

import contextlib
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from test_crash_safety import CHECKSUM, big_jsonl
from test_stop_signals import alive, descendants

from tailscope.store.duckdb.connection import connect_reader

SMALL_BLOCKS = (
    "import ingest.parallel as p, ingest.loader as l, tailscope.cli.ingest_cmd as c;"
    "p.PARALLEL_MIN_BYTES = l.PARALLEL_MIN_BYTES = 1; p.otlp_fast.BLOCK_BYTES = 1 << 16;"
    "c.PROGRESS_MIN_BYTES = 0;"
)
CLI = [sys.executable, "-c", SMALL_BLOCKS + "from tailscope.cli.main import entrypoint; entrypoint()"]
REPO_ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def jsonl(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, int]:
    """~3.5 MB, 4,000 spans: about 55 decode blocks of 64 KiB."""
    path = tmp_path_factory.mktemp("workers") / "traces.jsonl"
    return path, big_jsonl(path, lines=200, per_line=20)


@pytest.fixture(scope="module")
def template_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A store holding one earlier run, loaded once by the real command (copied for every test)."""
    folder = tmp_path_factory.mktemp("early")
    db = folder / "store.duckdb"
    early = folder / "early.jsonl"
    big_jsonl(early, lines=2, per_line=3)
    assert (
        subprocess.run(
            [*CLI, "ingest", str(early), "--db", str(db), "--run", "early"], check=False
        ).returncode
        == 0
    )
    assert not db.with_name(db.name + ".wal").exists()  # the command checkpointed: one file is the store
    return db


@pytest.fixture
def store(template_store: Path, tmp_path: Path) -> Path:
    """A store holding one earlier run (its checksum must survive every fault): a copy of the template."""
    db = tmp_path / "store.duckdb"
    shutil.copyfile(template_store, db)
    return db


def checksum(db: Path) -> tuple[int, int]:
    with connect_reader(db) as conn:
        return conn.execute(CHECKSUM).fetchone()


def start_ingest(path: Path, db: Path | str) -> subprocess.Popen[bytes]:
    where = ["--store", db] if isinstance(db, str) else ["--db", str(db)]
    return subprocess.Popen(
        [*CLI, "ingest", str(path), *where, "--run", "big"],
        cwd=REPO_ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,  # only what the test sends reaches it
    )


def read_until(process: subprocess.Popen[bytes], until: Callable[[str], bool], timeout: float = 60.0) -> str:
    """stderr so far once `until(stderr)` holds (or the process ended)."""
    assert process.stderr is not None
    printed = b""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not until(printed.decode(errors="replace")):
        ready, _, _ = select.select([process.stderr], [], [], 0.01)
        if ready:
            chunk = os.read(process.stderr.fileno(), 65536)
            if not chunk:
                break
            printed += chunk
    return printed.decode(errors="replace")


def finish(process: subprocess.Popen[bytes], within: float) -> tuple[int, str]:
    """(exit status, the rest of stderr); fails the test (after killing the group) past `within` s."""
    try:
        _, rest = process.communicate(timeout=within)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.communicate()
        pytest.fail(f"the command was still running {within} s later (hung)")
    return process.returncode, rest.decode(errors="replace")


def gone(pids: set[int], within: float = 10.0) -> set[int]:
    deadline = time.monotonic() + within
    while alive(pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    return alive(pids)


def decoding(process: subprocess.Popen[bytes], pause: bool = False) -> set[int]:
    """The workers, once the command has stored its first batch (a progress line); with `pause`,
    the command is stopped there (SIGSTOP) so that the file cannot finish before the fault."""
    printed = read_until(process, lambda err: "spans/s" in err)
    if pause:
        process.send_signal(signal.SIGSTOP)
    workers = descendants(process.pid)
    assert "spans/s" in printed and len(workers) == 2, (printed, workers)
    return workers


@pytest.mark.slow
def test_a_worker_killed_mid_file_rejects_the_file_within_seconds(
    jsonl: tuple[Path, int], store: Path
) -> None:
    before = checksum(store)
    process = start_ingest(jsonl[0], store)
    workers = decoding(process, pause=True)
    started = time.monotonic()
    os.kill(min(workers), signal.SIGKILL)
    process.send_signal(signal.SIGCONT)
    code, err = finish(process, within=30)
    assert code == 2 and time.monotonic() - started < 30
    lines = [line for line in err.splitlines() if "decode worker" in line]
    assert len(lines) == 1 and re.fullmatch(
        re.escape(f"{jsonl[0]}: decode block ") + r"\d+: a decode worker died \(killed by SIGKILL\); "
        "the file was not loaded",
        lines[0],
    ), err
    assert not gone(workers), "a worker outlived the command"
    assert checksum(store) == before, "the rejected file left spans behind"


@pytest.mark.slow
def test_a_worker_killed_mid_file_on_chdb_writes_nothing(jsonl: tuple[Path, int], tmp_path: Path) -> None:
    """The ClickHouse loader shares the decode pool: the same fault, nothing of the file in otel_traces."""
    pytest.importorskip("chdb", reason="chdb not installed ([clickhouse] extra)")
    from tailscope.store.engine import open_store

    url = f"chdb://{tmp_path / 'ch'}"
    process = start_ingest(jsonl[0], url)
    deadline = time.monotonic() + 60  # (this loader reports progress per file: stopped once the pool is up)
    while len(workers := descendants(process.pid)) < 2 and time.monotonic() < deadline:
        time.sleep(0.005)
    process.send_signal(signal.SIGSTOP)
    workers = descendants(process.pid)
    assert len(workers) == 2, workers
    os.kill(max(workers), signal.SIGKILL)
    process.send_signal(signal.SIGCONT)
    code, err = finish(process, within=60)
    assert code == 2 and "a decode worker died (killed by SIGKILL); the file was not loaded" in err, err
    assert not gone(workers)
    store = open_store(url)
    try:
        assert store.query("SELECT count() FROM otel_traces").single_value() == 0
    finally:
        store.close()


@pytest.mark.slow
@pytest.mark.parametrize("moment", ["during", "committing", "right after"])
def test_sigterm_during_and_right_after_the_decode_stops_everything(
    jsonl: tuple[Path, int], store: Path, moment: str
) -> None:
    before = checksum(store)
    process = start_ingest(jsonl[0], store)
    workers = decoding(process, pause=moment == "during")
    if moment == "committing":  # DuckDB writes its WAL inside COMMIT
        wal = store.with_name(store.name + ".wal")
        deadline = time.monotonic() + 60
        while not wal.exists() and time.monotonic() < deadline and process.poll() is None:
            time.sleep(0.001)
    if moment == "right after":  # the file committed (the line after its last batch's), the pool still up
        read_until(process, lambda err: err.count(f"{jsonl[1]:,} spans") >= 2)
    process.send_signal(signal.SIGTERM)
    process.send_signal(signal.SIGCONT)
    code, err = finish(process, within=30)
    assert code == -signal.SIGTERM, err
    assert "Traceback" not in err
    assert not gone(workers | descendants(process.pid)), "a worker outlived the command"
    with connect_reader(store) as conn:
        spans = conn.execute("SELECT count(*) FROM otel_traces WHERE RunLabel = 'big'").fetchone()[0]
    if moment == "during":
        assert spans == 0 and checksum(store) == before
    elif moment == "committing":  # all or nothing
        assert spans == jsonl[1] or (spans == 0 and checksum(store) == before)
    else:
        assert spans == jsonl[1], "stopped after its commit: the file is stored"


@pytest.mark.slow
def test_kill_9_of_the_command_leaves_no_worker(jsonl: tuple[Path, int], store: Path) -> None:
    process = start_ingest(jsonl[0], store)
    workers = decoding(process)
    process.kill()  # the command alone, not its group
    process.wait(timeout=30)
    assert not gone(workers), "workers were left behind, orphaned"


def signal_masks(pid: int) -> tuple[int, int, int]:
    """(caught, ignored, blocked) signal bit sets of a process, from /proc."""
    fields = dict(
        line.split(":\t", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":\t" in line
    )
    return int(fields["SigCgt"], 16), int(fields["SigIgn"], 16), int(fields["SigBlk"], 16)


def test_workers_do_not_inherit_the_commands_signal_handlers() -> None:
    """A worker forked from the CLI must die on SIGTERM (its default action), ignore Ctrl-C's
    SIGINT (the command stops it) and not run the CLI's handler that raises in the main thread."""
    script = (
        "import sys; from tailscope.cli import signals; signals.install();"
        "from ingest.parallel import DecodePool\n"
        "with DecodePool() as pool:\n"
        "    print(*pool.pids(), flush=True); sys.stdin.readline()\n"
    )
    process = subprocess.Popen(
        [sys.executable, "-c", script],
        cwd=REPO_ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        pids = [int(pid) for pid in process.stdout.readline().split()]
        assert len(pids) == 2
        for pid in pids:
            deadline = time.monotonic() + 10  # (a worker resets them as it starts)
            while True:
                caught, ignored, blocked = signal_masks(pid)
                settled = not blocked & (1 << (signal.SIGTERM - 1))
                if settled or time.monotonic() > deadline:
                    break
                time.sleep(0.01)
            for signum in (signal.SIGTERM, signal.SIGHUP):
                assert not caught & (1 << (signum - 1)), f"worker {pid} runs a handler for {signum.name}"
                assert not blocked & (1 << (signum - 1))
            assert ignored & (1 << (signal.SIGINT - 1))
        os.kill(pids[0], signal.SIGTERM)
        assert not gone({pids[0]}, within=5)
    finally:
        process.communicate("\n", timeout=30)
    assert process.returncode == 0
    assert not gone(set(pids), within=5)


def test_a_loop_of_parallel_loads_never_hangs(tmp_path: Path) -> None:
    """10 parallel loads in one process (the CLI's signal handlers installed), each ending."""
    path = tmp_path / "small.jsonl"
    spans = big_jsonl(path, lines=40, per_line=10)
    script = (
        SMALL_BLOCKS
        + "import sys; from tailscope.cli import signals; signals.install();"
        + "p.otlp_fast.BLOCK_BYTES = 1 << 14; assert l.decode_on_workers([1])\n"
        + "for i in range(10):\n"
        + f"    s = l.load_paths([{str(path)!r}], sys.argv[1] + f'/{{i}}.duckdb', 'r')\n"
        + f"    assert s.spans == {spans} and not s.failed, s\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path)],
        cwd=REPO_ROOT,
        timeout=120,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr
