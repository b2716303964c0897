"""How every command stops: SIGINT, SIGTERM and SIGHUP end it the same way, children included.

`install()` (called by the entry point) makes SIGTERM and SIGHUP raise `Stopped` in the main thread,
a KeyboardInterrupt like Ctrl-C's, so one `try/finally` or `except KeyboardInterrupt` per command
stops its children whatever sent the signal (a terminal, systemd, `docker stop`, `timeout`, a closed
SSH session). Once the command has cleaned up, the process ends by the signal it got, as a program
killed by it would (`exit_by_signal`): a shell sees `$?` = 128 + the signal's number (130, 143, 129)
and a supervisor sees a clean stop. Children started with `die_with_parent` also get SIGTERM if
the command itself is killed outright (kill -9), on Linux.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
from types import FrameType
from typing import NoReturn

_PR_SET_PDEATHSIG = 1


class Stopped(KeyboardInterrupt):
    """SIGTERM or SIGHUP, raised in the main thread like Ctrl-C's KeyboardInterrupt."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


_received: list[int] = []  # every signal raised as Stopped in this process, in order


def _raise_stopped(signum: int, frame: FrameType | None) -> None:
    _received.append(signum)
    raise Stopped(signum)


def received() -> int | None:
    """The first SIGTERM / SIGHUP raised as Stopped in this process, also where that Stopped was
    swallowed: a signal landing inside a finaliser (multiprocessing's, a weakref callback) is printed
    as "Exception ignored" and the command would otherwise go on to a normal exit."""
    return _received[0] if _received else None


def install() -> None:
    """SIGTERM and SIGHUP raise Stopped from now on (where they still have their default action)."""
    for signum in (signal.SIGTERM, signal.SIGHUP):
        if signal.getsignal(signum) is signal.SIG_DFL:
            signal.signal(signum, _raise_stopped)


def signal_of(interrupt: KeyboardInterrupt) -> int:
    """The signal behind a KeyboardInterrupt: Stopped's own, else SIGINT (Ctrl-C)."""
    return getattr(interrupt, "signum", signal.SIGINT)


def child_signal(signum: int) -> int:
    """What to forward to a child when we got `signum`: Ctrl-C stays SIGINT, the rest is SIGTERM
    (a child need not handle SIGHUP the way we do)."""
    return signal.SIGINT if signum == signal.SIGINT else signal.SIGTERM


def die_with_parent() -> None:
    """preexec_fn for children: the kernel sends them SIGTERM if this process dies (Linux only)."""
    if sys.platform == "linux":
        with contextlib.suppress(Exception):
            ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


def exit_by_signal(signum: int) -> NoReturn:
    """End this process by `signum` with its default action (after flushing our output)."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)
    sys.exit(128 + signum)  # only if the signal is blocked
