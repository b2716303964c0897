"""The populations a run is diagnosed as: its requests as they are, or split (units.py: queue
consumers' work; client_leg.py: an end user's requests and the service's own below a relay; streams.py:
streamed requests from their input's end). The first that applies, in that order."""

from __future__ import annotations

from tailscope.analysis.diagnosis import client_leg, streams, units
from tailscope.analysis.diagnosis.frame import TraceFrame


def split(frame: TraceFrame) -> tuple[list[units.Population] | None, str]:
    """(the populations, why: "async", "client" or "stream"); (None, "") for the run's requests as
    they are."""
    for kind, find in (("async", units.populations), ("client", client_leg.populations),
                       ("stream", streams.populations)):
        groups = find(frame)
        if groups is not None:
            return groups, kind
    return None, ""
