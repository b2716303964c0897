"""head_of_line (lock_contention): calls that end behind an earlier reply of their own process on a shared,
multiplexed connection; a cache that stalls every process's calls at once stays a slow dependency."""

from __future__ import annotations

import numpy as np

from tailscope.analysis.diagnosis import diagnose_frame
from tailscope.analysis.diagnosis.head_of_line import inside_callee
from tests.mechanism_frames import by_pattern
from tests.mechanism_paths import batched_model_server, multiplexed_cache


def _listed(result) -> list:
    return [(f.pattern, f.span_name, round(f.confidence, 2)) for f in result.findings]


def test_commands_queued_behind_a_large_reply_are_lock_contention() -> None:
    result = diagnose_frame(multiplexed_cache(91, head_of_line=True))
    top = result.findings[0]
    assert top.pattern == "lock_contention" and top.confidence >= 0.5, _listed(result)
    assert top.span_name == "GET", _listed(result)
    assert by_pattern(result.findings).get("slow_dependency", 0.0) < 0.5, _listed(result)


def test_a_cache_that_stalls_every_process_at_once_is_no_head_of_line() -> None:
    result = diagnose_frame(multiplexed_cache(92, head_of_line=False))
    assert by_pattern(result.findings).get("lock_contention", 0.0) < 0.5, _listed(result)
    assert result.findings[0].pattern == "slow_dependency", _listed(result)


def test_a_batchers_queue_inside_the_callees_span_is_no_head_of_line() -> None:
    # the calls of one batch end together behind an earlier-sent one of the same process, but the wait
    # is the callee's own (its traced span holds it): not a wait on the caller's connection
    result = diagnose_frame(batched_model_server(93, rps=120.0, surge=0.7, per_item=6.0))
    behind = [f for f in result.findings if "behind_earlier_reply" in f.evidence.get("stats", {})]
    assert not behind, _listed(result)  # before: lock_contention 0.21, 37 % of the long calls "behind"
    assert by_pattern(result.findings).get("lock_contention", 0.0) < 0.5, _listed(result)


def test_the_callees_share_of_a_long_call_is_what_its_traced_span_covers() -> None:
    frame = batched_model_server(94, rps=120.0, surge=0.7, per_item=6.0)
    calls = np.nonzero(np.array(frame.names)[frame.name] == "HTTP POST")[0]
    assert inside_callee(frame, calls) > 0.9
    cache = multiplexed_cache(95, head_of_line=True)  # an untraced cache: nothing is the callee's
    gets = np.nonzero(np.array(cache.names)[cache.name] == "GET")[0]
    assert inside_callee(cache, gets) == 0.0
