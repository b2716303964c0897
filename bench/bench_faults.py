"""Inject the faults of issue 30 into real commands and say what each did: the reliability table.

Every fault runs the real CLI in its own process on a fresh store holding one earlier run, then
checks, after the command has ended: its exit status, how long it took to end after the fault,
whether any of its processes is left, and what the store holds (the earlier run intact; the file
being loaded all or nothing; every acknowledged span of `collect`).

- kill -9 of a decode worker mid-file (DuckDB and chdb), kill -9 of the command itself;
- SIGTERM at each phase of a parallel ingest: pool started, decoding, committing, just committed;
- a full disk (a tmpfs filled to the last byte; needs root) under ingest, migrate, collect and the
  rule editors' save;
- the ClickHouse server gone (kill -9) mid-ingest, on the HTTP transport's stand-in
  (tests/chdb_http_server.py: clickhouse-connect's requests answered by chdb), then back.

    python bench/bench_faults.py            # prints one JSON line per fault, then a Markdown table
"""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from machine_info import machine

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from test_crash_safety import CHECKSUM, big_jsonl  # noqa: E402
from test_decode_workers import CLI, read_until  # noqa: E402
from test_disk_full import Filler, stored  # noqa: E402
from test_stop_signals import alive, descendants  # noqa: E402

from tailscope.store.duckdb.connection import connect_reader  # noqa: E402

ROWS: list[dict[str, Any]] = []


def record(fault: str, command: str, **outcome: Any) -> None:
    row = {"fault": fault, "command": command, **outcome}
    ROWS.append(row)
    print(json.dumps(row), flush=True)


def duck_state(db: Path) -> tuple[tuple[int, int], int]:
    with connect_reader(db) as conn:
        big = conn.execute("SELECT count(*) FROM otel_traces WHERE RunLabel = 'big'").fetchone()[0]
        return conn.execute(CHECKSUM).fetchone(), big


def fresh_store(folder: Path, name: str) -> Path:
    db = folder / f"{name}.duckdb"
    early = folder / f"{name}-early.jsonl"
    big_jsonl(early, lines=2, per_line=3)
    subprocess.run(
        [*CLI, "ingest", str(early), "--db", str(db), "--run", "early"], check=True, capture_output=True
    )
    return db


def ingest(path: Path, where: list[str]) -> subprocess.Popen[bytes]:
    """`tailscope ingest` of `path` into the store `where` names (either engine), in its own process."""
    return subprocess.Popen(
        [*CLI, "ingest", str(path), *where, "--run", "big"],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )


def ended(
    process: subprocess.Popen[bytes], since: float, within: float = 120
) -> tuple[int | str, float, str]:
    try:
        _, err = process.communicate(timeout=within)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.communicate()
        return "hung", within, ""
    lines = [line for line in err.decode(errors="replace").splitlines() if "spans/s" not in line]
    return process.returncode, round(time.monotonic() - since, 2), " | ".join(lines)[:300]


def left(pids: set[int], within: float = 5.0) -> int:
    deadline = time.monotonic() + within
    while alive(pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    return len(alive(pids))


def workers_of(process: subprocess.Popen[bytes]) -> set[int]:
    deadline = time.monotonic() + 60
    while len(found := descendants(process.pid)) < 2 and time.monotonic() < deadline:
        time.sleep(0.005)
    return found


def worker_faults(folder: Path, big: Path, spans: int) -> None:
    db = fresh_store(folder, "kill-worker")
    before, _ = duck_state(db)
    process = ingest(big, ["--db", str(db)])
    read_until(process, lambda err: "spans/s" in err)
    process.send_signal(signal.SIGSTOP)
    workers = descendants(process.pid)
    os.kill(min(workers), signal.SIGKILL)
    since = time.monotonic()
    process.send_signal(signal.SIGCONT)
    code, seconds, err = ended(process, since)
    after, loaded = duck_state(db)
    record("kill -9 of a decode worker mid-file", "ingest (DuckDB)", exit=code, seconds_to_exit=seconds,
           processes_left=left(workers), store_unchanged=after == before, said=err)  # fmt: skip

    url = f"chdb://{folder / 'kill-worker-ch'}"
    process = ingest(big, ["--store", url])
    workers = workers_of(process)
    process.send_signal(signal.SIGSTOP)
    os.kill(max(workers), signal.SIGKILL)
    since = time.monotonic()
    process.send_signal(signal.SIGCONT)
    code, seconds, err = ended(process, since)
    from tailscope.store.engine import open_store

    store = open_store(url)
    count = store.query("SELECT count() FROM otel_traces").single_value()
    store.close()
    record("kill -9 of a decode worker mid-file", "ingest (chdb)", exit=code, seconds_to_exit=seconds,
           processes_left=left(workers), spans_written=count, said=err)  # fmt: skip

    db = fresh_store(folder, "kill-command")
    before, _ = duck_state(db)
    process = ingest(big, ["--db", str(db)])
    read_until(process, lambda err: "spans/s" in err)
    workers = descendants(process.pid)
    process.kill()
    process.wait()
    after, loaded = duck_state(db)
    record("kill -9 of the command mid-decode", "ingest (DuckDB)", exit=process.returncode,
           processes_left=left(workers), store_unchanged=after == before and loaded == 0)  # fmt: skip


def sigterm_phases(folder: Path, big: Path, spans: int) -> None:
    total = f"{spans:,} spans"  # the last batch's line, then the committed file's
    phases: list[tuple[str, Callable[[subprocess.Popen[bytes], Path], None]]] = [
        ("pool started, nothing decoded", lambda p, db: workers_of(p) and None),
        ("decoding (after the first batch)", lambda p, db: read_until(p, lambda e: "spans/s" in e) and None),
        (
            "committing (its WAL written)",
            lambda p, db: wait_for(lambda: db.with_name(db.name + ".wal").exists()),
        ),
        (
            "right after the commit, pool still up",
            lambda p, db: read_until(p, lambda e: e.count(total) >= 2) and None,
        ),
    ]
    for phase, until in phases:
        db = fresh_store(folder, f"term-{len(ROWS)}")
        before, _ = duck_state(db)
        process = ingest(big, ["--db", str(db)])
        until(process, db)
        workers = descendants(process.pid)
        since = time.monotonic()
        process.send_signal(signal.SIGTERM)
        code, seconds, err = ended(process, since)
        after, loaded = duck_state(db)
        whole = loaded in (0, spans) and (loaded == spans or after == before)
        record(f"SIGTERM: {phase}", "ingest (DuckDB, parallel decode)", exit=code, seconds_to_exit=seconds,
               processes_left=left(workers), file_spans_stored=loaded, all_or_nothing=whole,
               said=err)  # fmt: skip


def wait_for(condition: Callable[[], bool], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.002)


def mounted_tmpfs(folder: Path) -> Path | None:
    where = folder / "fs"
    where.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=48m", "tmpfs", str(where)], capture_output=True
    )
    return where if done.returncode == 0 else None


def disk_full(folder: Path, big: Path) -> None:
    fs = mounted_tmpfs(folder)
    if fs is None:
        record("disk full", "(all)", skipped="cannot mount a tmpfs here (needs root)")
        return
    try:
        db = fs / "store.duckdb"
        early = folder / "df-early.jsonl"
        big_jsonl(early, lines=2, per_line=3)
        subprocess.run(
            [*CLI, "ingest", str(early), "--db", str(db), "--run", "early"], check=True, capture_output=True
        )
        before = duck_state(db)
        filler = Filler(fs)
        filler.fill()
        since = time.monotonic()
        done = subprocess.run(
            [*CLI, "ingest", str(big), "--db", str(db), "--run", "big"], capture_output=True, text=True
        )
        seconds = round(time.monotonic() - since, 2)
        filler.release()
        intact = duck_state(db) == before
        again = subprocess.run(
            [*CLI, "ingest", str(big), "--db", str(db), "--run", "big"], capture_output=True
        )
        said = [line for line in done.stderr.strip().splitlines() if "spans/s" not in line]
        record("disk full", "ingest (DuckDB)", exit=done.returncode, seconds_to_exit=seconds,
               stderr_lines=len(said), said=" | ".join(said)[:300],
               store_unchanged=intact, ingest_after_freeing=again.returncode)  # fmt: skip

        v1 = fs / "v1.duckdb"
        v1.write_bytes(gzip.decompress((ROOT / "tests" / "fixtures" / "store_v1.duckdb.gz").read_bytes()))
        filler.fill()
        done = subprocess.run([*CLI, "migrate", "--db", str(v1)], capture_output=True, text=True)
        filler.release()
        again = subprocess.run([*CLI, "migrate", "--db", str(v1)], capture_output=True, text=True)
        record("disk full", "migrate (v1 store)", exit=done.returncode, said=done.stderr.strip()[:300],
               migrate_after_freeing=again.returncode)  # fmt: skip

        from tailscope import analysis
        from tailscope.store.duckdb.store import DuckDBStore as Store

        store = Store(db)
        rules = analysis.list_rules(store)
        filler.fill()
        try:
            analysis.save_rules(store, rules[:-1])
            outcome = "saved"
        except Exception as error:  # what the dashboard's editor would show
            outcome = f"{type(error).__name__}: {error}"
        filler.release()
        record("disk full", "stage rule editor's save", raised=outcome[:300],
               rules_unchanged=analysis.list_rules(store) == rules)  # fmt: skip

        collect_on_full_disk(fs)
    finally:
        subprocess.run(["umount", "-l", str(fs)], check=False)


def collect_on_full_disk(fs: Path) -> None:
    from receiver_support import Collector, json_request, spans_of

    db = fs / "collect.duckdb"
    collector = Collector(db, "live", "--flush-interval-ms", "50")
    acknowledged = 0
    statuses: list[int] = []
    try:
        for trace, count in ((1, 5), (2, 7)):
            response = collector.post(json_request("svc", spans_of(trace, count)), "application/json")
            statuses.append(response.status_code)
            acknowledged += count if response.status_code == 200 else 0
            if trace == 1:
                wait_for(lambda: stored(db) == 5, 30)
                filler = Filler(fs)
                filler.fill()
        wait_for(lambda: "the disk is full" in collector.output(), 30)
        refused = collector.post(json_request("svc", spans_of(3, 4)), "application/json")
        statuses.append(refused.status_code)
        filler.release()
        wait_for(lambda: "space again" in collector.output(), 30)
        code = collector.stop()
    finally:
        collector.kill()
    with connect_reader(db) as conn:
        kept = conn.execute("SELECT count(*) FROM otel_traces").fetchone()[0]
    lines = [
        line for line in collector.output().splitlines() if "disk is full" in line or "space again" in line
    ]
    record("disk full", "collect (--ack queued)", answers=statuses, exit=code,
           spans_acknowledged=acknowledged, spans_stored=kept, log=" | ".join(lines)[:400])  # fmt: skip


def clickhouse_gone(folder: Path, big: Path, spans: int, delays: list[float]) -> None:
    chdb_folder = folder / "http-chdb"
    launcher = (
        "import sys, time; sys.path.insert(0, 'tests'); from pathlib import Path;"
        "from chdb_http_server import chdb_http_server\n"
        "with chdb_http_server(Path(sys.argv[1])) as port:\n    print(port, flush=True); time.sleep(3600)\n"
    )

    def start_server() -> tuple[subprocess.Popen[str], str]:
        server = subprocess.Popen(
            [sys.executable, "-c", launcher, str(chdb_folder)], cwd=ROOT, stdout=subprocess.PIPE, text=True
        )
        port = server.stdout.readline().strip()
        return server, f"clickhouse://default@127.0.0.1:{port}/default"

    for delay in delays:
        server, url = start_server()
        process = subprocess.Popen(
            [*CLI, "ingest", str(big), "--store", url, "--run", f"gone-{delay:g}"],
            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True,
        )  # fmt: skip
        time.sleep(delay)
        server.kill()
        server.wait()
        since = time.monotonic()
        code, seconds, err = ended(process, since)
        server, url = start_server()
        from tailscope.store.engine import open_store
        from tailscope.store.errors import TableMissingError

        store = open_store(url)
        try:
            count = store.query(
                "SELECT count() FROM otel_traces WHERE ResourceAttributes['tailscope.run'] = {run:String}",
                {"run": f"gone-{delay:g}"},
            ).single_value()
        except TableMissingError:  # killed before the ingest created it
            count = 0
        finally:
            store.close()
        again = subprocess.run(
            [*CLI, "ingest", str(big), "--store", url, "--run", f"gone-{delay:g}", "--json"],
            cwd=ROOT, capture_output=True, text=True,
        )  # fmt: skip
        server.kill()
        server.wait()
        rerun = {"exit": again.returncode, **(json.loads(again.stdout) if again.returncode == 0 else {})}
        rerun = {key: rerun.get(key) for key in ("exit", "spans", "duplicates", "traces")}
        record(f"ClickHouse server killed {delay:g} s into the ingest", "ingest (HTTP transport, stand-in)",
               exit=code, seconds_to_exit=seconds, said=err, spans_in_otel_traces_after=count,
               all_or_nothing=count in (0, spans),
               same_ingest_again=rerun)  # fmt: skip


def markdown() -> str:
    lines = ["| fault | command | what it did |", "|---|---|---|"]
    for row in ROWS:
        rest = {k: v for k, v in row.items() if k not in ("fault", "command")}
        lines.append(
            f"| {row['fault']} | {row['command']} | " + "; ".join(f"{k}={v}" for k, v in rest.items()) + " |"
        )
    return "\n".join(lines)


def main() -> None:
    import argparse

    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--only", choices=("workers", "sigterm", "disk", "clickhouse"), help="one group of faults"
    )
    parser.add_argument(
        "--kill-after",
        default="0.3,0.6,1.0,1.5,3",
        help="seconds into the ingest to kill the ClickHouse stand-in",
    )
    arguments = parser.parse_args()
    only = arguments.only
    print(machine(), flush=True)
    with tempfile.TemporaryDirectory(prefix="faults-") as name:
        folder = Path(name)
        big = folder / "big.jsonl"
        spans = big_jsonl(big, lines=200, per_line=20)
        if only in (None, "workers"):
            worker_faults(folder, big, spans)
        if only in (None, "sigterm"):
            sigterm_phases(folder, big, spans)
        if only in (None, "disk"):
            disk_full(folder, folder / "big.jsonl")
        with contextlib.suppress(ImportError):
            import chdb  # noqa: F401

            if only in (None, "clickhouse"):
                clickhouse_gone(folder, big, spans, [float(x) for x in arguments.kill_after.split(",")])
    print(markdown())
    print(machine())


if __name__ == "__main__":
    main()
