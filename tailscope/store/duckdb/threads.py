"""DuckDB's threads, fitted to the memory cap each connection runs under.

DuckDB starts one worker thread per core, and every thread of a hash join, aggregate or window keeps
its own buffers: it needs at least ~128 MB of the memory limit per thread (DuckDB's out-of-memory
guide: reduce the threads before the memory). Under tailscope's caps (1 GB per connection, 512 MB for a
writer's transaction) a 16-core machine failed a 16,000-span ingest with "Out of Memory Error: could
not allocate block of size 256.0 KiB (488.4 MiB/488.2 MiB used)" (an H100 box, bench/RESULTS.md
"Reference pipeline (GPU)"), while the 2-core machine never did. So a connection runs at most one
thread per MEMORY_PER_THREAD of its cap, and never more than the cores it may use;
TAILSCOPE_DUCKDB_THREADS overrides.
"""

from __future__ import annotations

import os
import re

import duckdb

from tailscope import sql

# DuckDB's floor plus a margin: a writer's 512 MB runs 3 threads, a 1 GB reader 5; a 2-core machine, 2
MEMORY_PER_THREAD = 160 * 2**20

_UNITS = {
    "b": 1,
    "bytes": 1,
    "byte": 1,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
    "tb": 10**12,
    "kib": 2**10,
    "mib": 2**20,
    "gib": 2**30,
    "tib": 2**40,
}
_SIZE = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*([a-zA-Z]*)\s*$")


def size_bytes(text: str) -> int | None:
    """A DuckDB size ('1GB', '512MB', '488.2 MiB', '4GiB') in bytes; None where it is not one."""
    match = _SIZE.match(text)
    if match is None:
        return None
    unit = _UNITS.get((match.group(2) or "b").lower())
    return None if unit is None else int(float(match.group(1)) * unit)


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity, where the platform tells)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def threads_for(memory_limit: str, cores: int | None = None) -> int:
    """How many threads a connection capped at `memory_limit` runs (TAILSCOPE_DUCKDB_THREADS wins)."""
    override = os.environ.get("TAILSCOPE_DUCKDB_THREADS", "").strip()
    if override.isdigit() and int(override) > 0:
        return int(override)
    available = cores if cores is not None else usable_cores()
    limit = size_bytes(memory_limit)
    if limit is None:  # a form we do not read (e.g. a percentage): DuckDB's own choice, the cores
        return available
    return max(1, min(available, limit // MEMORY_PER_THREAD))


def fit_threads(conn: duckdb.DuckDBPyConnection) -> int:
    """Set the connection's threads for the memory limit it has now; the number set."""
    limit = conn.execute(sql.load("duckdb_memory_limit")).fetchone()[0]
    threads = threads_for(str(limit))
    conn.execute(sql.load("duckdb_set_threads"), [threads])
    return threads
