"""A fallback follows a lookup that is cheap on nearly every request (fallback_path.LOOKUP_QUANTILE).
An agent's step asks a model (a cache in the model's client answers 55 % of the questions in ~5 ms;
the others take ~1.5 s), then, on 40 % of the requests, runs the tool the model asked for (a search
of ~1.8 s). The model call is made by every request and ends before the tool starts, and at its
median (a cached answer) it is far faster than the tool: yet its other half works for longer than
the tool, so it is a step of the work that asks for a tool, not a cache lookup whose misses fall back
to a store. The same shape with a lookup cheap on every request (~1 ms, the store called on its
misses) is a read-through cache: named where its misses come in a wave."""

from __future__ import annotations

from tailscope.analysis.diagnosis import diagnose_frame
from tests.mechanism_frames import TraceBuilder, lognormal

N = 3000


def _steps(seed: int, cheap_lookup: bool):
    """Requests: a first call every request makes (a model call, or with `cheap_lookup` a ~1 ms cache
    read), then on some requests a ~1.8 s call (the tool the model asked for: 40 % of requests at
    random; or the store read on the cache's misses: 5 % of requests, 60 % from half the run on, a
    wave of expiries), then a ~0.8 s call for the final answer and ~3 ms of rendering."""
    b = TraceBuilder(seed)
    for i, t in enumerate(b.arrivals(N, 15)):
        b.new_trace()
        inst = f"agent/{int(b.rng.integers(4))}"
        root = b.span(None, "POST /ask", "Server", inst, t, 0.0)
        cur = t + 0.3
        if cheap_lookup:
            first = lognormal(b.rng, 1.0, 0.3)
            second = b.rng.random() < (0.05 if i < N // 2 else 0.6)
        else:
            first = lognormal(b.rng, 5.0, 0.3) if b.rng.random() < 0.55 else lognormal(b.rng, 1500.0, 0.5)
            second = b.rng.random() < 0.4
        b.span(root, "step one", "Client", inst, cur, first)
        cur += first + 0.2
        if second:
            call = lognormal(b.rng, 1800.0, 0.3)
            b.span(root, "step two", "Client", inst, cur, call)
            cur += call + 0.2
        answer = lognormal(b.rng, 800.0, 0.3)  # the final answer, whatever came before
        b.span(root, "step three", "Client", inst, cur, answer)
        cur += answer + 0.2
        render = lognormal(b.rng, 3.0, 0.2)
        b.span(root, "render", "Internal", inst, cur, render)
        b.set_end(root, cur + render + 0.2)
    return b.frame()


def _cache(result) -> float:
    return max((f.confidence for f in result.findings if f.pattern == "cache_miss"), default=0.0)


def _lines(result):
    return [(f.pattern, round(f.confidence, 2), f.span_name) for f in result.findings]


def test_a_call_after_a_model_step_that_is_not_cheap_is_no_fallback() -> None:
    result = diagnose_frame(_steps(1, cheap_lookup=False))
    assert _cache(result) < 0.5, _lines(result)


def test_a_call_after_a_lookup_cheap_on_every_request_is_a_fallback() -> None:
    result = diagnose_frame(_steps(1, cheap_lookup=True))
    assert _cache(result) >= 0.5, _lines(result)
