"""The one error a decoder raises for bad input: it names the file and where in it."""

from __future__ import annotations


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
