"""Light tracing: one span per request, its stages' times carried as attributes of that span.

A span per stage costs the OpenTelemetry SDK ~30 µs of CPU each (bench/bench_instrument.py): ten per
request double the CPU of a GPU service's request path. In light mode `stage()`, `record_span()`,
`record_queue_wait()` and traced locks make no span; inside a `request(span)` block they add their
time to the request's tally, and when the block ends the tally lands on the request's span:

    tailscope.stage_us.<stage>       the stage's own time (integer µs; time of nested stages of
                                     another stage taken out, as a span per stage's self time would be)
    tailscope.stage_end_us.<stage>   where the stage's last piece ended, µs after the span started

The default phase rules (tailscope.analysis.phases, framework "tailscope light") split the span back
into one synthetic child per stage, ending at its end offset, so the waterfall, the percentiles and
the diagnosis see the same stages as from a span per stage. What is lost: the stage spans' own
attributes and events (set_attribute on a stage lands on the request's span instead), each piece of
a stage that ran in several pieces (they become one, ending where the last ended), and the stage
spans' error status (the request's span keeps its own).

    ts.set_mode("light")
    with tracer.start_as_current_span("POST /predict") as root, ts.request(root):
        with ts.stage("feature_hydration"): ...

Outside a `request` block a stage in light mode is a span as in "spans" mode: nothing is lost. A
CLIENT stage that is current (an outgoing call that propagates its context: `kind=SpanKind.CLIENT`,
the default `current=True`) stays a span in light mode too, so that the called service's spans hang
under it; the phase rules fill only what no child span covers, so its time is counted once, from the
span. A CLIENT stage with `current=False` (a call to something untraced: a feature store) is tallied,
so the stage around it keeps its slow path (a cache miss) inside one duration.
"""

from __future__ import annotations

import contextvars
import time
from typing import Any

from opentelemetry import trace
from opentelemetry.util.types import AttributeValue

# "both": a span per stage and the tally on the request's span, from the same requests (costs the
# sum; for checking that the two representations agree: bench/bench_pipeline.py both)
MODES = ("spans", "light", "both")
STAGE_US = "tailscope.stage_us."
STAGE_END_US = "tailscope.stage_end_us."
LIGHT_FRAMEWORK = "tailscope light"

_mode = "spans"


def set_mode(mode: str) -> None:
    """'spans' (a span per stage, the default) or 'light' (one span per request)."""
    global _mode
    if mode not in MODES:
        raise ValueError(f"unknown tracing mode {mode!r}: one of {', '.join(MODES)}")
    _mode = mode


def mode() -> str:
    return _mode


def spans_too() -> bool:
    """Whether stages also make their spans (modes "spans" and "both")."""
    return _mode != "light"


class StageTimes:
    """One request's tally: each stage's own time and where its last piece ended (ns)."""

    __slots__ = ("_view", "ends", "extra", "own", "span", "start_ns")

    def __init__(self, span: trace.Span, start_ns: int) -> None:
        self.span, self.start_ns = span, start_ns
        self.own: dict[str, int] = {}
        self.ends: dict[str, int] = {}
        self.extra: dict[str, AttributeValue] = {}  # the stages' own attributes, for the request's span
        self._view: LightSpan | None = None

    def view(self) -> LightSpan:
        """What a stage yields: a span-like handle whose attributes go onto the request's span (with
        the stage times, in one call when the request ends: an SDK set_attribute costs ~3 µs)."""
        if self._view is None:
            self._view = LightSpan(self)
        return self._view

    def add(self, stage: str, start_ns: int, end_ns: int, enclosing: str | None) -> None:
        took = end_ns - start_ns
        self.own[stage] = self.own.get(stage, 0) + took
        if end_ns > self.ends.get(stage, 0):
            self.ends[stage] = end_ns
        if enclosing is not None:  # its time is not the enclosing stage's own (the same stage: net 0,
            # as a child span of the parent's stage adds nothing to the stage's total)
            self.own[enclosing] = self.own.get(enclosing, 0) - took

    def attributes(self) -> dict[str, AttributeValue]:
        out = self.extra
        start = self.start_ns
        for stage, own in self.own.items():
            if own >= 500:  # to the nearest µs (truncating would bias a 15 µs stage by 3 %)
                out[STAGE_US + stage] = (own + 500) // 1000
                out[STAGE_END_US + stage] = (self.ends[stage] - start + 500) // 1000
        return out


# (the request's tally, the stage open in this context or None)
_OPEN: contextvars.ContextVar[tuple[StageTimes, str | None] | None] = contextvars.ContextVar(
    "tailscope_light", default=None
)


def open_tally() -> tuple[StageTimes, str | None] | None:
    """The current request's tally and open stage, in light mode inside a `request` block; else None."""
    return _OPEN.get() if _mode != "spans" else None


def enter_stage(stage: str) -> tuple[contextvars.Token, StageTimes, str | None] | None:
    """Open `stage` in the current request's tally; None when there is none (make a span instead)."""
    found = open_tally()
    if found is None:
        return None
    times, enclosing = found
    return _OPEN.set((times, stage)), times, enclosing


def reset(token: contextvars.Token) -> None:
    _OPEN.reset(token)


def record(stage: str | None, start_ns: int, end_ns: int) -> bool:
    """A measured interval into the current tally (stage None: the enclosing stage's); False when
    there is no tally (make a span instead)."""
    found = open_tally()
    if found is None:
        return False
    times, enclosing = found
    named = stage or enclosing
    if named is not None:
        times.add(named, start_ns, end_ns, enclosing)
    return True


def tally_only(*intervals: tuple[str, int, int]) -> bool:
    """In light mode inside a request: (stage, start_ns, end_ns) intervals measured elsewhere into
    the tally, and True: the caller makes no span and builds none of its attributes or links (a
    batch's queue wait and forward pass, per request). Else False, nothing recorded."""
    found = _OPEN.get() if _mode == "light" else None
    if found is None:
        return False
    times, enclosing = found
    for stage, start_ns, end_ns in intervals:
        times.add(stage, start_ns, end_ns, enclosing)
    return True


class LightSpan(trace.NonRecordingSpan):
    """What a stage yields in light mode: its attributes go onto the request's span."""

    def __init__(self, times: StageTimes) -> None:
        super().__init__(times.span.get_span_context())
        self._times = times

    def set_attribute(self, key: str, value: Any) -> None:
        self._times.extra[key] = value

    def set_attributes(self, attributes: Any) -> None:
        self._times.extra.update(attributes)

    def is_recording(self) -> bool:
        return True


class request:
    """Around one request's handling: in light mode the stages inside tally their times, written on
    `span` (the request's span, started by the caller) when the block ends. In "spans" mode it does
    nothing. Enter it with the request's span current, before any stage."""

    __slots__ = ("_span", "_start_ns", "_token", "times")

    def __init__(self, span: trace.Span, start_ns: int | None = None) -> None:
        self._span, self._start_ns = span, start_ns
        self._token: contextvars.Token | None = None
        self.times: StageTimes | None = None

    @property
    def span(self) -> trace.Span:
        """Where the request's own attributes go: in light mode the tally's handle, so that they reach
        the request's span with the stage times in one call when the block ends (an SDK
        `set_attribute` costs ~3 µs); else the request's span. Its status goes on the span itself."""
        return self.times.view() if self.times is not None else self._span

    def __enter__(self) -> request:
        if _mode != "spans" and self._span.is_recording():
            start = self._start_ns or getattr(self._span, "start_time", None) or time.time_ns()
            self.times = StageTimes(self._span, start)
            self._token = _OPEN.set((self.times, None))
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._token is None or self.times is None:
            return
        _OPEN.reset(self._token)
        self._token = None
        self._span.set_attributes(self.times.attributes())

    async def __aenter__(self) -> request:
        return self.__enter__()

    async def __aexit__(self, *exc: Any) -> None:
        self.__exit__(*exc)
