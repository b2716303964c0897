"""`stage()`: one child span per stage of a request, labelled with its canonical stage.

    with stage("feature_hydration", cache_hit=hit):        # a block
        ...
    @stage("preprocessing", "tokenize")                    # every call of a function, sync or async
    def tokenize(text): ...
    async with stage("downstream", "enrich", kind=SpanKind.CLIENT): ...

The span carries `tailscope.stage` (so tailscope maps it whatever its name) and the OpenTelemetry
attributes that fit (`cache.hit`, `db.system.name`). It is a child of the current span (the request's
SERVER span made by the framework's instrumentation, or an enclosing stage) and becomes the current
span inside the block, so nested stages and outgoing calls are parented on it; `current=False` saves
a few microseconds for a leaf that has no children. An exception that escapes the block is recorded
on the span (an `exception` event and an ERROR status) and propagates unchanged. GC pauses that
overlapped the span are added to it and its parent as `python.gc` events (see gc_pauses).

When tracing is off (no SDK TracerProvider set) a stage does nothing beyond one check.
"""

from __future__ import annotations

import functools
import inspect
import time
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import SpanKind, Status, StatusCode

from tailscope.instrument import _tracer, gc_pauses, light
from tailscope.vocabulary import STAGES

F = TypeVar("F", bound=Callable[..., Any])
STAGE_ATTRIBUTE = "tailscope.stage"
_KNOWN = frozenset(STAGES)


def stage_attributes(
    stage_name: str,
    *,
    cache_hit: bool | None = None,
    db_system: str | None = None,
    attributes: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The attributes of a stage's span; raises ValueError for a stage tailscope does not know."""
    if stage_name not in STAGES:
        raise ValueError(f"unknown stage {stage_name!r}: one of {', '.join(STAGES)}")
    attrs: dict[str, Any] = {STAGE_ATTRIBUTE: stage_name}
    if cache_hit is not None:
        attrs["cache.hit"] = bool(cache_hit)
    if db_system is not None:
        attrs["db.system.name"] = db_system
    if attributes:
        attrs.update(attributes)
    return attrs


class stage:
    """A stage's span, as a context manager (sync or async) or a decorator. One `with` per object;
    as a decorator each call gets its own span."""

    __slots__ = (
        "_attributes", "_cache_hit", "_current", "_db_system", "_kind", "_light", "_name", "_parent",
        "_span", "_stage", "_start", "_token",
    )  # fmt: skip

    def __init__(
        self,
        stage_name: str,
        span_name: str | None = None,
        *,
        cache_hit: bool | None = None,
        db_system: str | None = None,
        attributes: Mapping[str, Any] | None = None,
        kind: SpanKind = SpanKind.INTERNAL,
        current: bool = True,
    ) -> None:
        if stage_name not in _KNOWN:
            stage_attributes(stage_name)  # raises, naming the stages there are
        # the attributes are built on entry, only when tracing is on
        self._stage, self._cache_hit, self._db_system = stage_name, cache_hit, db_system
        self._attributes = attributes
        self._name = span_name or stage_name
        self._kind, self._current = kind, current
        self._span: trace.Span = trace.INVALID_SPAN
        self._parent: trace.Span = trace.INVALID_SPAN
        self._token: object | None = None
        self._light: tuple | None = None
        self._start = 0

    # ------------------------------------------------------------------ context manager
    def __enter__(self) -> trace.Span:
        tracer = _tracer.tracer()
        if tracer is None:
            return trace.INVALID_SPAN
        # light mode, inside a request: its tally, not a span; a current CLIENT stage (a remote call
        # that propagates its context) stays a span, for the called service's spans to hang under
        remote = self._kind is SpanKind.CLIENT and self._current
        self._light = None if remote else light.enter_stage(self._stage)
        self._start = time.time_ns()
        if self._light is not None and not light.spans_too():
            return self._light[1].view()
        self._parent = trace.get_current_span()
        attrs = stage_attributes(
            self._stage, cache_hit=self._cache_hit, db_system=self._db_system, attributes=self._attributes
        )
        span = tracer.start_span(self._name, kind=self._kind, attributes=attrs, start_time=self._start)
        self._span = span
        if self._current:
            self._token = otel_context.attach(trace.set_span_in_context(span))
        return span

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        if self._light is not None:
            token, times, enclosing = self._light
            light.reset(token)
            times.add(self._stage, self._start, time.time_ns(), enclosing)
            self._light = None
        span = self._span
        if span is trace.INVALID_SPAN:
            return
        if self._token is not None:
            otel_context.detach(self._token)
            self._token = None
        if isinstance(exc, Exception):
            span.record_exception(exc)
            span.set_status(Status(StatusCode.ERROR, f"{type(exc).__name__}: {exc}"))
        if gc_pauses.installed() is not None:
            gc_pauses.attach_gc_pauses(span, self._start)
            gc_pauses.attach_gc_pauses(self._parent, self._start)  # the request's span sees them too
        span.end()
        self._span = self._parent = trace.INVALID_SPAN

    async def __aenter__(self) -> trace.Span:
        return self.__enter__()

    async def __aexit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        self.__exit__(exc_type, exc, tb)

    # ------------------------------------------------------------------ decorator
    def _fresh(self) -> stage:
        copy = object.__new__(stage)
        copy._stage, copy._cache_hit, copy._db_system = self._stage, self._cache_hit, self._db_system
        copy._attributes, copy._name, copy._kind, copy._current = (
            self._attributes,
            self._name,
            self._kind,
            self._current,
        )
        copy._span = copy._parent = trace.INVALID_SPAN
        copy._token, copy._start, copy._light = None, 0, None
        return copy

    def __call__(self, func: F) -> F:
        if inspect.iscoroutinefunction(func):

            @functools.wraps(func)
            async def run_async(*args: Any, **kwargs: Any) -> Any:
                with self._fresh():
                    return await func(*args, **kwargs)

            return run_async  # type: ignore[return-value]

        @functools.wraps(func)
        def run(*args: Any, **kwargs: Any) -> Any:
            with self._fresh():
                return func(*args, **kwargs)

        return run  # type: ignore[return-value]


def record_span(
    stage_name: str | None,
    span_name: str,
    start_ns: int,
    end_ns: int,
    attributes: Mapping[str, Any] | None = None,
    links: list[trace.Link] | None = None,
) -> None:
    """A span with times measured elsewhere (a batch's forward pass, run by another thread; a lock
    wait, written after release), as a child of the current span. `stage_name` None leaves the
    stage to the mapping (a child takes its parent's)."""
    tracer = _tracer.tracer()
    if tracer is None or (light.record(stage_name, start_ns, end_ns) and not light.spans_too()):
        return
    attrs = (
        dict(attributes or {}) if stage_name is None else stage_attributes(stage_name, attributes=attributes)
    )
    tracer.start_span(span_name, attributes=attrs, start_time=start_ns, links=links).end(end_time=end_ns)
