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
    "resolve_run",
    "run_version",
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


def resolve_run(conn, run: str | None, *others: str | None) -> str:
    """The run to read on an open connection: `run`, or the store's only run where it is None.
    UnknownRunError where None is given and the store has not exactly one run, or where `run` or
    any of `others` (None skipped) is not in the store."""
    from tailscope.analysis.diagnosis.load import list_runs as _list

    runs = _list(conn)
    if run is None:
        if len(runs) != 1:
            raise UnknownRunError(None, runs)
        run = runs[0]
    for name in (run, *others):
        if name is not None and name not in runs:
            raise UnknownRunError(name, runs)
    return run


def diagnose(
    source, run: str | None = None, seed: int = 0, max_spans: int | None = None, progress=None
) -> Diagnosis:
    """Diagnose one run of a Store (or open connection). `run` None picks the only run. A run of more
    than `max_spans` spans (sample.DEFAULT_MAX_SPANS when None; 0 reads every run whole) is read as a
    sample of time windows, its sampling error in `Diagnosis.sampling`. `progress(fraction, step)`,
    where given, hears of each step (a dashboard's progress bar)."""
    from tailscope.analysis.diagnosis.load import load_frame
    from tailscope.analysis.diagnosis.sample import DEFAULT_MAX_SPANS
    from tailscope.analysis.source import reading

    limit = DEFAULT_MAX_SPANS if max_spans is None else max_spans
    with reading(source) as conn:
        if progress is not None:
            progress(0.0, "reading the run's spans")
        frame = load_frame(conn, resolve_run(conn, run), max_spans=limit)
        return diagnose_frame(frame, seed=seed, progress=progress)


def run_version(source, run: str) -> tuple:
    """What a run's diagnosis depends on besides the code: its spans (count, first and last start in
    ns) and the stage and phase rules in force. A cache of diagnoses keyed by it stays valid while
    other runs are written, and is dropped when the run grows or a rule changes."""
    import hashlib

    from tailscope.analysis.source import reading

    with reading(source) as conn:
        extent = conn.span_table("diagnosis_extent", run)
        rules = repr((conn.stage_rules(), conn.phase_rules())).encode()
    spans = tuple(extent.column(c)[0].as_py() for c in ("Spans", "FirstNs", "LastNs"))
    return (*spans, hashlib.sha256(rules).hexdigest()[:16])
