"""Runs and stores built once per test session and copied where a test needs its own: the same
simulated trace file or hand-built store that several tests (or several files) make from the same inputs.

`cached(factory, name, inputs, build)` returns a folder that `build(folder)` filled, made once per session
for these `inputs` and this code: the key is a hash of `name`, `inputs` and the code's version (every
.py and .sql file of the packages and the tests' helpers, read when the session first asks), so an entry
made by other code is never read. The folder lives in the session's base temporary folder, which
pytest makes new for each session and which pytest-xdist's workers share (each worker's base is a
`popen-gwN` folder inside it): a file lock per key makes one worker build while the others wait, then
read what it built. An entry is never written after it is made: a test copies what it changes
(`copy_file`, `copy_store`).
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
from collections.abc import Callable
from functools import cache
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
CODE = ("reference_pipeline", "ingest", "tailscope", "tests")


@cache
def code_version() -> str:
    """A hash of every .py and .sql file of the packages and the tests (their paths and bytes)."""
    h = hashlib.blake2b(digest_size=16)
    for top in CODE:
        for path in sorted((REPO / top).rglob("*")):
            if path.suffix in (".py", ".sql") and "__pycache__" not in path.parts and path.is_file():
                h.update(str(path.relative_to(REPO)).encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


def session_root(factory: pytest.TempPathFactory) -> Path:
    """The session's base temporary folder, the one its xdist workers share."""
    base = factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") and base.name.startswith("popen-") else base


def key(name: str, inputs: object, version: str | None = None) -> str:
    text = repr((name, inputs, version or code_version()))
    return f"{name}-{hashlib.blake2b(text.encode(), digest_size=12).hexdigest()}"


def cached(factory: pytest.TempPathFactory, name: str, inputs: object, build: Callable[[Path], None]) -> Path:
    """The folder `build(folder)` made for `inputs`, built once per session (see the module's text).
    `inputs` must name everything the build depends on besides the code (scenario, size, seed, options)."""
    root = session_root(factory) / "run-cache"
    root.mkdir(exist_ok=True)
    entry = root / key(name, inputs)
    with open(root / f"{entry.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (entry / ".done").exists():
            if entry.exists():  # a build that failed part way: start again
                shutil.rmtree(entry)
            entry.mkdir()
            build(entry)
            (entry / ".done").touch()
    return entry


def copy_file(entry: Path, name: str, dest: Path) -> Path:
    """A copy of the entry's file `name` at `dest` (its own: the test may change it)."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(entry / name, dest)
    return dest


def copy_store(entry: Path, name: str, dest: Path) -> Path:
    """A copy of the DuckDB store file `name` the entry holds (and its write-ahead log, if any) at `dest`."""
    copy_file(entry, name, dest)
    wal = entry / f"{name}.wal"
    if wal.exists():
        shutil.copyfile(wal, dest.with_name(dest.name + ".wal"))
    return dest


def simulated_file(factory: pytest.TempPathFactory, scenario: str, requests: int, seed: int,
                   **options) -> Path:
    """The cached file of `simulate_to_file(FILE, scenario, requests, seed, **options)` (OTLP/JSON
    unless `fmt` says otherwise): read it, or copy it (copy_file) to change it."""
    from reference_pipeline.simulate.api import simulate_to_file

    def build(folder: Path) -> None:
        simulate_to_file(folder / "run.json", scenario, requests, seed, **options)

    inputs = (scenario, requests, seed, sorted(options.items()))
    return cached(factory, "simulated", inputs, build) / "run.json"


def simulated_copy(factory: pytest.TempPathFactory, dest: Path, scenario: str, requests: int, seed: int,
                   **options) -> Path:
    """`simulate_to_file(dest, scenario, requests, seed, **options)`'s file at `dest`, copied from the
    session's cached one (simulated_file): the same bytes, the simulation made once per session."""
    source = simulated_file(factory, scenario, requests, seed, **options)
    return copy_file(source.parent, source.name, dest)


def ingested_copy(factory: pytest.TempPathFactory, dest: Path, file: Path, run: str) -> Path:
    """The store `tailscope ingest FILE --db DEST --run RUN` makes in an empty store, at `dest`: a copy of
    the session's one for these bytes and run label (the same rows, but the time it was loaded and the
    source file's path in `runs`)."""
    from tailscope.cli.main import main

    digest = hashlib.blake2b(file.read_bytes(), digest_size=16).hexdigest()

    def build(folder: Path) -> None:
        assert main(["ingest", str(file), "--db", str(folder / "store.duckdb"), "--run", run]) == 0

    return copy_store(cached(factory, "ingested", (digest, file.suffix, run), build), "store.duckdb", dest)
