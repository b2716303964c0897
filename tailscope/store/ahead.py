"""Reads started ahead of need (Reader.ahead): a read the caller will want soon runs on a second reader
of the same store in a background thread, where the engine can run two statements at once (DuckDB: a
cursor of the connection; the engine works on it while the caller's thread works in numpy), or waits
for the first ask and then runs on the caller's reader (an engine that reads one statement at a time).
Either way `Pending.get()` gives the read's answer or raises what the read raised."""

from __future__ import annotations

import threading
from collections.abc import Callable
from contextlib import suppress
from typing import Any, Generic, TypeVar

T = TypeVar("T")


class Pending(Generic[T]):
    """The answer of one read: started now in a thread (`start`), or deferred to the first `get`."""

    def __init__(
        self, work: Callable[[], T], cleanup: Callable[[], Any] | None = None, start: bool = False
    ) -> None:
        self._work, self._cleanup = work, cleanup
        self._outcome: tuple[bool, Any] | None = None
        self._thread: threading.Thread | None = None
        if start:
            self._thread = threading.Thread(target=self._run, name="tailscope-read-ahead", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        try:
            self._outcome = (True, self._work())
        except BaseException as error:  # handed to the thread that asks (get)
            self._outcome = (False, error)
        finally:
            if self._cleanup is not None:
                with suppress(Exception):
                    self._cleanup()

    def wait(self) -> None:
        """Until a started read is done (its reader closed); a deferred one is not run."""
        if self._thread is not None:
            self._thread.join()

    def get(self) -> T:
        if self._thread is not None:
            self._thread.join()
        elif self._outcome is None:
            self._run()
        assert self._outcome is not None
        ok, value = self._outcome
        if not ok:
            raise value
        return value


def ahead(reader: Any, read: Callable[[Any], T]) -> Pending[T]:
    """`read(a reader)` started now on a second reader of `reader`'s store where its engine has one
    (Reader.ahead); else run on `reader` itself when first asked (a reader without `ahead`: a test's
    wrapper)."""
    start = getattr(reader, "ahead", None)
    return start(read) if start is not None else Pending(lambda: read(reader))
