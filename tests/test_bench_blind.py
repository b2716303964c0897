"""bench/blind_runs.py: how a run is scored against its truth (accept, side, healthy), the isotonic
calibration behind the leave-one-family-out table, and external truth.json entries."""

from __future__ import annotations

from types import SimpleNamespace

from bench.blind_runs import Scored, external_truth, family_tables, isotonic, lofo


def finding(pattern: str, confidence: float, evidence: dict | None = None) -> SimpleNamespace:
    return SimpleNamespace(pattern=pattern, confidence=confidence, evidence=evidence or {})


def run(family: str, causes: list[dict], *findings: SimpleNamespace) -> Scored:
    return Scored(family, "s", 0, "otlp", list(findings), causes, 0.0)


THROTTLE = {"pattern": "cpu_throttling", "accept": ["gc_pause"], "side": ["queueing"], "service": "embedder"}


def test_accept_names_the_cause_and_side_is_no_false_alarm_but_never_the_top() -> None:
    accepted = run(
        "f",
        [THROTTLE],
        finding("gc_pause", 0.9, {"summary": "stalls on embedder-1"}),
        finding("queueing", 0.7),
    )
    assert accepted.top_ok() and accepted.both_ok() and not accepted.false_alarms()
    assert accepted.names_service() is True
    side_first = run("f", [THROTTLE], finding("queueing", 0.9), finding("cpu_throttling", 0.6))
    assert not side_first.top_ok() and side_first.both_ok() and not side_first.false_alarms()
    wrong = run("f", [THROTTLE], finding("cache_miss", 0.85), finding("cpu_throttling", 0.4))
    assert not wrong.top_ok() and not wrong.both_ok()
    assert [f.pattern for f in wrong.false_alarms()] == ["cache_miss"]
    assert [ok for _, ok in wrong.judged()] == [False, True]


def test_healthy_runs_may_only_report_compute_bound_loudly() -> None:
    assert run("f", [], finding("compute_bound", 0.99), finding("network", 0.49)).top_ok()
    noisy = run("f", [], finding("compute_bound", 0.99), finding("network", 0.5))
    assert not noisy.top_ok() and len(noisy.false_alarms()) == 1
    assert [f.pattern for f, _ in noisy.judged()] == ["network"]


def test_two_cause_runs_need_every_cause_at_half_confidence() -> None:
    gc = {"pattern": "gc_pause"}
    slow = {"pattern": "slow_dependency"}
    assert run("f", [gc, slow], finding("gc_pause", 0.8), finding("slow_dependency", 0.5)).both_ok()
    assert not run("f", [gc, slow], finding("gc_pause", 0.8), finding("slow_dependency", 0.45)).both_ok()


def test_isotonic_calibration_is_monotone_and_fits_the_rates() -> None:
    pairs = [(0.9, False)] * 6 + [(0.9, True)] * 4 + [(0.6, True)] * 3 + [(0.6, False)] + [(0.2, False)] * 4
    fitted = isotonic(pairs)
    assert fitted(0.1) == 0.0 and fitted(0.2) == 0.0
    # 0.6 (3/4 right) above 0.9 (4/10 right) violates monotonicity: the two pool to 7/14
    assert fitted(0.6) == fitted(0.9) == 0.5
    assert fitted(1.0) == 0.5


def test_leave_one_family_out_uses_only_the_other_families() -> None:
    good = [run("a", [{"pattern": "gc_pause"}], finding("gc_pause", 0.95)) for _ in range(5)]
    bad = [run("b", [{"pattern": "gc_pause"}], finding("cache_miss", 0.95)) for _ in range(5)]
    calibrations = lofo(good + bad)
    assert calibrations["a"](0.95) == 0.0  # fitted on b, where 0.95 was always wrong
    assert calibrations["b"](0.95) == 1.0
    table = family_tables(good + bad)
    assert "| b | 0/0 | 0/0 | 0/5 | 0/0 | 0/0 | 0/5 | 5 / 5 |" in table


def test_external_truth_entries() -> None:
    assert external_truth({"pattern": None, "file": "h.jsonl"}) == []
    two = external_truth(
        {
            "pattern": "gc_pause+slow_dependency",
            "patterns": ["gc_pause", "slow_dependency"],
            "accept": {"gc_pause": ["cpu_throttling"]},
        }
    )
    assert [c["pattern"] for c in two] == ["gc_pause", "slow_dependency"]
    assert two[0]["accept"] == ["cpu_throttling"] and two[1]["accept"] == []


def test_blind_and_all_leave_the_held_out_families_out() -> None:
    from bench import accuracy
    from reference_pipeline.simulate import blind

    assert set(accuracy.OPEN) | set(blind.UNTOUCHED) == set(blind.MODULES)
    assert not set(accuracy.OPEN) & set(blind.UNTOUCHED)
