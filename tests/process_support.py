"""Processes a test started, as Linux sees them (/proc): what must be gone after a stop."""

from __future__ import annotations

from pathlib import Path


def children_of(pid: int) -> list[int]:
    """Live child processes of `pid` (Linux /proc; empty elsewhere)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid and fields[0] != "Z":
            found.append(int(stat.parent.name))
    return found
