"""The one error a decoder raises for bad input: it names the file and where in it."""

from __future__ import annotations

from collections.abc import Callable


class DecodeError(ValueError):
    """Malformed or hostile input. `str()` is the one-line message users see.

    position: where the problem is, e.g. "line 12", "byte 3456", "message 3 at byte 80",
    "trace 2 span 5". message: what is wrong, in plain words.
    """

    def __init__(self, source: str, position: str, message: str) -> None:
        super().__init__(f"{source}: {position}: {message}")
        self.source = source
        self.position = position
        self.message = message


def report(error: DecodeError, on_bad: Callable[[DecodeError], None] | None) -> None:
    """Strict mode (no on_bad): raise. Otherwise hand the error over and let the caller skip on."""
    if on_bad is None:
        raise error from None
    on_bad(error)
