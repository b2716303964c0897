"""Python's garbage-collection pauses as span events: what timing alone cannot prove.

A stop-the-world collection stretches whatever spans were running. The diagnosis can suspect it from
timing (many unrelated spans slow at once), but the runtime knows: `gc.callbacks` reports the start
and end of every collection. `install()` records them (a list append inside the collection, no lock,
no span touched: a span's lock may be held by the very thread the collector interrupted); a span
then gets a `python.gc` event for every pause that overlapped it when it ends: the spans of
`stage()` do so themselves, with their parent (usually the request's SERVER span, still in flight),
and `attach_gc_pauses(span, start_ns)` does it for a span you end yourself.

Young-generation collections shorter than 1 ms are counted but not kept: they are frequent and
harmless, and an event per span for each would cost more than they explain. Pass `min_young_ns=0`
to keep them all.
"""

from __future__ import annotations

import gc
import time
import weakref
from typing import Any

from opentelemetry import trace

GC_EVENT = "python.gc"
MIN_YOUNG_PAUSE_NS = 1_000_000


class GcPauseLog:
    """Pauses as (start_ns, end_ns, generation, collected), newest last; wall-clock ns like spans."""

    def __init__(self, keep: int = 20_000, min_young_ns: int = MIN_YOUNG_PAUSE_NS) -> None:
        # A plain list: append is atomic under the GIL and readers index from the end, so a pause
        # recorded by another thread mid-read never breaks an iteration (a deque would raise).
        self.pauses: list[tuple[int, int, int, int]] = []
        self._keep = keep
        self._min_young_ns = min_young_ns
        self._start = 0
        self.total_ns = [0, 0, 0]  # time in collections by generation, kept or not

    def _callback(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._start = time.time_ns()
            return
        end, generation = time.time_ns(), info["generation"]
        self.total_ns[generation] += end - self._start
        if generation or end - self._start >= self._min_young_ns:
            self.pauses.append((self._start, end, generation, info["collected"]))

    def install(self) -> None:
        if self._callback not in gc.callbacks:
            gc.callbacks.append(self._callback)

    def uninstall(self) -> None:
        if self._callback in gc.callbacks:
            gc.callbacks.remove(self._callback)

    def overlapping(self, start_ns: int, end_ns: int) -> list[tuple[int, int, int, int]]:
        """The pauses that overlapped [start_ns, end_ns], oldest first."""
        if len(self.pauses) > 2 * self._keep:
            del self.pauses[: self._keep]
        found = []
        pauses = self.pauses
        i = len(pauses) - 1
        while i >= 0:  # newest first; stop once pauses end before the span started
            pause = pauses[i]
            if pause[1] < start_ns:
                break
            if pause[0] <= end_ns:
                found.append(pause)
            i -= 1
        return found[::-1]


_log: GcPauseLog | None = None
# the pauses (by start) already on a span, so that a stage and its parent, or two sibling stages, do
# not add the same pause to the same span twice; entries go with their span
_attached: weakref.WeakKeyDictionary[Any, set[int]] = weakref.WeakKeyDictionary()


def install(min_young_ns: int = MIN_YOUNG_PAUSE_NS) -> GcPauseLog:
    """Start recording GC pauses (idempotent). Returns the process's log."""
    global _log
    if _log is None:
        _log = GcPauseLog(min_young_ns=min_young_ns)
    _log.install()
    return _log


def uninstall() -> None:
    global _log
    if _log is not None:
        _log.uninstall()
        _log = None


def installed() -> GcPauseLog | None:
    return _log


def attach_gc_pauses(span: trace.Span, start_ns: int, end_ns: int | None = None) -> int:
    """`python.gc` events on `span` for the pauses in [start_ns, end_ns (now)] (wall clock, ns) that
    it does not carry yet. Returns how many were added; 0 when `install()` was not called."""
    log = _log
    if log is None or not log.pauses or not span.is_recording():
        return 0
    pauses = log.overlapping(start_ns, time.time_ns() if end_ns is None else end_ns)
    if not pauses:
        return 0
    try:
        seen = _attached.setdefault(span, set())
    except TypeError:  # a span type that cannot be weakly referenced: attach without the memory
        seen = set()
    added = 0
    for begin, end, generation, collected in pauses:
        if begin in seen:
            continue
        seen.add(begin)
        span.add_event(
            GC_EVENT,
            {"gc.generation": generation, "gc.duration_ns": end - begin, "gc.collected": collected},
            timestamp=begin,
        )
        added += 1
    return added


def freeze_after_startup() -> None:
    """Collect once, then move every object alive now out of the collector's reach (`gc.freeze`):
    what a service loaded at start-up (the model, the tokenizer, caches) is never traversed again,
    so later full collections are short. Call it once the service is ready to serve."""
    gc.collect()
    gc.freeze()
