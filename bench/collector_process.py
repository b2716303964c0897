"""`tailscope collect` as a subprocess on a free port, for the receiver benchmarks."""

from __future__ import annotations

import re
import subprocess
import sys
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LISTENING = re.compile(r"listening on (http://\S+/v1/traces)")


def start_collector(
    db_path: Path, run: str, *options: str, echo: bool = False
) -> tuple[subprocess.Popen[str], str, list[str]]:
    """The collector, its OTLP/HTTP URL ("" if it did not start within 60 s) and its stderr lines so far
    (kept up to date by a reader thread; `echo` also copies them to our stderr)."""
    command = [
        sys.executable, "-c", "from tailscope.cli.main import entrypoint; entrypoint()",
        "collect", "--db", str(db_path), "--port", "0", "--run", run, *options,
    ]  # fmt: skip
    collector = subprocess.Popen(command, cwd=ROOT, stderr=subprocess.PIPE, text=True)
    lines: list[str] = []
    ready = threading.Event()
    url = [""]

    def read() -> None:
        assert collector.stderr is not None
        for line in collector.stderr:
            lines.append(line.rstrip())
            if echo:
                print(line.rstrip(), file=sys.stderr, flush=True)
            match = LISTENING.search(line)
            if match:
                url[0] = match.group(1)
                ready.set()
        ready.set()

    threading.Thread(target=read, daemon=True).start()
    ready.wait(60)
    return collector, url[0], lines
