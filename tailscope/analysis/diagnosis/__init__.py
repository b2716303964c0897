"""Diagnosis: name the causes of a run's latency tail from trace timing, with evidence and advice.

    frame = load_frame(conn, run)        # one SQL read -> numpy columns + request structure
    diagnosis = diagnose_frame(frame)    # every detector (one module per pattern), sorted findings

`diagnose(source, run)` does both with a short-lived reader. Detectors work from timing (durations,
overlaps, arrival times, request indices) and canonical stages, never from span names; runtime
signals (GC events) only confirm. See ARCHITECTURE.md "Diagnosis" for the statistics and how the
confidences are calibrated.
"""

from __future__ import annotations

from tailscope.analysis.diagnosis.frame import TraceFrame, build_frame
from tailscope.analysis.diagnosis.model import Finding
from tailscope.analysis.diagnosis.runner import DETECTORS, Diagnosis, diagnose_frame

__all__ = [
    "DETECTORS",
    "Diagnosis",
    "Finding",
    "TraceFrame",
    "UnknownRunError",
    "build_frame",
    "diagnose",
    "diagnose_frame",
    "list_runs",
]


class UnknownRunError(LookupError):
    """The run label is not in the store; `available` lists the ones that are."""

    def __init__(self, run: str | None, available: list[str]) -> None:
        super().__init__(f"unknown run {run!r}; available: {', '.join(available) or '(none)'}")
        self.run = run
        self.available = available


def list_runs(source) -> list[str]:
    from tailscope.analysis.diagnosis.load import list_runs as _list
    from tailscope.analysis.source import reading

    with reading(source) as conn:
        return _list(conn)


def diagnose(source, run: str | None = None, seed: int = 0) -> Diagnosis:
    """Diagnose one run of a Store (or open connection). `run` None picks the only run."""
    from tailscope.analysis.diagnosis.load import list_runs as _list
    from tailscope.analysis.diagnosis.load import load_frame
    from tailscope.analysis.source import reading

    with reading(source) as conn:
        runs = _list(conn)
        if run is None:
            if len(runs) != 1:
                raise UnknownRunError(None, runs)
            run = runs[0]
        if run not in runs:
            raise UnknownRunError(run, runs)
        frame = load_frame(conn, run)
        return diagnose_frame(frame, seed=seed)
