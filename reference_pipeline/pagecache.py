"""Make a file cold: the state of a data file on a node that has just started."""

from __future__ import annotations

import os
from pathlib import Path


def drop_page_cache(path: Path) -> None:
    """Write the file's dirty pages back, then ask the kernel to forget its cached pages (Linux;
    a no-op where posix_fadvise is missing). Pages still mapped by a process stay cached."""
    with open(path, "rb+") as f:
        os.fsync(f.fileno())
        if hasattr(os, "posix_fadvise"):
            os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
