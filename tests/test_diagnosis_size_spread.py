"""A dependency's tail that is the size of what it is asked is its healthy spread (size_spread.py). A
service asks a hosted model for an answer streamed token by token: each call takes the time to its
first token then ~65 tokens a second, and the answers asked for are heavy-tailed in length (most a
hundred tokens, a few over a thousand). The calls are as heavy-tailed as the answers and carry the
request's tail (a cache in the client answers some questions at once, so the calls have a fast mode
too, and no size predicts the calls' time over all of them), yet each token takes the same time all
run: a possible cause, not a slow dependency.
The same provider with a degraded region for a third of the run (each token takes 2.5x as long)
is slow beyond what the calls ask: named."""

from __future__ import annotations

from tailscope.analysis.diagnosis import diagnose_frame
from tests.mechanism_frames import TraceBuilder, lognormal

N = 3000


def _answers(seed: int, degraded: bool = False):
    """A request parses (~2 ms), asks the model (time to first token ~250 ms, then the answer's tokens
    at ~65 a second; answer length lognormal, median 120 tokens; 45 % of the questions a cache in the
model's client answers in ~5 ms, the span recording the cached answer's tokens) and renders (~3 ms).
`degraded`:
    from 40 % to 75 % of the run each token takes 2.5x as long."""
    b = TraceBuilder(seed)
    for i, t in enumerate(b.arrivals(N, 20)):
        b.new_trace()
        inst = f"api/{int(b.rng.integers(4))}"
        root = b.span(None, "POST /answer", "Server", inst, t, 0.0)
        cur = t + 0.2
        parse = lognormal(b.rng, 2.0, 0.2)
        b.span(root, "parse", "Internal", inst, cur, parse)
        cur += parse
        tokens = max(5, int(lognormal(b.rng, 120.0, 0.9)))
        per_token = 1000.0 / 65 * (2.5 if degraded and 0.4 * N <= i < 0.75 * N else 1.0)
        call = lognormal(b.rng, 250.0, 0.25) + tokens * per_token * lognormal(b.rng, 1.0, 0.08)
        if b.rng.random() < 0.45:  # a cache in the client answered it (the answer's tokens, no work)
            call = lognormal(b.rng, 5.0, 0.3)
        b.span(root, "chat model", "Client", inst, cur, call, gen_ai__usage__output_tokens=tokens,
               gen_ai__usage__input_tokens=int(b.rng.integers(800, 1600)))
        cur += call
        render = lognormal(b.rng, 3.0, 0.2)
        b.span(root, "render", "Internal", inst, cur, render)
        b.set_end(root, cur + render + 0.2)
    return b.frame()


def _dependency(result) -> float:
    return max((f.confidence for f in result.findings if f.pattern == "slow_dependency"), default=0.0)


def _lines(result):
    return [(f.pattern, round(f.confidence, 2), f.span_name) for f in result.findings]


def test_a_call_as_heavy_tailed_as_what_it_is_asked_is_no_slow_dependency() -> None:
    result = diagnose_frame(_answers(5))
    assert _dependency(result) < 0.5, _lines(result)
    found = [f for f in result.findings if f.pattern == "slow_dependency"]
    assert found and found[0].evidence["stats"].get("tail_of_size"), _lines(result)


def test_a_call_slower_than_its_size_for_a_while_is_named() -> None:
    result = diagnose_frame(_answers(5, degraded=True))
    assert _dependency(result) >= 0.5, _lines(result)
