"""Two fixes at once: levers composed into one (a run with two causes answers to both fixes)."""

from __future__ import annotations

import itertools
import math

from tailscope.analysis.whatif.levers import Lever


def _first(values):
    return next((v for v in values if v is not None), None)


def combined(levers: list[Lever]) -> Lever:
    """The levers' edits at once (a span two set takes the shorter duration, cuts add up), the queues
    replayed where any asks, with each lever's arrival shifts and the most servers any adds."""
    edit = levers[0].edit
    for lever in levers[1:]:
        edit = edit.merged(lever.edit)
    kinds = {lever.kind for lever in levers}
    return Lever(
        "+".join(lever.key for lever in levers),
        " and ".join(lever.label for lever in levers),
        kinds.pop() if len(kinds) == 1 else "software",
        "the fixes' changes together: " + "; ".join(lever.model for lever in levers),
        edit,
        pattern="+".join(lever.pattern or "?" for lever in levers),
        requeue=any(lever.requeue for lever in levers),
        scale=math.prod(lever.scale for lever in levers),
        window_ns=_first(lever.window_ns for lever in levers),
        extra_servers=max(lever.extra_servers for lever in levers),
        arrival_shift=_first(lever.arrival_shift for lever in levers),
        handler_shift=_first(lever.handler_shift for lever in levers),
        extra_slots=max(lever.extra_slots for lever in levers),
        handler_pools=_first(lever.handler_pools for lever in levers),
        handlers_set=any(lever.handlers_set for lever in levers),
    )


def combinations(levers: list[Lever], combine: list[tuple[str, ...]]) -> list[Lever]:
    """For each tuple of key prefixes: every choice of one lever per prefix, composed; a prefix that
    matches no lever of the run is left out (the fixes the run has levers for), and where one is
    left, it is among the levers already. A prefix 'a|b' matches either ('a@': as 'a', the caller
    judges where it acts)."""
    out = []
    for prefixes in combine:
        choices = [c for c in ([lv for lv in levers if _matches(lv.key, p)] for p in prefixes) if c]
        if len(choices) >= 2:
            out += [combined(list(pick)) for pick in itertools.product(*choices)]
    return out


def _matches(key: str, prefix: str) -> bool:
    return key.startswith(tuple(alt.rstrip("@") for alt in prefix.split("|")))
