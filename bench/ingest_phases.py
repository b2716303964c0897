"""Where one file's ingest spends its time and CPU: the floor of each part of the write path.

Runs `ingest.loader.load_paths` in this process (decoding on the usual worker processes) with each
part wrapped in a timer: the DuckDB append of the decoded batches, the other SQL (dedupe, runs row,
counts), the derived-row refresh, the commit (DuckDB checkpoints the file there), and the rest of
the loader process (reading and cutting blocks, receiving the workers' batches, waiting for them).
Prints wall and CPU seconds per part, the loader's and the workers' CPU, and the loader's peak RSS.

    .venv/bin/python bench/ingest_phases.py bench/data/otlp_1000000.jsonl
"""

from __future__ import annotations

import argparse
import collections
import resource
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import ingest.loader as loader  # noqa: E402

CPU: collections.Counter[str] = collections.Counter()
WALL: collections.Counter[str] = collections.Counter()


def timed(name: str, function: Callable[..., Any]) -> Callable[..., Any]:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        cpu, wall = time.process_time(), time.perf_counter()
        try:
            return function(*args, **kwargs)
        finally:
            CPU[name] += time.process_time() - cpu
            WALL[name] += time.perf_counter() - wall

    return wrapper


class _TimedCommit:
    def __init__(self, conn: Any) -> None:
        self._conn = conn
        self.commit = timed("commit (checkpoint)", conn.commit)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)


def instrument() -> None:
    loader.append_batch = timed("append (DuckDB INSERT)", loader.append_batch)
    loader.refresh_run = timed("refresh_run (derived rows)", loader.refresh_run)
    loader._query = timed("other SQL (dedupe, runs row)", loader._query)
    writer = loader.connect_writer

    @contextmanager
    def connect_writer(path: Any) -> Iterator[Any]:
        with writer(path) as conn:
            yield _TimedCommit(conn)

    loader.connect_writer = connect_writer


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("path", type=Path)
    args = parser.parse_args()
    instrument()
    with tempfile.TemporaryDirectory() as folder:
        cpu, wall = time.process_time(), time.perf_counter()
        summary = loader.load_paths([args.path], Path(folder) / "phases.duckdb", "bench")
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    workers = resource.getrusage(resource.RUSAGE_CHILDREN)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(
        f"{args.path}: {summary.files[0].spans:,} spans, {wall:.2f} s wall, loader peak RSS {peak:,.0f} MiB"
    )
    print(f"  {'part':32} {'wall':>8} {'CPU':>8}")
    for name in WALL:
        print(f"  {name:32} {WALL[name]:>6.2f} s {CPU[name]:>6.2f} s")
    rest_wall, rest_cpu = wall - sum(WALL.values()), cpu - sum(CPU.values())
    print(f"  {'rest of the loader (read, wait)':32} {rest_wall:>6.2f} s {rest_cpu:>6.2f} s")
    print(f"  loader CPU {cpu:.2f} s, decode workers CPU {workers.ru_utime + workers.ru_stime:.2f} s")


if __name__ == "__main__":
    main()
