"""Run `tailscope collect` as a real process on a free loopback port, for the receiver's tests."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx

_LISTENING = re.compile(r"listening on (http://\S+/v1/traces)")


class Collector:
    """A `tailscope collect --port 0` subprocess; `url` once it listens, `stop()` sends SIGTERM."""

    def __init__(self, db_path: Path, run: str = "live", *extra: str, env: dict[str, str] | None = None):
        self.db_path = db_path
        self.run = run
        command = [
            sys.executable,
            "-c",
            "from tailscope.cli.main import entrypoint; entrypoint()",
            "collect",
            "--db",
            str(db_path),
            "--port",
            "0",
            "--run",
            run,
            "--stats-interval",
            "0.5",
            *extra,
        ]
        self.process = subprocess.Popen(
            command,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env={**os.environ, **(env or {})},
        )
        self.lines: list[str] = []
        self._ready = threading.Event()
        self.url = ""
        threading.Thread(target=self._read, daemon=True).start()
        if not self._ready.wait(30) or not self.url:
            self.process.kill()
            raise RuntimeError("collect did not start:\n" + "\n".join(self.lines))

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.append(line.rstrip("\n"))
            match = _LISTENING.search(line)
            if match:
                self.url = match.group(1)
                self._ready.set()
        self._ready.set()

    @property
    def pid(self) -> int:
        return self.process.pid

    def post(self, body: bytes, content_type: str, **headers: str) -> httpx.Response:
        return httpx.post(
            self.url, content=body, headers={"content-type": content_type, **headers}, timeout=30
        )

    def peak_rss_bytes(self) -> int:
        """The collector's peak resident memory (VmHWM) so far."""
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
        return 0

    def stop(self, timeout: float = 60) -> int:
        """SIGTERM, then wait for the exit code."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout)
        finally:
            time.sleep(0.05)  # let the reader thread collect the last lines

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)

    def output(self) -> str:
        return "\n".join(self.lines)
