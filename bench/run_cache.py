"""A cache of the blind families' loaded stores for bench/accuracy.py, so that rerunning the diagnosis
over every family costs the diagnosis only, not the simulation and the load again.

A run is kept as a DuckDB file loaded from the file the family writes in the seed's format, plus the
run's summary (truth, format, sizes) as JSON. Its key is the run (family, scenario, requests, seed) and a
digest of every source the store's content depends on: the simulator (reference_pipeline/simulate), the
loaders (ingest) and tailscope outside tailscope/analysis (store, rules, SQL). The diagnosis
(tailscope/analysis) is not in the digest: changing it is what the cache is for. Each diagnosis reads a
fresh copy of the cached file made right after the load, so it sees what an uncached run would.
Entries are written under a temporary name and renamed, so concurrent runs never read half a file.
"""

from __future__ import annotations

import hashlib
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
SOURCES = (("reference_pipeline/simulate", ()), ("ingest", ()), ("tailscope", ("tailscope/analysis",)))


@cache
def digest(root: Path = ROOT) -> str:
    """A digest of the sources the loaded store depends on (paths and bytes of .py and .sql files)."""
    h = hashlib.sha256()
    for folder, skipped in SOURCES:
        for path in sorted((root / folder).rglob("*")):
            rel = path.relative_to(root).as_posix()
            if path.suffix not in (".py", ".sql") or any(rel.startswith(s + "/") for s in skipped):
                continue
            h.update(rel.encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def _load(name: str, scenario: str, requests: int, seed: int, db: Path) -> dict[str, Any]:
    from ingest.loader import load_paths
    from reference_pipeline.simulate.blind import SUFFIX, run_format, write_run

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"run{SUFFIX[run_format(name, seed)]}"
        summary = write_run(path, name, scenario, requests, seed)
        result = load_paths([path], db, "run")
        if result.failed:
            raise RuntimeError(f"{path}: {result.failed[0].error}")
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
        entry = Path(cache_dir) / digest() / f"{name}--{scenario}--{requests}--{seed}"
        stored, meta = entry.with_suffix(".duckdb"), entry.with_suffix(".json")
        if stored.exists() and meta.exists():
            shutil.copyfile(stored, db)
            yield db, json.loads(meta.read_text())
            return
        summary = _load(name, scenario, requests, seed, db)
        entry.parent.mkdir(parents=True, exist_ok=True)
        part = entry.parent / f".{entry.name}.{os.getpid()}"
        shutil.copyfile(db, part.with_suffix(".duckdb"))
        part.with_suffix(".json").write_text(json.dumps(summary))
        os.replace(part.with_suffix(".duckdb"), stored)
        os.replace(part.with_suffix(".json"), meta)
        yield db, summary
