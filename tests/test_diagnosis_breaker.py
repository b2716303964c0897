"""A circuit breaker (breaker.py): a call every request makes degrades, its calls hit their deadline and
fail, the breaker opens and from then on the requests skip the call and answer from a fallback. Over
the run the call is made by a minority of the requests, as a cache's miss path is; its slow and failed
calls before the breaker opened are still the dependency's tail (slow_dependency, read over the
stretch before the stop). Twins with the same low presence: a cache warming up (its miss path made by
every request at first, fewer later, no errors) and a call a flag turns off (it stops at one moment,
without failures)."""

from __future__ import annotations

from tailscope.analysis.diagnosis import diagnose_frame
from tailscope.analysis.diagnosis.breaker import presence_before_open
from tailscope.analysis.diagnosis.frame import KIND_CLIENT
from tailscope.analysis.diagnosis.model import Context
from tests.mechanism_frames import TraceBuilder, lognormal

N, RPS, PROCESSES = 2500, 200.0, 3
DEADLINE = 250.0


def quotes(how: str, seed: int = 6) -> TraceBuilder:
    """A quote API: per request its own work, then a call to the speeds service ('GET /speeds',
    CLIENT, with the callee's SERVER span), then more work. 'breaker': from a fifth of the run the
    service slows (its median 5 -> 300 ms); calls past 250 ms end at the deadline in error; after 5
    failures in a row the breaker opens for good (the run is shorter than its open interval), and the
    requests answer from a fallback table (no call). 'warming': the call is a cache's miss path: every
    request misses at first, the miss rate falls to 5 % over the first third; misses cost ~30 ms, no
    errors. 'flag': the call (~5 ms, a slow tail of 60-120 ms for 10 % of calls from a fifth of the
    run) stops being made at a third of the run, no errors."""
    b = TraceBuilder(seed)
    arrivals = b.arrivals(N, RPS)
    span = float(arrivals[-1])
    failures, opened = 0, False
    for t in arrivals:
        t = float(t)
        b.new_trace()
        inst = f"api/{int(b.rng.integers(PROCESSES))}"
        root = b.span(None, "GET /quote", "Server", inst, t, 0.0, service="quote-api")
        at = t + lognormal(b.rng, 3.0, 0.2)
        phase = t / span
        make, work, failed = True, lognormal(b.rng, 5.0, 0.3), False
        if how == "breaker":
            make = not opened
            if phase > 0.2:
                work = lognormal(b.rng, 300.0 * min(1.0, (phase - 0.2) / 0.1) + 5.0, 0.4)
        elif how == "warming":
            miss = max(0.05, 1.0 - phase / 0.33)
            make = bool(b.rng.random() < miss)
            work = lognormal(b.rng, 30.0, 0.3)
        elif how == "flag":
            make = phase < 0.33
            if phase > 0.2 and b.rng.random() < 0.1:
                work = float(b.rng.uniform(60.0, 120.0))
        if make:
            took = min(work, DEADLINE) + 0.4
            failed = work > DEADLINE
            status = {"otel.status_code": "ERROR" if failed else "OK"}
            call = b.span(root, "GET /speeds", "Client", inst, at, took, service="quote-api", **status)
            b.span(call, "GET /speeds", "Server", "speeds/0", at + 0.2, work, service="speeds")
            at += took
            failures = failures + 1 if failed else 0
            opened = opened or failures >= 5
        b.set_end(root, at + lognormal(b.rng, 4.0, 0.2))
    return b


def _found(b: TraceBuilder) -> list[tuple[str, str | None, float]]:
    return [(f.pattern, f.span_name, round(f.confidence, 2)) for f in diagnose_frame(b.frame()).findings]


def _opened(b: TraceBuilder) -> float | None:
    frame = b.frame()
    ctx = Context(frame)
    code = frame.names.index("GET /speeds")
    top = (frame.name == code) & (frame.request >= 0) & (frame.kind == KIND_CLIENT)
    return presence_before_open(ctx, code, top)


def test_a_call_a_breaker_stopped_is_the_slow_dependency() -> None:
    """Before: nothing >= 0.5 (the call, made by a quarter of the requests, was read as a conditional
    path's and left out)."""
    b = quotes("breaker")
    assert (_opened(b) or 0.0) >= 0.8
    found = _found(b)
    assert found and found[0][0] in ("slow_dependency", "timeout_retry") and found[0][2] >= 0.5, found


def test_a_cache_warming_up_is_no_breaker() -> None:
    b = quotes("warming")
    assert _opened(b) is None
    found = _found(b)
    assert not [f for f in found if f[0] == "slow_dependency" and f[2] >= 0.5], found


def test_a_call_turned_off_without_failures_is_no_breaker() -> None:
    assert _opened(quotes("flag")) is None

