"""A poll loop's wait is not a cache miss (diag20, django-celery classes 3 and 5): a span that asks a
result backend every 50 ms until a task is done has two duration modes when some tasks take longer,
its slow spans holding extra copies of the poll (a redis `GET`), which read like a cache's extra store
reads on its slow path. The copies follow one another after an idle gap of one length (the interval),
much longer than the call: the wait's consequence, not a path. A miss that reads the store once per
missing key, back to back, stays a cache miss."""

from __future__ import annotations

import numpy as np

from tailscope.analysis.diagnosis import diagnose_frame
from tailscope.analysis.diagnosis.poll_loops import poll_gaps
from tests.poll_loop_services import POLL_MS, per_key_miss_service, polling_service


def _found(result) -> list:
    return [(f.pattern, round(f.confidence, 2), f.span_name) for f in result.findings]


def _conf(result, pattern: str) -> float:
    return max((f.confidence for f in result.findings if f.pattern == pattern), default=0.0)


def test_the_polls_of_a_result_wait_are_a_poll_loop() -> None:
    f = polling_service(1, n=600)
    calls = np.nonzero(f.name == f.names.index("GET"))[0]
    gap, polled, interval = poll_gaps(f, calls)
    assert abs(interval / 1e6 - POLL_MS) < 2.0, interval
    assert polled[gap > 0].mean() > 0.9


def test_a_longer_wait_for_a_task_is_not_a_cache_miss() -> None:
    result = diagnose_frame(polling_service(1))
    assert _conf(result, "cache_miss") < 0.5, _found(result)


def test_a_miss_reading_each_missing_key_stays_a_cache_miss() -> None:
    f = per_key_miss_service(1)
    calls = np.nonzero(f.name == f.names.index("SELECT features"))[0]
    assert poll_gaps(f, calls)[2] == 0.0
    result = diagnose_frame(f)
    assert result.findings[0].pattern == "cache_miss" and result.findings[0].confidence >= 0.5, _found(result)
