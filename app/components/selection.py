"""The requests brushed on the latency heatmap, handed from that view to Tail vs body and Traces.

A brushed region is a plotly box selection on a chart whose x axis is time and whose y axis is
log10(latency in ms). It is kept in session_state together with the filter it was drawn under, so a
later filter change makes it stale instead of silently wrong.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import pandas as pd
import streamlit as st

from tailscope.analysis import Filter, Rect

KEY = "tailscope_selection"


@dataclass(frozen=True)
class Selection:
    rect: Rect
    stage: str | None  # None: end-to-end latency
    flt: Filter

    def describe(self) -> str:
        what = "end-to-end latency" if self.stage is None else f"{self.stage} time"
        return (
            f"{self.rect.start:%H:%M:%S.%f}"[:-3] + f"–{self.rect.end:%H:%M:%S.%f}"[:-3] + f" UTC, {what} "
            f"{self.rect.low_ms:,.1f}–{self.rect.high_ms:,.1f} ms"
        )


def _time(value: Any) -> datetime:
    stamp = pd.to_datetime(value, utc=True) if not isinstance(value, (int, float)) else None
    if stamp is None:  # plotly sends epoch milliseconds for numeric date ranges
        stamp = pd.to_datetime(value, unit="ms", utc=True)
    return stamp.tz_convert(None).to_pydatetime()


def rect_from_event(selection: Any) -> Rect | None:
    """A Rect from a plotly selection state (box range, else the extent of the selected points)."""
    if not selection:
        return None
    boxes = selection.get("box") or []
    if boxes:
        box = boxes[-1]
        xs, ys = list(box.get("x") or []), list(box.get("y") or [])
    else:
        points = selection.get("points") or []
        xs = [p.get("x") for p in points if p.get("x") is not None]
        ys = [p.get("y") for p in points if p.get("y") is not None]
    if len(xs) < 2 or len(ys) < 2:
        return None
    times = sorted(_time(x) for x in xs)
    logs = sorted(float(y) for y in ys)
    start, end = times[0], times[-1]
    low, high = 10 ** logs[0], 10 ** logs[-1]
    if start == end or not math.isfinite(low) or not math.isfinite(high) or high <= low:
        return None
    return Rect(start=start, end=end, low_ms=low, high_ms=high)


def save(rect: Rect, stage: str | None, flt: Filter) -> None:
    st.session_state[KEY] = Selection(rect, stage, flt)


def current(flt: Filter) -> Selection | None:
    """The brushed selection, if it was drawn under the filter in force now."""
    chosen = st.session_state.get(KEY)
    if isinstance(chosen, Selection) and chosen.flt == flt:
        return chosen
    return None


def clear() -> None:
    st.session_state.pop(KEY, None)
