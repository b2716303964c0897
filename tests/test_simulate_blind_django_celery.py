"""The blind family `django-celery` (reference_pipeline/simulate/django_celery.py; held out): each
seed's format loads through the real loader with its conventions, the truth names spans, services and
instances the run has, and each planted mechanism shows in the timings the way gunicorn's backlog,
PgBouncer's pool, a row lock, a TTL wave, Celery's prefetch and cold children, CPython's full
collections, the bureau's timeouts, a lossy zone link or a growing payload would produce it (a steady
run of the same seed does not). Three runs go through the loader; the others are read from the
generated table, to keep the file fast."""

from __future__ import annotations

from functools import cache

import numpy as np
import pytest

from reference_pipeline.simulate import blind, django_celery
from reference_pipeline.simulate import django_celery_spans as sp
from tests.blind_support import instance_label as label
from tests.blind_support import kids, load_run, named, p, table_span_dicts

# The family's contract test (each seed's format through the real loader, the truth): its physics
# tests below are in the full tier, covered by it (`reason="simulator physics"`, tests/conftest.py).
CONTRACT = (
    "tests/test_simulate_blind_django_celery.py::test_each_format_loads_with_its_seeds_conventions_and_the_truth_names_what_the_run_has",
)

MS = 1e6
FAMILY = "django-celery"
CALLER_ROOT = "POST /v1/applications/{id}/offer"
RUN = f"run/{sp.SCORE}"


@cache
def table_spans(scenario: str, requests: int, seed: int) -> tuple[dict, ...]:
    return table_span_dicts(django_celery, scenario, requests, seed)


def for_update(spans) -> list[dict]:
    return [s for s in named(spans, "SELECT") if "FOR UPDATE" in str(
        s["attrs"].get("db.query.text", s["attrs"].get("db.statement")))]


def run_ns(requests: int, seed: int) -> float:
    return requests / django_celery.setup(seed)["rps"] * 1e9


@pytest.fixture(scope="module")
def loaded(tmp_path_factory) -> dict[int, tuple[list[dict], dict]]:
    tmp = tmp_path_factory.mktemp("django-celery")
    runs = {0: ("cold-celery-workers", 700), 1: ("gunicorn-backlog", 800), 2: ("cross-az-loss", 500)}
    return {seed: load_run(tmp, FAMILY, scenario, n, seed) for seed, (scenario, n) in runs.items()}


def test_each_format_loads_with_its_seeds_conventions_and_the_truth_names_what_the_run_has(loaded) -> None:
    assert FAMILY not in blind.UNTOUCHED and blind.scenarios(FAMILY) == django_celery.SCENARIOS  # open now
    assert django_celery.SCENARIOS[0] == "steady" and len(django_celery.PAIRS) == 3
    assert 9 <= len(django_celery.SINGLES) <= 10
    for seed, (spans, summary) in loaded.items():
        s, style = django_celery.setup(seed), django_celery.style(seed)
        assert summary["format"] == s["fmt"]
        services = {x["service"] for x in spans}
        assert services == {sp.CALLER, sp.WEB, sp.WORKER} | ({sp.EDGE} if s["edge"] == "haproxy" else set())
        roots = [x for x in spans if x["service"] == sp.WEB and x["kind"] == "Server"]
        callers = [x for x in spans if x["name"].lower() == CALLER_ROOT.lower()]
        assert len(roots) == len(callers) == {0: 700, 1: 800, 2: 500}[seed]
        assert all(not x["parent"] for x in callers) and all(x["parent"] for x in roots)
        db = next(x for x in spans if x["name"].lower() == "select")["attrs"]
        assert ("db.query.text" in db and "server.address" in db) == (s["semconv"] == "new")
        assert ("db.statement" in db and "net.peer.name" in db) == (s["semconv"] == "old")
        names = {x["name"].lower() for x in spans}
        assert (sp.WAIT in names) == (sp.BUILD in names) == s["internals"]
        by_id = {x["id"]: x for x in spans}
        consumers = [x for x in spans if x["kind"] == "Consumer" and x["name"] == RUN]
        if s["linked"]:  # its own trace, linked to the PRODUCER
            assert all(not x["parent"] and x["links"] and x["links"] != "[]" for x in consumers)
        else:
            assert all(by_id[x["parent"]]["kind"] == "Producer" for x in consumers)
        web = {label(x["resource"]) for x in roots}
        workers = {label(x["resource"]) for x in consumers}
        if s["ident"] == "host-pid":  # one instance per gunicorn worker process
            assert len(web) >= s["web_pods"] * s["workers"]
        else:
            assert len(web) == s["web_pods"]
        assert ("service.instance.id" in roots[0]["resource"]) == (s["ident"] == "instance-id")
        for scenario in django_celery.SCENARIOS:
            for cause in django_celery.truth(scenario, seed):
                assert cause.span.lower() in names, (scenario, cause)
                have = web if cause.service == sp.WEB else workers
                if cause.pattern != "cold_start" or seed == 0:  # only seed 0's run has the new pods
                    assert set(cause.instances) <= have, (scenario, cause)
        assert style.root.lower() in names
    with pytest.raises(ValueError, match="unknown django-celery scenario"):
        django_celery.truth("healthy", 0)


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_a_burst_waits_in_the_gunicorn_backlog_before_the_django_span_starts(loaded) -> None:
    spans, _ = loaded[1]  # HAProxy traced: the wait is between its span and Django's
    by_id = {x["id"]: x for x in spans}
    run = run_ns(800, 1)
    first = min(x["start"] for x in spans)
    inside, before = [], []
    for root in (x for x in spans if x["service"] == sp.WEB and x["kind"] == "Server"):
        edge = by_id[root["parent"]]
        assert edge["service"] == sp.EDGE
        at = (edge["start"] - first) / run
        (inside if 0.36 < at < 0.45 else before if at < 0.3 else []).append(root["start"] - edge["start"])
    assert p(inside, 75) > 30 * MS and max(inside) > 100 * MS and p(before, 95) < 3 * MS


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_a_job_holding_pgbouncers_connections_makes_transactions_wait_in_their_first_statement() -> None:
    spans = table_spans("pgbouncer-saturation", 1000, 1)
    run = run_ns(1000, 1)
    inside = [x["duration"] for x in for_update(spans) if 0.3 * run < x["start"] < 0.7 * run]
    outside = [x["duration"] for x in for_update(spans)
               if x["start"] < 0.2 * run or x["start"] > 0.85 * run]
    assert p(inside, 90) > 20 * MS and p(outside, 95) < 4 * MS
    updates = [x["duration"] for x in named(spans, "UPDATE")]  # inside the transaction: no wait
    assert p(updates, 99) < 10 * MS
    steady = [x["duration"] for x in for_update(table_spans("steady", 1000, 1))]
    assert p(steady, 99) < 10 * MS


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_concurrent_requests_for_one_customer_queue_on_its_exposure_row() -> None:
    spans = table_spans("row-lock-contention", 1000, 1)
    parent = {x["i"]: x for x in spans}
    customer = {}
    for root in named(spans, django_celery.style(1).root, "Server"):
        customer[root["i"]] = root["attrs"]["http.target"]
    locks = [(x, customer[x["parent"]]) for x in for_update(spans)]
    slow = [(x, c) for x, c in locks if x["duration"] > 30 * MS]
    assert len(slow) > 50
    # a slow lock's customer had another request's transaction in flight at the same moment
    others = {}
    for x, c in locks:
        others.setdefault(c, []).append(x)
    shared = [any(o is not x and o["end"] < x["end"] and parent[o["parent"]]["end"] > x["start"]
                  for o in others[c]) for x, c in slow]
    assert np.mean(shared) > 0.9
    steady = [x["duration"] for x in for_update(table_spans("steady", 1000, 1))]
    assert p(steady, 99) < 10 * MS


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_a_ttl_wave_turns_hits_into_orm_queries_and_setex() -> None:
    spans = table_spans("redis-ttl-expiry", 1000, 1)
    run = run_ns(1000, 1)
    feats = named(spans, sp.LOAD_FEATURES)
    before = [not x["attrs"]["cache.hit"] for x in feats if x["start"] < 0.22 * run]
    after = [not x["attrs"]["cache.hit"] for x in feats if x["start"] > 0.3 * run]
    assert np.mean(before) < 0.08 and np.mean(after) > 0.4
    misses = [x for x in feats if not x["attrs"]["cache.hit"]]
    assert len(named(spans, "SETEX")) == len(misses)
    by_parent = kids(spans)
    assert all(sum(k["name"] == "SELECT" for k in by_parent[x["i"]]) == 3 for x in misses)
    hits = [x["duration"] for x in feats if x["attrs"]["cache.hit"]]
    assert p([x["duration"] for x in misses], 50) > 10 * p(hits, 50)


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_prefetched_score_tasks_wait_behind_a_long_task_on_their_child_while_others_idle() -> None:
    spans = table_spans("celery-prefetch-hol", 1000, 1)  # host-pid: every Celery child is an instance
    parent = {x["i"]: x for x in spans}
    rescore = named(spans, f"run/{sp.RESCORE}")
    assert len(rescore) >= 4 and p([x["duration"] for x in rescore], 50) > 500 * MS
    waits = [(x, x["start"] - parent[x["parent"]]["end"]) for x in named(spans, RUN)]
    long = [(x, w) for x, w in waits if w > 100 * MS]
    assert len(long) > 20
    behind = [any(r["instance"] == x["instance"] and r["start"] < x["start"] and r["end"] > x["start"] - w
                  for r in rescore) for x, w in long]  # a long task ran on its child meanwhile
    assert np.mean(behind) > 0.7
    children = {x["instance"] for x in named(spans, RUN)}
    busy_all = 0
    for x, w in long:  # meanwhile some other child was idle (no span in flight)
        t = x["start"] - w / 2
        busy = {y["instance"] for y in (*rescore, *named(spans, RUN)) if y["start"] <= t < y["end"]}
        busy_all += busy >= children
    assert busy_all < 0.2 * len(long)
    steady = table_spans("steady", 1000, 1)
    parent = {x["i"]: x for x in steady}
    assert p([x["start"] - parent[x["parent"]]["end"] for x in named(steady, RUN)], 99) < 40 * MS


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_new_celery_children_load_the_model_on_their_first_task_and_views_time_out(loaded) -> None:
    spans, _ = loaded[0]
    (cause,) = django_celery.truth("cold-celery-workers", 0)
    loads = [x for x in spans if x["name"] == sp.MODEL_LOAD]
    assert {label(x["resource"]) for x in loads} == set(cause.instances)
    assert min(x["duration"] for x in loads) > 1000 * MS
    waits = [x for x in spans if x["name"] == sp.WAIT]
    timed_out = [x for x in waits if x["status"] == "Error"]
    assert timed_out and all(x["duration"] > 1990 * MS for x in timed_out)
    steady = table_spans("steady", 1000, 1)
    assert not named(steady, sp.MODEL_LOAD)
    assert p([x["duration"] for x in named(steady, sp.WAIT)], 99) < 200 * MS


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_a_leak_makes_full_collections_rarer_and_longer_and_they_stretch_the_django_span() -> None:
    style = django_celery.style(2)  # reported as annotations

    def pauses(scenario):
        roots = named(table_spans(scenario, 1000, 2), style.root, "Server")
        return [(r, e[2]["gc.duration_ms"]) for r in roots for e in r["events"]]

    leak, steady = pauses("gc-gen2-leak"), pauses("steady")
    assert max(d for _, d in leak) > 150 and max(d for _, d in steady) < 40
    spans = table_spans("gc-gen2-leak", 1000, 2)
    by_parent = kids(spans)
    for root, d in leak:
        if d > 100:  # the pause is self time of the Django span: no child covers it
            covered = sum(k["duration"] for k in by_parent[root["i"]])
            assert root["duration"] - covered > d * MS * 0.95
    assert not any(e for r in named(table_spans("steady", 1000, 1), style.root) for e in r["events"])


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_a_slow_bureau_times_out_at_the_read_timeout_and_is_retried() -> None:
    style = django_celery.style(2)
    spans = table_spans("bureau-timeout-retry", 1000, 2)
    calls = named(spans, style.bureau, "Client", sp.WEB)
    failed = [x for x in calls if x["status"] == "Error"]
    assert len(failed) > 0.02 * 1000 and all(400 * MS < x["duration"] < 480 * MS for x in failed)
    by_parent = kids(spans)
    for x in failed:
        siblings = sorted((k for k in by_parent[x["parent"]] if k["name"] == style.bureau),
                          key=lambda k: k["start"])
        assert len(siblings) == 2 and (siblings[0] is not x or siblings[1]["start"] >= x["end"])
    steady = named(table_spans("steady", 1000, 2), style.bureau, "Client", sp.WEB)
    assert np.mean([x["status"] == "Error" for x in steady]) < 0.01


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_loss_between_zones_costs_a_retransmission_timeout_on_zone_b_pods_only(loaded) -> None:
    spans, _ = loaded[2]
    zone_b = set(django_celery.truth("cross-az-loss", 2)[0].instances)
    gets = [x for x in spans if x["name"].lower() == "get" and x["service"] == sp.WEB]
    b = [x["duration"] for x in gets if label(x["resource"]) in zone_b]
    a = [x["duration"] for x in gets if label(x["resource"]) not in zone_b]
    assert sum(d > 200 * MS for d in b) >= 4 and max(a) < 50 * MS


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_task_time_grows_with_the_feature_payload() -> None:
    style = django_celery.style(2)
    key = "messaging.message_payload_size_bytes"
    for scenario, median_kb in (("history-growth", 50), ("steady", None)):
        runs = named(table_spans(scenario, 1000, 2), RUN)
        size = np.array([x["attrs"][key] / 1024 for x in runs])
        if median_kb:
            assert np.median(size) > median_kb
            slope = np.polyfit(size, [x["duration"] / MS for x in runs], 1)[0]
            assert slope > 0.08  # ms per KB: decode + frame build
        else:
            assert np.median(size) < 5
    assert style.semconv == "old"


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
@pytest.mark.parametrize(("seed", "scenarios"),
                         [(1, django_celery.SINGLES[:5]), (2, django_celery.SINGLES[5:])])
def test_every_planted_cause_moves_the_p99_of_its_seed(seed: int, scenarios: tuple[str, ...]) -> None:
    def p99(scenario):
        return p([x["duration"] for x in named(table_spans(scenario, 1000, seed), CALLER_ROOT)], 99)

    base = p99("steady")
    for scenario in scenarios:
        assert p99(scenario) > 1.3 * base, scenario


def _signature(part: str, spans, seed: int) -> bool:
    """Whether a run shows one mechanism's mark (the single-cause tests above check each in depth)."""
    style = django_celery.style(seed)
    if part == "gc-gen2-leak":
        durations = [e[2]["gc.duration_ms"] for r in named(spans, style.root) for e in r["events"]]
        return max(durations, default=0) > 150
    if part == "bureau-timeout-retry":
        return sum(x["status"] == "Error" for x in named(spans, style.bureau, "Client", sp.WEB)) > 10
    if part == "redis-ttl-expiry":  # SETEX: a miss written back
        return len(named(spans, "SETEX")) > 0.3 * len(named(spans, style.root))
    if part == "cross-az-loss":  # RTOs on zone b's pods only
        zone_b = set(django_celery.truth("cross-az-loss", seed)[0].instances)
        gets = named(spans, "GET", "Client", sp.WEB)
        slow = {x["instance"] in zone_b for x in gets if x["duration"] > 200 * MS}
        return slow == {True}
    if part == "cold-celery-workers":  # the new pods' first tasks take seconds
        new = set(django_celery.truth("cold-celery-workers", seed)[0].instances)
        return sum(x["instance"] in new and x["duration"] > 1000 * MS for x in named(spans, RUN)) >= 4
    assert part == "gunicorn-backlog"
    parent = {x["i"]: x for x in spans}
    roots = named(spans, style.root, "Server")
    waits = [r["start"] - parent[r["parent"]]["start"] for r in roots]
    return sum(w > 150 * MS for w in waits) > 0.01 * len(waits)  # a healthy pod's backlog: now and then


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
@pytest.mark.parametrize("pair", django_celery.PAIRS)
def test_a_two_cause_run_has_both_mechanisms_and_steady_has_neither(pair: str) -> None:
    parts = pair.split("+")
    assert [c.pattern for c in django_celery.truth(pair, 2)] == [
        django_celery.truth(x, 2)[0].pattern for x in parts]
    both, steady = table_spans(pair, 1000, 2), table_spans("steady", 1000, 2)
    for part in parts:
        assert _signature(part, both, 2) and not _signature(part, steady, 2), part
