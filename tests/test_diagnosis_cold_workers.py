"""A new task-queue worker process that loads its model on its first task is a cold start (diag20,
django-celery class 3): the process's entry span is a CONSUMER span (a message processed), not a
SERVER span, inside a request that waits for it. The first task of each new process is slow against its
later ones and the other processes' tasks at the same moments (first_calls.py). The same deploy with
warm processes and a rare slow task at random moments is no cold start."""

from __future__ import annotations

from tailscope.analysis.diagnosis import diagnose_frame
from tests.cold_worker_services import worker_pool_service


def _found(result) -> list:
    return [(f.pattern, round(f.confidence, 2), f.span_name) for f in result.findings]


def _conf(result, pattern: str) -> float:
    return max((f.confidence for f in result.findings if f.pattern == pattern), default=0.0)


def test_a_worker_loading_its_model_on_its_first_task_is_a_cold_start() -> None:
    result = diagnose_frame(worker_pool_service(1, load_on_first=True))
    assert result.findings and result.findings[0].pattern == "cold_start", _found(result)
    assert result.findings[0].confidence >= 0.5, _found(result)


def test_rare_slow_tasks_on_warm_new_workers_are_no_cold_start() -> None:
    result = diagnose_frame(worker_pool_service(1, load_on_first=False))
    assert _conf(result, "cold_start") < 0.5, _found(result)
