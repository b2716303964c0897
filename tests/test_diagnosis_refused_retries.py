"""A call refused at once with an error (429 + Retry-After) and made again after the wait is a retry
(timeout_retry) whose cost is the back-off, not a deadline (diag22, session 13). The same second call
after a wait with no refusal (a second page fetched once the first is read) is no retry."""

from __future__ import annotations

from tailscope.analysis.diagnosis import diagnose_frame
from tests.mechanism_frames import TraceBuilder, by_pattern, lognormal


def quota_service(seed: int, refused: bool):
    """Each request tokenises, then fetches an embedding from a provider under a wrapper span. For 0.9 s
    of the run the provider's quota is spent: a call then gets 429 in ~1 ms and the client sleeps the
    Retry-After (1 s) before calling again. Without `refused`, a quarter of the requests make a second
    call 1 s after the first (a page fetched later), both answered 200."""
    b = TraceBuilder(seed)
    window = (4000.0, 4900.0)
    for t in b.arrivals(3000, 350):
        b.new_trace()
        inst = f"api/{int(b.rng.integers(3))}"
        root = b.span(None, "POST /search", "Server", inst, t, 0.0)
        cur = t + 0.05
        tok = lognormal(b.rng, 1.0, 0.2)
        b.span(root, "tokenize", "Internal", inst, cur, tok)
        cur += tok + 0.02
        wrap = b.span(root, "fetch_embedding", "Internal", inst, cur, 0.0)
        at = cur + 0.01
        for _ in range(3):
            limited = refused and window[0] <= at < window[1]
            again = not refused and b.rng.random() < 0.25 and at < cur + 1.0
            dur = lognormal(b.rng, 1.0, 0.2) if limited else lognormal(b.rng, 20.0, 0.2)
            attrs = {"http__response__status_code": 429, "otel__status_code": "ERROR"} if limited else \
                {"http__response__status_code": 200}
            b.span(wrap, "POST", "Client", inst, at, dur, server__address="api.provider.example", **attrs)
            at += dur
            if not (limited or again):
                break
            at += 1000.0 + lognormal(b.rng, 1.0, 0.3)
        b.set_end(wrap, at + 0.02)
        cur = at + 0.05
        work = lognormal(b.rng, 4.0, 0.2)
        b.span(root, "score", "Internal", inst, cur, work)
        b.set_end(root, cur + work + 0.05)
    return b.frame()


def test_a_refusal_and_its_back_off_is_a_retry() -> None:
    found = by_pattern(diagnose_frame(quota_service(1, refused=True)).findings)
    assert found.get("timeout_retry", 0.0) >= 0.5, found


def test_a_second_call_after_a_wait_without_a_refusal_is_no_retry() -> None:
    found = by_pattern(diagnose_frame(quota_service(2, refused=False)).findings)
    assert found.get("timeout_retry", 0.0) < 0.5, found
