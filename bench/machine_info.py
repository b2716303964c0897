"""The one-line machine description every benchmark prints beside its figures."""

from __future__ import annotations

import os
import platform
import resource
from pathlib import Path


def machine() -> str:
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    load = " ".join(f"{x:.1f}" for x in os.getloadavg())
    return (
        f"{platform.machine()} {model}, {os.cpu_count()} cores, {memory:.0f} GiB, "
        f"Python {platform.python_version()}, load average {load}"
    )


def cpu_seconds(*who: int) -> float:
    """CPU seconds (user + system) of `who` (resource.RUSAGE_*): by default this process's threads
    and its waited-for children (decode workers, services)."""
    total = 0.0
    for each in who or (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN):
        usage = resource.getrusage(each)
        total += usage.ru_utime + usage.ru_stime
    return total
