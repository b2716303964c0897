"""The blind family `fraud-check` (reference_pipeline/simulate/fraud_check*.py): it writes each of its
formats, loads through the real loader, its truth names spans, services and instances the run has,
and each planted mechanism shows in the timings the way the event loop, the collector, the pool, the
cache, the vendor's client, the CFS quota or gunicorn would produce it (and a steady run of the same
seed does not). Held out until its honest scores (session 5); an open check since."""

from __future__ import annotations

from functools import cache
from pathlib import Path

import numpy as np
import pytest

from reference_pipeline.simulate import blind
from reference_pipeline.simulate.fraud_check import SCENARIOS, generate, setup
from reference_pipeline.simulate.fraud_check_spans import names
from reference_pipeline.simulate.trace_table import DEFAULT_START_NS
from tests.blind_support import load_run

# The family's contract test (each seed's format through the real loader, the truth): its physics
# tests below are in the full tier, covered by it (`reason="simulator physics"`, tests/conftest.py).
CONTRACT = (
    "tests/test_simulate_blind_fraud_check.py::test_each_format_loads_and_the_truth_names_what_the_run_has[0-worker-gc]",
    "tests/test_simulate_blind_fraud_check.py::test_each_format_loads_and_the_truth_names_what_the_run_has[1-worker-recycle]",
    "tests/test_simulate_blind_fraud_check.py::test_each_format_loads_and_the_truth_names_what_the_run_has[2-worker-gc+vendor-timeouts]",
)

MS = 1e6
FAMILY = "fraud-check"
def instance(resource: dict) -> str:
    """The instance as the store's readers derive it: service.instance.id, host.name:process.pid,
    Jaeger's hostname, a Zipkin endpoint's ip:port."""
    r = resource
    if r.get("service.instance.id"):
        return r["service.instance.id"]
    if r.get("host.name") and r.get("process.pid"):
        return f"{r['host.name']}:{r['process.pid']}"
    return r.get("hostname") or f"{r['net.host.ip']}:{r['net.host.port']}"


def load(tmp: Path, scenario: str, requests: int, seed: int) -> tuple[list[dict], dict]:
    """The run's spans as the store holds them, after the loader read the written file."""
    spans, summary = load_run(tmp, FAMILY, scenario, requests, seed, instance=instance, lists=True)
    assert summary["format"] == setup(seed)["fmt"]
    return spans, summary


@cache
def table(scenario: str, seed: int, requests: int = 1200) -> list[dict]:
    """The run's spans straight from the model's table (no file): for the timing checks."""
    tb = generate(scenario, requests, seed)
    zipkin = setup(seed)["fmt"] == "zipkin"
    labels = [
        instance({"net.host.ip": ip, "net.host.port": port} if zipkin else attrs)
        for attrs, (_service, ip, port) in zip(tb.resources, tb.endpoints, strict=True)
    ]
    out = []
    for i, (
        trace,
        parent,
        name,
        kind,
        res,
        _scope,
        start,
        end,
        attrs,
        status,
        _msg,
        events,
        _peer,
    ) in enumerate(tb.rows):
        events = [(ts + DEFAULT_START_NS, ev, ea) for ts, ev, ea in events]  # as the writers shift them
        out.append(
            {
                "trace": trace,
                "id": i,
                "parent": parent,
                "name": name,
                "kind": kind,
                "start": start,
                "end": end,
                "duration": end - start,
                "attrs": attrs,
                "status": status,
                "events": events,
                "service": tb.resources[res]["service.name"],
                "instance": labels[res],
            }
        )
    return out


def named(spans: list[dict], name: str, kind: str | None = None) -> list[dict]:
    return [s for s in spans if s["name"].lower() == name.lower() and (kind is None or s["kind"] == kind)]


def children(spans: list[dict]) -> dict:
    out: dict = {}
    for s in spans:
        out.setdefault(s["parent"], []).append(s)
    return out


def p(values, q: float) -> float:
    return float(np.percentile(np.asarray(values, dtype=float), q))


def latencies(spans: list[dict]) -> list[int]:
    return [s["duration"] for s in spans if s["parent"] in (-1, "")]


def test_registered_open_with_steady_eight_causes_and_three_pairs() -> None:
    assert FAMILY in blind.available() and FAMILY not in blind.UNTOUCHED
    assert blind.scenarios(FAMILY) == SCENARIOS
    assert SCENARIOS[0] == "steady" and blind.truth(FAMILY, "steady", 0) == []
    patterns = {c["pattern"] for s in SCENARIOS[1:] if "+" not in s for c in blind.truth(FAMILY, s, 0)}
    assert len(patterns) == 8
    assert sum(len(blind.truth(FAMILY, s, 0)) == 2 for s in SCENARIOS) >= 3
    with pytest.raises(ValueError, match="unknown fraud-check scenario 'gc-storm'"):
        blind.truth(FAMILY, "gc-storm", 0)


@pytest.mark.parametrize(
    ("seed", "scenario"), [(0, "worker-gc"), (1, "worker-recycle"), (2, "worker-gc+vendor-timeouts")]
)
def test_each_format_loads_and_the_truth_names_what_the_run_has(
    tmp_path: Path, seed: int, scenario: str
) -> None:
    spans, summary = load(tmp_path, scenario, 500, seed)
    s = setup(seed)
    assert summary["format"] == s["fmt"] and summary["requests"] == 500
    assert {x["service"] for x in spans} == {"payments-api", "fraud-scorer"}
    scorer = {x["instance"] for x in spans if x["service"] == "fraud-scorer"}
    roots = [x for x in spans if not x["parent"]]
    assert len(roots) == 500 and {x["service"] for x in roots} == {"payments-api"}
    by_id = {x["id"]: x for x in spans}
    servers = named(spans, "POST /v1/score", "Server")
    assert len(servers) == 500 and all(by_id[x["parent"]]["kind"] == "Client" for x in servers)
    # the audit task's PRODUCER span: under the SERVER span, started and ended after the response
    server_of = {x["id"]: x for x in servers}
    published = [x for x in spans if x["kind"] == "Producer"]
    assert len(published) == 500 and all(x["start"] >= server_of[x["parent"]]["end"] for x in published)
    for cause in summary["truth"]:
        assert cause["service"] == "fraud-scorer" and set(cause["instances"]) <= scorer
        assert cause["span"] is None or named(spans, cause["span"])
    n = names(s)
    for key in ("validate", "fetch", "preprocess", "predict", "mget", "select", "insert"):
        assert named(spans, n[key]), key
    assert bool(named(spans, n["receive"])) == s["asgi_spans"]
    gc = [e for x in spans for e in x["events"] if e["Name"] == "gc"]
    assert bool(gc) == s["gc_events"] and all(e["Attributes"].get("gc.generation", "2") == "2" for e in gc)


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_a_leaking_worker_collects_for_long_and_stretches_everything_in_flight_there() -> None:
    spans, steady = table("worker-gc", 0), table("steady", 0)
    (where,) = blind.truth(FAMILY, "worker-gc", 0)[0]["instances"]
    pauses = [e[2]["gc.duration_ms"] for x in spans if x["instance"] == where for e in x["events"]]
    elsewhere = [e[2]["gc.duration_ms"] for x in spans if x["instance"] != where for e in x["events"]]
    assert len(pauses) >= 5 and min(pauses) > 150 and max([*elsewhere, 0]) < 40
    assert max(e[2]["gc.duration_ms"] for x in steady for e in x["events"]) < 40
    # the loop stops: every request in flight there when a collection starts lasts through it
    stops = [
        (e[0] - e[2]["gc.duration_ms"] * MS, e[0])
        for x in spans
        if x["instance"] == where
        for e in x["events"]
    ]
    servers = [x for x in named(spans, "POST /v1/score", "Server") if x["instance"] == where]
    caught = [(x, b - a) for x in servers for a, b in stops if x["start"] < a < x["end"]]
    assert len(caught) >= len(stops) and all(x["duration"] >= pause for x, pause in caught)
    # and a request that arrived during one is read after it: the caller's CLIENT -> SERVER gap
    by_id = {x["id"]: x for x in spans}
    gaps = {x["instance"]: [] for x in servers}
    for x in named(spans, "POST /v1/score", "Server"):
        gaps.setdefault(x["instance"], []).append(x["start"] - by_id[x["parent"]]["start"])
    assert np.mean(np.array(gaps.pop(where)) > 50 * MS) > 0.05
    assert max(max(g) for g in gaps.values()) < 50 * MS
    quiet = table("worker-gc", 1)  # odd seeds report no collections at all
    assert not any(e[1] == "gc" for x in quiet for e in x["events"])
    assert p(latencies(spans), 99) > 2 * p(latencies(steady), 99)


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_vendor_attempts_are_cut_at_the_timeout_with_an_error_and_retried() -> None:
    spans, steady = table("vendor-timeouts", 1), table("steady", 1)
    attempt = names(setup(1))["attempt"]  # "HTTP POST": the Go caller's CLIENT spans too
    spans = [x for x in spans if x["service"] == "fraud-scorer"]
    steady = [x for x in steady if x["service"] == "fraud-scorer"]
    kids = children(spans)
    risk = named(spans, names(setup(1))["risk"])
    failed = [x for x in named(spans, attempt) if x["status"] == "Error"]
    assert len(failed) > 40
    assert all(300 * MS <= x["duration"] < 330 * MS for x in failed)
    assert max(x["duration"] for x in named(spans, attempt)) < 330 * MS  # the timeout caps every attempt
    for x in failed:
        mine = sorted(kids[x["parent"]], key=lambda y: y["start"])
        k = mine.index(x)
        assert k == 0 or mine[k - 1]["status"] == "Unset" or k == 1
        if k == 0:
            assert mine[1]["start"] - x["end"] > 45 * MS  # tenacity's wait, then the second attempt
    assert max(len(kids[r["id"]]) for r in risk) == 2
    assert sum(x["status"] == "Error" for x in named(steady, attempt)) < 0.01 * len(named(steady, attempt))
    assert p(latencies(table("vendor-timeouts", 1)), 99) > 3 * p(latencies(table("steady", 1)), 99)


def _checkout_waits(spans: list[dict], seed: int) -> list[tuple[float, float]]:
    """(start, wait) per request: from the Redis reply to the session's first statement (or connect)."""
    n = names(setup(seed))
    kids = children(spans)
    out = []
    for fetch in named(spans, n["fetch"]):
        mine = kids[fetch["id"]]
        mget = next(x for x in mine if x["name"] == "MGET")
        first = min(x["start"] for x in mine if x["name"] in ("SELECT fraud", "connect"))
        out.append((fetch["start"], first - mget["end"]))
    return out


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_a_pool_of_one_makes_requests_wait_for_a_connection_before_the_query() -> None:
    spans, steady = table("pool-exhaustion", 2), table("steady", 2)
    waits = [w for _, w in _checkout_waits(spans, 2)]
    assert p(waits, 99) > 40 * MS and p([w for _, w in _checkout_waits(steady, 2)], 99) < 5 * MS
    select = [x["duration"] for x in named(spans, "SELECT fraud")]  # the queries themselves are no slower
    assert p(select, 50) == pytest.approx(
        p([x["duration"] for x in named(steady, "SELECT fraud")], 50), rel=0.2
    )
    assert p(latencies(spans), 99) > 1.5 * p(latencies(steady), 99)


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_a_burst_on_single_worker_pods_waits_before_the_handler() -> None:
    spans, steady = table("request-burst", 0), table("steady", 0)
    assert len({x["instance"] for x in spans if x["service"] == "fraud-scorer"}) == setup(0)["pods"]

    def gaps(run: list[dict]) -> np.ndarray:
        by_id = {x["id"]: x for x in run}
        return np.array(
            [
                (by_id[x["parent"]]["start"], x["start"] - by_id[x["parent"]]["start"])
                for x in named(run, "POST /v1/score", "Server")
            ]
        )

    g = gaps(spans)
    bucket = ((g[:, 0] - g[:, 0].min()) // (500 * MS)).astype(int)
    rate = np.bincount(bucket)
    burst = rate[bucket] > 2 * np.median(rate)  # sent in a half-second of more than twice the usual rate
    first = bucket < np.argmax(rate > 2 * np.median(rate))
    assert burst.mean() > 0.1 and first.mean() > 0.1
    in_burst = np.percentile(g[burst, 1], 90)
    assert in_burst > max(15 * MS, 3 * np.percentile(g[first, 1], 90), np.percentile(gaps(steady)[:, 1], 99))
    assert p(latencies(spans), 99) > 2 * p(latencies(steady), 99)


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_an_eviction_wave_sends_profiles_to_the_postgres_aggregates() -> None:
    spans, steady = table("redis-eviction", 1), table("steady", 1)
    fetch = sorted(named(spans, names(setup(1))["fetch"]), key=lambda x: x["start"])
    kids = children(spans)
    missed = np.array([sum(k["name"] == "SELECT fraud" for k in kids[x["id"]]) > 1 for x in fetch])
    sets = np.array([sum(k["name"] == "SET" for k in kids[x["id"]]) for x in fetch])
    assert (sets > 0).tolist() == missed.tolist()  # every fallback is written back
    third = len(fetch) // 4
    assert missed[:third].mean() < 0.12 < 0.6 < missed[int(len(fetch) * 0.35) : int(len(fetch) * 0.6)].mean()
    duration = np.array([x["duration"] for x in fetch])
    assert np.median(duration[missed]) > 15 * MS + np.median(duration[~missed])
    assert p(latencies(spans), 99) > 1.4 * p(latencies(steady), 99)


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_validation_and_aggregation_grow_with_the_history_carried() -> None:
    spans, steady = table("large-histories", 0), table("steady", 0)
    n = names(setup(0))
    for key in ("validate", "preprocess"):
        work = named(spans, n[key])
        items = np.array([x["attrs"]["fraud.history.items"] for x in work])
        took = np.array([x["duration"] for x in work])
        big = items > 100
        assert big.mean() > 0.15 and np.corrcoef(items[big], took[big])[0, 1] > 0.9
        assert p([x["duration"] for x in named(steady, n[key])], 99) < 5 * MS < 50 * MS < took.max()
    assert p(latencies(spans), 99) > 1.5 * p(latencies(steady), 99)


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_throttled_pods_resume_on_their_period_boundaries() -> None:
    spans, steady = table("cpu-throttle", 2), table("steady", 2)
    predict = named(spans, names(setup(2))["predict"])
    aligned = 0
    pods = {x["instance"] for x in predict}
    for pod in pods:
        ends = [x["end"] % 100_000_000 for x in predict if x["instance"] == pod and x["duration"] > 10 * MS]
        assert len(ends) > 5
        bins = np.bincount(np.asarray(ends) // 5_000_000, minlength=20)
        aligned += bins.max() / len(ends) > 0.4  # a stalled predict ends a slice after its pod's boundary
    assert aligned == len(pods)
    assert sum(x["duration"] > 10 * MS for x in named(steady, names(setup(2))["predict"])) < 0.01 * len(
        predict
    )
    assert p(latencies(spans), 99) > 1.4 * p(latencies(steady), 99)


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_recycled_workers_start_cold_and_open_their_connections() -> None:
    spans, steady = table("worker-recycle", 0), table("steady", 0)
    (cause,) = blind.truth(FAMILY, "worker-recycle", 0)
    predict = named(spans, "model.predict")
    for worker in cause["instances"]:
        mine = sorted((x for x in predict if x["instance"] == worker), key=lambda x: x["start"])
        assert len(mine) > 20
        # the first requests overlap (a cold validation delays the very first): the worst of the first three
        assert (
            max(x["duration"] for x in mine[:3])
            > 100 * MS
            > 10 * MS
            > np.median([x["duration"] for x in mine[-10:]])
        )
    # every new process opens its connections; warm ones only for an overflow connection now and then
    assert set(cause["instances"]) <= {x["instance"] for x in named(spans, "connect")}
    assert len(named(steady, "connect")) < 0.005 * len(predict)
    assert p(latencies(spans), 99) > 2 * p(latencies(steady), 99)


def _marked(spans: list[dict], part: str) -> dict:
    """Per trace: whether the planted mechanism `part` touched it (the slow profile lookups, a failed
    vendor attempt, the leaking worker, a wait for a connection, a long history)."""
    seed = 0
    kids = children(spans)
    out: dict = {}
    if part == "worker-gc":
        (where,) = blind.truth(FAMILY, part, seed)[0]["instances"]
        for x in spans:
            out[x["trace"]] = out.get(x["trace"], False) or x["instance"] == where
    elif part == "vendor-timeouts":
        for x in spans:
            out[x["trace"]] = out.get(x["trace"], False) or x["status"] == "Error"
    elif part == "redis-eviction":
        for x in named(spans, names(setup(seed))["fetch"]):
            out[x["trace"]] = sum(k["name"] == "SELECT fraud" for k in kids[x["id"]]) > 1
    elif part == "pool-exhaustion":
        starts = {x["start"]: x["trace"] for x in named(spans, names(setup(seed))["fetch"])}
        out = {starts[t]: w > 10 * MS for t, w in _checkout_waits(spans, seed)}
    elif part == "large-histories":
        out = {x["trace"]: x["attrs"]["fraud.history.items"] > 1000 for x in named(spans, "validate_request")}
    return out


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
@pytest.mark.parametrize("scenario", [s for s in SCENARIOS if "+" in s])
def test_both_causes_of_a_pair_are_in_the_tail(scenario: str) -> None:
    """Each cause of a pair is over-represented among the slowest 2 % of requests (the CFS quota
    touches every request: for it, the tail moves beyond what long histories alone give)."""
    spans, steady = table(scenario, 0), table("steady", 0)
    roots = {x["trace"]: x["duration"] for x in spans if x["parent"] == -1}
    slowest = sorted(roots, key=roots.get)[-len(roots) // 50 :]
    assert p(list(roots.values()), 99) > 2 * p(latencies(steady), 99)
    for part in scenario.split("+"):
        if part == "cpu-throttle":
            assert p(list(roots.values()), 99) > 1.5 * p(latencies(table("large-histories", 0)), 99)
            continue
        marked = _marked(spans, part)
        share = np.mean([marked.get(t, False) for t in slowest])
        assert share > max(0.2, 1.5 * np.mean(list(marked.values()))), (part, share)
