"""Stop signals held off around the moments that must not be cut: a fork, a commit.

A stop signal (SIGTERM, SIGHUP, SIGINT: the CLI's handlers raise in the main thread) that lands
inside DuckDB's COMMIT is turned by DuckDB into "Query interrupted" after the commit may already
have reached the file, and the rollback that follows finds no transaction (issue 30: a traceback and
exit 1 for a file that was in fact stored). `deferred_stop_signals` lets such a signal only be
noted while the block runs and acts on it (the handler it would have run) right after; `signals_held`
blocks the signals at the thread's mask instead, for a fork (the child must not run the parent's
handlers before it resets them).
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from types import FrameType

STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)


@contextlib.contextmanager
def deferred_stop_signals() -> Iterator[None]:
    """Run the block with the stop signals only noted; the first one noted is raised again after it
    (in the main thread; elsewhere signals are not delivered to Python, and this does nothing)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    noted: list[int] = []

    def note(signum: int, frame: FrameType | None) -> None:
        noted.append(signum)

    previous = {signum: signal.signal(signum, note) for signum in STOP_SIGNALS}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        if noted:
            signal.raise_signal(noted[0])  # what it would have done: the CLI's handler raises here


@contextlib.contextmanager
def signals_held() -> Iterator[None]:
    """Block the stop signals in this thread for the block's duration (delivered at its end)."""
    if not hasattr(signal, "pthread_sigmask"):
        yield
        return
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, set(STOP_SIGNALS))
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)
