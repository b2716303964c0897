"""Run every detector on one run and return its findings, most confident first."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from tailscope.analysis.diagnosis import (
    cache_miss,
    cold_start,
    compute_bound,
    gc_pause,
    lock_contention,
    network,
    queueing,
    slow_dependency,
)
from tailscope.analysis.diagnosis.frame import TraceFrame
from tailscope.analysis.diagnosis.model import Context, Finding

# Order matters only for notes: cache_miss marks bimodal names before cold_start reads them.
DETECTORS = (
    cache_miss,
    cold_start,
    gc_pause,
    lock_contention,
    queueing,
    slow_dependency,
    network,
    compute_bound,
)
MIN_CONFIDENCE = 0.05


@dataclass
class Diagnosis:
    run: str
    requests: int
    spans: int
    findings: list[Finding]
    seconds: float = 0.0
    errors: dict[str, str] = field(default_factory=dict)
    reason: str | None = None

    def to_dict(self, with_chart: bool = False) -> dict[str, Any]:
        out: dict[str, Any] = {
            "run": self.run,
            "requests": self.requests,
            "findings": [fd.to_dict(with_chart) for fd in self.findings],
        }
        if self.reason:
            out["reason"] = self.reason
        if self.errors:
            out["errors"] = self.errors
        return out


def diagnose_frame(frame: TraceFrame, seed: int = 0) -> Diagnosis:
    """All detectors over a built frame. A detector that fails is reported in `errors`, not raised."""
    started = time.perf_counter()
    n_req = len(frame.requests) if frame.requests is not None else 0
    if n_req == 0:
        return Diagnosis(frame.run, 0, len(frame), [], reason="no request root spans in this run")
    ctx = Context(frame, seed=seed)
    findings: list[Finding] = []
    errors: dict[str, str] = {}
    for detector in DETECTORS:
        try:
            findings.extend(detector.detect(ctx))
        except Exception as error:  # a detector bug must not hide the others' findings
            errors[detector.PATTERN] = f"{type(error).__name__}: {error}"
    findings = [fd for fd in findings if fd.confidence >= MIN_CONFIDENCE]
    findings.sort(key=lambda fd: -fd.confidence)
    reason = None if n_req >= 50 else f"only {n_req} requests: too few to diagnose (50 needed)"
    return Diagnosis(frame.run, n_req, len(frame), findings, time.perf_counter() - started, errors, reason)
