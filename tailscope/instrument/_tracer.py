"""Which tracer the instrumentation writes with: the application's own, never a new one.

By default the global TracerProvider (whatever the service set with `trace.set_tracer_provider`,
including one set after this module was imported); `use(provider)` points tailscope at another
provider without touching the global. When no SDK provider is set, tracing is off and every helper
returns at once (one check, no span objects). The tracer is cached per provider: an SDK
`get_tracer` call costs ~16 µs, more than a span."""

from __future__ import annotations

from opentelemetry import trace

SCOPE = "tailscope.instrument"
_chosen: trace.TracerProvider | None = None
_cached: tuple[trace.TracerProvider | None, trace.Tracer | None] = (None, None)


def use(provider: trace.TracerProvider | None) -> None:
    """Write spans through `provider` (None: back to the global one)."""
    global _chosen
    _chosen = provider


def tracer() -> trace.Tracer | None:
    """The tracer to use, or None while tracing is off (no SDK provider anywhere)."""
    global _cached
    provider = _chosen if _chosen is not None else trace.get_tracer_provider()
    cached_provider, cached_tracer = _cached
    if provider is cached_provider:
        return cached_tracer
    off = isinstance(provider, trace.ProxyTracerProvider | trace.NoOpTracerProvider)
    found = None if off else provider.get_tracer(SCOPE)
    _cached = (provider, found)
    return found
