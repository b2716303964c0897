"""Two calls of one name to two operations of one peer are not an attempt and its retry
(tests/same_name_calls.py)."""

from __future__ import annotations

from conftest import seed_variants

from tailscope.analysis.diagnosis import diagnose_frame
from tests.same_name_calls import same_name_calls


def _found(result) -> list:
    return [(f.pattern, round(f.confidence, 2)) for f in result.findings]


@seed_variants(1, 2)
def test_an_embed_call_before_the_search_is_no_retry(seed: int) -> None:
    """The embed call ends at one steady duration and the search follows it, both named `HTTP POST`:
    the peer's SERVER spans name two operations (before: timeout_retry 0.90 on a healthy service)."""
    result = diagnose_frame(same_name_calls(seed, retries=False))
    assert all(f.confidence < 0.5 for f in result.findings if f.pattern == "timeout_retry"), _found(result)


@seed_variants(1, 2)
def test_a_search_cut_at_the_deadline_and_sent_again_stays_timeout_retry(seed: int) -> None:
    """The twin: the first attempt reaches the same operation as the one that answers."""
    result = diagnose_frame(same_name_calls(seed, retries=True))
    assert result.findings[0].pattern == "timeout_retry" and result.findings[0].confidence >= 0.8, \
        _found(result)
