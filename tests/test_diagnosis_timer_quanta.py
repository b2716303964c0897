"""A fixed extra time that is one of the kernel's or resolver's timer values (a 1 s SYN timeout, glibc's
5 s resolver timeout) added to one kind of call, to a callee that is not traced, is the network's
(diag22, session 13): the timer is the caller's own, whatever the callee. A fixed extra time that is no
such value on one call name may be the peer's own wait: not named network."""

from __future__ import annotations

from tailscope.analysis.diagnosis import diagnose_frame
from tests.mechanism_frames import TraceBuilder, by_pattern, lognormal


def provider_calls(seed: int, extra_ms: float, rate: float):
    """Each request tokenises, calls a third party once (one CLIENT span, nothing traced behind it) and
    scores. A share `rate` of calls waits a fixed `extra_ms` more (a lost SYN or DNS query: the caller's
    timer; or the peer's own fixed wait), spread over the run."""
    b = TraceBuilder(seed)
    for t in b.arrivals(4000, 200):
        b.new_trace()
        inst = f"api/{int(b.rng.integers(3))}"
        root = b.span(None, "POST /embed", "Server", inst, t, 0.0)
        cur = t + 0.05
        tok = lognormal(b.rng, 1.0, 0.2)
        b.span(root, "tokenize", "Internal", inst, cur, tok)
        cur += tok + 0.02
        call = lognormal(b.rng, 20.0, 0.2)
        if b.rng.random() < rate:
            call += extra_ms
        b.span(root, "POST", "Client", inst, cur, call, http__response__status_code=200,
               server__address="api.provider.example")
        cur += call + 0.02
        work = lognormal(b.rng, 4.0, 0.2)
        b.span(root, "score", "Internal", inst, cur, work)
        b.set_end(root, cur + work + 0.05)
    return b.frame()


def test_a_syn_timeout_on_one_untraced_call_is_network() -> None:
    found = by_pattern(diagnose_frame(provider_calls(1, 1000.0, 0.01)).findings)
    assert found.get("network", 0.0) >= 0.5, found
    assert found.get("slow_dependency", 0.0) < 0.5, found


def test_a_resolver_timeout_on_one_untraced_call_is_network() -> None:
    found = by_pattern(diagnose_frame(provider_calls(2, 5000.0, 0.008)).findings)
    assert found.get("network", 0.0) >= 0.5, found
    assert found.get("slow_dependency", 0.0) < 0.5, found


def test_a_fixed_wait_that_is_no_timer_value_is_not_network() -> None:
    found = by_pattern(diagnose_frame(provider_calls(3, 700.0, 0.01)).findings)
    assert found.get("network", 0.0) < 0.5, found


def test_a_few_calls_at_a_timer_value_are_chance() -> None:
    """Six calls 1 s late in a run are too few to say a timer (a healthy heavy tail lands there too)."""
    found = by_pattern(diagnose_frame(provider_calls(4, 1000.0, 0.0015)).findings)
    assert found.get("network", 0.0) < 0.5, found


def test_a_fixed_300_ms_wait_is_no_linux_timer() -> None:
    """300 ms is Windows' retransmission floor, and three periods of a 100 ms CPU quota: on Linux
    services, not a timer of the caller's kernel."""
    found = by_pattern(diagnose_frame(provider_calls(5, 300.0, 0.01)).findings)
    assert found.get("network", 0.0) < 0.5, found
