"""bench/whatif_common.py: both runs of a pair are measured on the same population of units, the one
the faulty run's what-if is evaluated on (its kind and entry point, its latency on the same side), not
each run's own pick (a cause can change which consumer is busiest, or give a run a population of
asynchronous units the other run does not have)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

common = pytest.importorskip("bench.whatif_common")
units_mod = pytest.importorskip("tailscope.analysis.diagnosis.units")
Population = units_mod.Population


class _Requests(SimpleNamespace):
    def __len__(self) -> int:
        return len(self.client_span)


def _frame(name: str, units: int, p50_ms: float, client: bool = False):
    """A stand-in frame: `units` requests whose latency is `p50_ms` (all alike)."""
    requests = _Requests(client_span=np.full(units, 0 if client else -1))
    return SimpleNamespace(name=name, requests=requests, latency=np.full(units, p50_ms * 1e6))


@pytest.fixture
def runs(monkeypatch):
    """Each stand-in run's populations (None: its requests are its one population)."""
    kinds: dict[int, list | None] = {}
    entries: dict[int, str] = {}
    monkeypatch.setattr(units_mod, "populations", lambda frame: kinds[id(frame)])
    monkeypatch.setattr(units_mod, "_entry", lambda frame: entries[id(frame)])
    seen_side = []

    def latency(frame, timed, lay, client_side):
        seen_side.append(client_side)
        return frame.latency

    monkeypatch.setattr(common, "unit_latency", latency)
    monkeypatch.setattr(common, "predicted", lambda frame, lever, **_: (1.0, 1.0, lever, 0.0))
    return SimpleNamespace(kinds=kinds, entries=entries, seen_side=seen_side)


def test_the_run_without_the_cause_is_read_on_the_faulty_runs_consumer_not_its_own_busiest(runs) -> None:
    faulty, healthy = _frame("faulty", 10, 50.0), _frame("healthy", 10, 5.0)
    runs.kinds[id(faulty)] = [
        Population("request", "api POST /events", _frame("f-req", 400, 2.0)),
        Population("consumer", "scorer score", _frame("f-score", 300, 80.0)),  # the busiest here
        Population("consumer", "audit write", _frame("f-audit", 100, 9.0)),
    ]
    runs.kinds[id(healthy)] = [
        Population("request", "api POST /events", _frame("h-req", 400, 2.0)),
        # named by the wait span above it here (its first unit's root), by the consumer span there
        Population("consumer", "scorer score (from publish)", _frame("h-score", 100, 12.0)),
        Population("consumer", "audit write", _frame("h-audit", 300, 9.0)),  # the busiest here
    ]
    row = common.pair_row("fam", "cause", faulty, healthy, "no_gc_stalls")
    assert row["faulty_p50"] == pytest.approx(80.0)
    assert row["meas_p50"] == pytest.approx(12.0)  # the scorer's units, not the audit's (9 ms)
    assert row["paired"] and row["population"] == "consumer scorer score"


def test_a_consumer_population_only_the_healthy_run_has_leaves_its_requests_measured(runs) -> None:
    """The faulty run's consumer work ends inside its requests (one population: its requests); the
    healthy run's outlasts them (a consumer population): the healthy run's requests are read."""
    faulty, healthy = _frame("faulty", 400, 30.0), _frame("healthy", 10, 0.0)
    runs.kinds[id(faulty)] = None
    runs.entries[id(faulty)] = "api POST /events"
    runs.kinds[id(healthy)] = [
        Population("request", "api POST /events", _frame("h-req", 400, 6.0)),
        Population("consumer", "scorer score", _frame("h-score", 300, 70.0)),
    ]
    row = common.pair_row("fam", "cause", faulty, healthy, "no_gc_stalls")
    assert row["meas_p50"] == pytest.approx(6.0)  # not the consumer's 70 ms
    assert row["paired"]


def test_the_latency_side_follows_the_faulty_run_and_a_missing_population_is_flagged(runs) -> None:
    faulty, healthy = _frame("faulty", 10, 1.0), _frame("healthy", 10, 0.0)
    runs.kinds[id(faulty)] = [
        Population("request", "api POST /events", _frame("f-req", 400, 2.0)),
        Population("consumer", "scorer score", _frame("f-score", 300, 80.0, client=True)),
    ]
    runs.kinds[id(healthy)] = None  # no consumer population at all
    runs.entries[id(healthy)] = "api POST /events"
    healthy.latency = np.full(10, 7e6)
    row = common.pair_row("fam", "cause", faulty, healthy, "no_gc_stalls")
    assert runs.seen_side == [True, True]  # the healthy run read client-observed too
    assert not row["paired"] and "no consumer scorer score" in common.line(row)


def _findings_given(monkeypatch, named: list) -> list[dict]:
    """The diagnosis stubbed to name `named`; the list the evaluation is given the findings in."""
    monkeypatch.setattr(common, "diagnose_frame", lambda frame: SimpleNamespace(errors=[], findings=named))
    monkeypatch.setattr(common, "unit_frame", lambda frame: frame)
    given: list[dict] = []

    def evaluate(frame, findings, **_):
        given.extend(findings)
        return SimpleNamespace(outcomes=[], measured=SimpleNamespace(p50_ms=1.0, p99_ms=2.0))

    monkeypatch.setattr(common, "evaluate", evaluate)
    return given


def test_a_planted_cause_named_below_the_whatifs_floor_is_given_as_a_finding(monkeypatch) -> None:
    """The lever applied: a cause the diagnosis named under engine.MIN_CONFIDENCE gets no lever, so it
    is added from the truth as a missed one is (kafka-scorer gc+slow-store: slow_dependency at 0.12)."""
    low = SimpleNamespace(to_dict=lambda with_chart: {"pattern": "slow_dependency", "confidence": 0.12,
                                                      "span_name": "SELECT profiles"})
    given = _findings_given(monkeypatch, [low])
    truth = [{"pattern": "slow_dependency", "span": "SELECT profiles", "service": "db", "instances": ["db"]}]
    common.predicted(object(), "dependency_p50", truth=truth)
    added = [fd for fd in given if fd["confidence"] == 1.0]
    assert [(fd["pattern"], fd["span_name"]) for fd in added] == [("slow_dependency", "SELECT profiles")]


def test_a_planted_cause_named_without_the_span_its_lever_needs_is_given_as_a_finding(monkeypatch) -> None:
    """A lock finding with no span has no lever (engine.plan acts on the finding's span), so the
    truth's finding, which names the span, is added beside it (python-istio slow-metadata-query:
    lock_contention at 0.32 without a span); a spanless GC finding still counts as named."""
    spanless = [SimpleNamespace(to_dict=lambda with_chart, p=p: {"pattern": p, "confidence": 0.32,
                                                                  "span_name": None})
                for p in ("lock_contention", "gc_pause")]
    given = _findings_given(monkeypatch, spanless)
    truth = [{"pattern": "lock_contention", "span": "metadata.fetch", "service": "api", "instances": []},
             {"pattern": "gc_pause", "span": "POST /v1/search", "service": "api", "instances": []}]
    common.predicted(object(), ("no_lock_wait", "no_gc_stalls"), truth=truth)
    added = [fd for fd in given if fd["confidence"] == 1.0]
    assert [(fd["pattern"], fd["span_name"]) for fd in added] == [("lock_contention", "metadata.fetch")]


def _named(frame, *names: str):
    """The stand-in frame with spans of these names (one each)."""
    frame.names, frame.name = list(names), np.arange(len(names))
    return frame


def test_a_cause_acting_on_the_requests_is_measured_there_not_on_a_linked_consumer(runs) -> None:
    """A request that waits for a consumer working in traces of its own (linked to the publish): a
    row lock in the request's transaction is scored on the requests, where it acts; the busiest
    consumer's units hold none of its spans. A cause in the consumer's spans stays measured there."""
    faulty, healthy = _frame("faulty", 10, 0.0), _frame("healthy", 10, 0.0)
    runs.kinds[id(faulty)] = [
        Population("request", "api POST /limit", _named(_frame("f-req", 400, 300.0), "POST", "SELECT")),
        Population("consumer", "worker score", _named(_frame("f-score", 400, 13.0), "run/score")),
    ]
    runs.kinds[id(healthy)] = [
        Population("request", "api POST /limit", _named(_frame("h-req", 400, 150.0), "POST", "SELECT")),
        Population("consumer", "worker score", _named(_frame("h-score", 400, 7.5), "run/score")),
    ]
    row = common.pair_row("fam", "row-lock", faulty, healthy, "no_lock_wait", spans=("SELECT",))
    assert (row["faulty_p50"], row["meas_p50"]) == (pytest.approx(300.0), pytest.approx(150.0))
    assert row["population"] == "request api POST /limit"
    row = common.pair_row("fam", "prefetch", faulty, healthy, "queue_as_calm", spans=("run/score",))
    assert (row["faulty_p50"], row["meas_p50"]) == (pytest.approx(13.0), pytest.approx(7.5))


def test_a_lock_lever_answers_a_queueing_truth_only_at_the_truths_own_span() -> None:
    """ARCHITECTURE's vocabulary of waits: a wait for a connection from a bounded pool is
    lock_contention, for a worker queueing. A queueing truth at a pool's checkout span (node-triton
    audit-pool: `pg-pool.connect`) is answered by the lock lever there; the lock lever at another
    span (the burst's route of a worker-pool burst) is not that wait's fix."""
    from bench.bench_whatif import PATTERN_LEVER

    queueing = PATTERN_LEVER["queueing"]
    at = ("pg-pool.connect",)
    assert common._starts("no_lock_wait_held_as_calm:pg-pool.connect", queueing, at)
    assert not common._starts("no_lock_wait_held_as_calm:GET /v1/history", queueing, at)
    assert common._starts("queue_as_calm:GET /v1/history", queueing, at)
    assert not common._starts("no_lock_wait:SELECT", PATTERN_LEVER["slow_dependency"], ("SELECT",))
    assert common._composed_of("no_gc_stalls+no_lock_wait:pg-pool.connect",
                               (PATTERN_LEVER["gc_pause"], queueing), at)
