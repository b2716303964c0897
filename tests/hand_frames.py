"""Trace frames built by hand for diagnosis tests: a few rows, exact timings, no store."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from tailscope.analysis.diagnosis.frame import SPAN_KINDS, TraceFrame, build_frame
from tailscope.analysis.whatif.levers import Inputs
from tailscope.analysis.whatif.retime import layout

MS = 1_000_000


def as_ms(values) -> list[float]:
    """Nanosecond values as milliseconds, rounded to the µs (for comparing re-timed durations)."""
    return [round(float(v) / MS, 3) for v in values]


def hand_frame(rows: list[tuple], instances: Sequence[str] = ("a", "b")) -> TraceFrame:
    """rows: (trace, parent_index, name, kind, instance, start_ms, dur_ms); one service."""
    names = sorted({r[2] for r in rows})
    cols = list(zip(*rows, strict=True))
    return build_frame(
        TraceFrame(
            run="hand",
            trace=np.array(cols[0]),
            parent=np.array(cols[1]),
            name=np.array([names.index(n) for n in cols[2]]),
            names=names,
            kind=np.array([SPAN_KINDS.index(k) for k in cols[3]]),
            service=np.zeros(len(rows), np.int64),
            services=["svc"],
            instance=np.array(cols[4]),
            instances=list(instances),
            start=(np.array(cols[5]) * MS).astype(np.int64),
            dur=(np.array(cols[6]) * MS).astype(np.int64),
            stage=np.full(len(rows), -1),
        )
    )


def lever_inputs(frame: TraceFrame) -> Inputs:
    """A lever's inputs for a hand-built frame: its own stages, no queue model, no arrivals, no stalls."""
    return Inputs(frame, layout(frame), frame.stage, None, [], 0, None)
