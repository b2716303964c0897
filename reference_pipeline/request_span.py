"""Light mode's request span without the SDK's span machinery: the pipeline's cheap path.

In light mode a request makes one span, its SERVER span, which carries every stage's time
(tailscope.instrument.light). Made by the SDK it cost ~18 µs to start (sampler, ids, a lock,
BoundedAttributes, processors' on_start), ~0.3 µs to clean each of its ~25 attributes and a copy
into a ReadableSpan at its end: on a front end whose untraced request costs ~0.4 ms of CPU, several
per cent. `RequestTracer.start_as_current_span` makes light mode's SERVER spans as a `RequestSpan`
instead: its context from the parent (or fresh ids from the SDK tracer's generator), attributes in a
plain dict, events and status as the SDK keeps them, and at its end one ReadableSpan handed to the
provider's span processor (sampling, batching and export are the same as for SDK spans). Every other
span, and every span outside light mode, goes to the SDK tracer it wraps.

The values it is given are set as they are (the SDK would drop None and copy sequences: this does
the first); the pipeline sets ints, strings and bools.
"""

from __future__ import annotations

import traceback
from collections.abc import Mapping, Sequence
from time import time_ns
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.sdk.trace import Tracer as SdkTracer
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode, TraceFlags

from tailscope.instrument import light

_SAMPLED = TraceFlags(TraceFlags.SAMPLED)
_UNSET = Status(StatusCode.UNSET)


class RequestSpan(trace.Span):
    __slots__ = (
        "_attributes", "_context", "_ended", "_events", "_kind", "_links", "_name",
        "_parent", "_status", "_tracer", "start_time",
    )  # fmt: skip

    def __init__(
        self,
        tracer: RequestTracer,
        name: str,
        context: SpanContext,
        parent: SpanContext | None,
        kind: SpanKind,
        attributes: Mapping[str, Any] | None,
        links: Sequence[trace.Link] | None,
        start_time: int,
    ) -> None:
        self._tracer, self._name, self._kind = tracer, name, kind
        self._context, self._parent = context, parent
        self._attributes: dict[str, Any] = dict(attributes) if attributes else {}
        self._events: list[Event] = []
        self._links = tuple(links) if links else ()
        self._status, self._ended, self.start_time = _UNSET, False, start_time

    def get_span_context(self) -> SpanContext:
        return self._context

    def is_recording(self) -> bool:
        return not self._ended

    def set_attribute(self, key: str, value: Any) -> None:
        if value is not None and not self._ended:
            self._attributes[key] = value

    def set_attributes(self, attributes: Mapping[str, Any]) -> None:
        if not self._ended:
            self._attributes.update((k, v) for k, v in attributes.items() if v is not None)

    def add_event(
        self, name: str, attributes: Mapping[str, Any] | None = None, timestamp: int | None = None
    ) -> None:
        if not self._ended:
            self._events.append(Event(name, attributes, timestamp))

    def add_link(self, context: SpanContext, attributes: Mapping[str, Any] | None = None) -> None:
        if not self._ended:
            self._links = (*self._links, trace.Link(context, attributes))

    def update_name(self, name: str) -> None:
        self._name = name

    def set_status(self, status: Status | StatusCode, description: str | None = None) -> None:
        if self._ended or self._status.status_code is StatusCode.OK:
            return  # as the SDK: OK is final
        self._status = status if isinstance(status, Status) else Status(status, description)

    def record_exception(
        self,
        exception: BaseException,
        attributes: Mapping[str, Any] | None = None,
        timestamp: int | None = None,
        escaped: bool = False,
    ) -> None:
        """An `exception` event with the SDK's attributes."""
        module, qualname = type(exception).__module__, type(exception).__qualname__
        values = {
            "exception.type": f"{module}.{qualname}" if module and module != "builtins" else qualname,
            "exception.message": str(exception),
            "exception.stacktrace": "".join(traceback.format_exception(exception)),
            "exception.escaped": str(escaped),
            **(attributes or {}),
        }
        self.add_event("exception", values, timestamp)

    def end(self, end_time: int | None = None) -> None:
        if self._ended:
            return
        self._ended = True
        tracer = self._tracer
        tracer.on_end(
            ReadableSpan(
                name=self._name,
                context=self._context,
                parent=self._parent,
                resource=tracer.resource,
                attributes=self._attributes,
                events=self._events,
                links=self._links,
                kind=self._kind,
                status=self._status,
                start_time=self.start_time,
                end_time=end_time if end_time is not None else time_ns(),
                instrumentation_scope=tracer.scope,
            )
        )


class _Current:
    """start_as_current_span's context manager for a RequestSpan (the SDK's semantics: current
    inside, an escaping exception recorded with an ERROR status, ended on exit)."""

    __slots__ = ("_span", "_token")

    def __init__(self, span: RequestSpan, parent_context: otel_context.Context | None) -> None:
        self._span = span
        self._token = otel_context.attach(trace.set_span_in_context(span, parent_context))

    def __enter__(self) -> RequestSpan:
        return self._span

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        otel_context.detach(self._token)
        if isinstance(exc, Exception):
            self._span.record_exception(exc)
            self._span.set_status(Status(StatusCode.ERROR, f"{type(exc).__name__}: {exc}"))
        self._span.end()


class RequestTracer(trace.Tracer):
    """An SDK tracer whose light-mode SERVER spans are RequestSpans; everything else is the SDK's."""

    def __init__(self, sdk_tracer: SdkTracer, scope_name: str) -> None:
        self.sdk = sdk_tracer
        self.resource = sdk_tracer.resource
        self.on_end = sdk_tracer.span_processor.on_end
        self.scope = InstrumentationScope(scope_name)
        self._ids = sdk_tracer.id_generator

    def start_span(self, *args: Any, **kwargs: Any) -> trace.Span:
        return self.sdk.start_span(*args, **kwargs)

    def start_as_current_span(
        self,
        name: str,
        context: otel_context.Context | None = None,
        kind: SpanKind = SpanKind.INTERNAL,
        attributes: Mapping[str, Any] | None = None,
        links: Sequence[trace.Link] | None = None,
        start_time: int | None = None,
        record_exception: bool = True,
        set_status_on_exception: bool = True,
        end_on_exit: bool = True,
    ) -> Any:
        parent = trace.get_current_span(context).get_span_context()
        cheap = (
            kind is SpanKind.SERVER
            and light.mode() == "light"
            and record_exception
            and set_status_on_exception
            and end_on_exit
            and (not parent.is_valid or parent.trace_flags.sampled)
        )
        if not cheap:  # the SDK's span (and its sampler's verdict on an unsampled parent)
            return self.sdk.start_as_current_span(
                name, context, kind, attributes, links, start_time, record_exception,
                set_status_on_exception, end_on_exit,
            )  # fmt: skip
        trace_id = parent.trace_id if parent.is_valid else self._ids.generate_trace_id()
        own = SpanContext(
            trace_id,
            self._ids.generate_span_id(),
            is_remote=False,
            trace_flags=_SAMPLED,
            trace_state=parent.trace_state if parent.is_valid else None,
        )
        started = start_time if start_time is not None else time_ns()
        span = RequestSpan(
            self, name, own, parent if parent.is_valid else None, kind, attributes, links, started
        )
        return _Current(span, context)
