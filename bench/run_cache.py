"""A cache of the blind families' loaded stores for bench/accuracy.py, so that rerunning the diagnosis
over every family costs the diagnosis only, not the simulation and the load again.

A run is kept as a DuckDB file loaded from the file the family writes in the seed's format, plus the
run's summary (truth, format, sizes) as JSON. Its key is the run (family, scenario, requests, seed) and a
digest of every source the store's content depends on: the simulator (reference_pipeline/simulate: the
family's own modules and the shared ones, not the other families'; of blind.py the functions that write
a run, so registering a family or holding one out keeps the others' entries), the loaders (ingest) and
tailscope outside tailscope/analysis (store, rules, SQL). The diagnosis
(tailscope/analysis, and the statements only it reads with: sql/diagnosis_*.sql and their ClickHouse
twins, run at diagnosis time, never at load) is not in the digest: changing it is what the cache is
for. Each diagnosis reads a fresh copy of the cached file made right after the load, so it sees what
an uncached run would.
Entries are written under a temporary name and renamed, so concurrent runs never read half a file.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SIMULATE = "reference_pipeline/simulate"
SOURCES = (("ingest", ()), ("tailscope", ("tailscope/analysis",)))
RUN_WRITERS = ("family", "truth", "run_format", "write_run")  # blind.py's part in a run's content


def _diagnosis_statement(path: Path) -> bool:
    return path.suffix == ".sql" and path.name.startswith("diagnosis_")


def _files(root: Path, folder: str, skipped: tuple[str, ...]) -> Iterator[tuple[str, Path]]:
    for path in sorted((root / folder).rglob("*")):
        rel = path.relative_to(root).as_posix()
        kept = path.suffix in (".py", ".sql") and not _diagnosis_statement(path)
        if kept and not any(rel.startswith(s + "/") for s in skipped):
            yield rel, path


def _owned(stem: str, module: str) -> bool:
    return stem == module or stem.startswith(module + "_")


@cache
def digest(name: str, root: Path = ROOT) -> str:
    """A digest of the sources family `name`'s loaded store depends on (paths and bytes)."""
    from reference_pipeline.simulate import blind

    mine = blind.MODULES[name]
    others = [m for m in blind.MODULES.values() if m != mine and not _owned(mine, m)]
    h = hashlib.sha256()
    for rel, path in _files(root, SIMULATE, ()):
        theirs = any(_owned(path.stem, m) and not _owned(path.stem, mine) for m in others)
        if path.name == "blind.py" or theirs:
            continue
        h.update(rel.encode() + b"\0" + path.read_bytes() + b"\0")
    writers = "".join(inspect.getsource(getattr(blind, f)) for f in RUN_WRITERS)
    h.update(f"{mine}\0{blind.SUFFIX!r}\0{writers}\0".encode())
    for folder, skipped in SOURCES:
        for rel, path in _files(root, folder, skipped):
            h.update(rel.encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def load_file(path: Path, db: Path) -> None:
    """Load one trace file into the store `db` as run "run" through the real loader (raises on failure)."""
    from ingest.loader import load_paths

    result = load_paths([path], db, "run")
    if result.failed:
        raise RuntimeError(f"{path}: {result.failed[0].error}")


def _load(name: str, scenario: str, requests: int, seed: int, db: Path) -> dict[str, Any]:
    from reference_pipeline.simulate.blind import SUFFIX, run_format, write_run

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"run{SUFFIX[run_format(name, seed)]}"
        summary = write_run(path, name, scenario, requests, seed)
        load_file(path, db)
    return summary


@contextmanager
def loaded_run(name: str, scenario: str, requests: int, seed: int,
               cache_dir: Path | None) -> Iterator[tuple[Path, dict[str, Any]]]:
    """A store holding one blind run as run label "run", and the run's summary; from `cache_dir` when a
    valid entry is there (then a private copy), else simulated and loaded (and kept there if given)."""
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "store.duckdb"
        if cache_dir is None:
            yield db, _load(name, scenario, requests, seed, db)
            return
        entry = Path(cache_dir) / digest(name) / f"{name}--{scenario}--{requests}--{seed}"
        stored, meta = entry.with_suffix(".duckdb"), entry.with_suffix(".json")
        if stored.exists() and meta.exists():
            shutil.copyfile(stored, db)
            yield db, json.loads(meta.read_text())
            return
        # a family's summary may hold objects of its own (a conventions record): the cache keeps their
        # repr, and a first run gets the same JSON form a later hit reads back
        summary = json.loads(json.dumps(_load(name, scenario, requests, seed, db), default=repr))
        entry.parent.mkdir(parents=True, exist_ok=True)
        part = entry.parent / f".{entry.name}.{os.getpid()}.part"  # with_suffix replaces ".part"
        shutil.copyfile(db, part.with_suffix(".duckdb"))
        part.with_suffix(".json").write_text(json.dumps(summary))
        os.replace(part.with_suffix(".duckdb"), stored)
        os.replace(part.with_suffix(".json"), meta)
        yield db, summary
