"""A SIGTERM that lands inside a finaliser (multiprocessing's pool clean-up, a weakref callback) raises
Stopped where Python prints "Exception ignored" and goes on: the command must still end by the signal,
not exit 0 as if it had finished (seen once as tests/test_decode_workers.py's "right after" case)."""

from __future__ import annotations

import signal
import subprocess
import sys

SCRIPT = """
import os, signal, weakref
from tailscope.cli import main as cli

class Held:
    pass

def command(argv=None):
    held = Held()
    weakref.finalize(held, os.kill, os.getpid(), signal.SIGTERM)
    del held  # the finaliser runs here; the Stopped it raises is printed and ignored
    return 0

cli.main = command
cli.entrypoint()
"""


def test_a_sigterm_swallowed_by_a_finaliser_still_ends_the_command_by_it() -> None:
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=60)
    assert "Exception ignored" in done.stderr  # the case: the Stopped did not reach the command
    assert done.returncode == -signal.SIGTERM, done.stderr
    assert "tailscope: stopped by SIGTERM" in done.stderr


def test_a_command_no_signal_reached_exits_with_its_own_code() -> None:
    script = "from tailscope.cli import main as cli\ncli.main = lambda argv=None: 3\ncli.entrypoint()\n"
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 3 and "stopped" not in done.stderr
