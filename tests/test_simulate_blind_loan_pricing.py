"""The held-out blind family `loan-pricing` (reference_pipeline/simulate/loan_pricing*.py): it writes each
of its formats, loads through the real loader, its truth names spans, services and instances the run
has, and each planted mechanism shows in the timings the way the .NET thread pool, a blocking gen2 GC,
ADO.NET's pool, StackExchange.Redis's multiplexer, a resilience pipeline, Cosmos DB's request units,
tiered JIT or a growing payload would produce it (and a steady run of the same seed does not). No
diagnosis is run here (the family is held out until its honest scores)."""

from __future__ import annotations

import itertools
import random
from collections import defaultdict
from functools import cache
from pathlib import Path

import numpy as np
import pytest

from reference_pipeline.simulate import blind
from reference_pipeline.simulate.loan_pricing import SCENARIOS, generate, setup
from reference_pipeline.simulate.loan_pricing_runtime import (
    ConnectionPool,
    Multiplexer,
    RequestUnits,
    ThreadPool,
)
from reference_pipeline.simulate.loan_pricing_spans import instance_label, names
from reference_pipeline.simulate.trace_table import DEFAULT_START_NS
from tests.blind_support import load_run

# The family's contract test (each seed's format through the real loader, the truth): its physics
# tests below are in the full tier, covered by it (`reason="simulator physics"`, tests/conftest.py).
CONTRACT = (
    "tests/test_simulate_blind_loan_pricing.py::test_each_format_loads_and_the_truth_names_what_the_run_has[0-gen2-blocking-gc+bureau-timeout-retry]",
    "tests/test_simulate_blind_loan_pricing.py::test_each_format_loads_and_the_truth_names_what_the_run_has[1-cold-jit-scale-out]",
    "tests/test_simulate_blind_loan_pricing.py::test_each_format_loads_and_the_truth_names_what_the_run_has[2-redis-head-of-line]",
)

MS = 1e6
FAMILY = "loan-pricing"
N = 1500


@cache
def table(scenario: str, seed: int, requests: int = N) -> list[dict]:
    """The run's spans straight from the model's table (no file): for the timing checks."""
    s = setup(seed)
    tb = generate(scenario, requests, seed)
    labels = [instance_label(s, a, ip, port)
              for a, (_, ip, port) in zip(tb.resources, tb.endpoints, strict=True)]
    out = []
    for i, (trace, parent, name, kind, res, _scope, start, end, attrs, status, _m, events, _p) in enumerate(
            tb.rows):
        out.append({"trace": trace, "id": i, "parent": parent, "name": name, "kind": kind, "start": start,
                    "end": end, "duration": end - start, "attrs": attrs, "status": status,
                    "events": [(ts + DEFAULT_START_NS, ev, ea) for ts, ev, ea in events],
                    "service": tb.resources[res]["service.name"], "instance": labels[res]})
    return out


def named(spans: list[dict], key: str, seed: int = 0) -> list[dict]:
    name = names(setup(seed))[key]
    return [x for x in spans if x["name"] == name and x["service"] != "loan-gateway"]


def p(values, q: float) -> float:
    return float(np.percentile(np.asarray(values, dtype=float), q))


def requests(spans: list[dict]) -> dict[int, float]:
    """Per trace, the latency the caller of the first traced hop saw."""
    return {x["trace"]: x["duration"] for x in spans if x["parent"] == -1}


def api_roots(spans: list[dict], seed: int = 0) -> list[dict]:
    return named(spans, "root", seed)


def test_registered_with_steady_eight_causes_and_three_pairs() -> None:
    assert blind.MODULES[FAMILY] == "loan_pricing"  # held out until its final score (session 8), open since
    assert FAMILY in blind.available() and blind.scenarios(FAMILY) == SCENARIOS
    assert SCENARIOS[0] == "steady" and blind.truth(FAMILY, "steady", 0) == []
    single = [s for s in SCENARIOS[1:] if "+" not in s]
    assert len(single) == 8 and all(len(blind.truth(FAMILY, s, 1)) == 1 for s in single)
    assert sum(len(blind.truth(FAMILY, s, 2)) == 2 for s in SCENARIOS) == 3
    with pytest.raises(ValueError, match="unknown loan-pricing scenario 'gc-storm'"):
        blind.truth(FAMILY, "gc-storm", 0)


def _instance(resource: dict) -> str:
    if "net.host.ip" in resource:
        return f"{resource['net.host.ip']}:{resource['net.host.port']}"
    return resource.get("service.instance.id") or resource["host.name"]


@pytest.mark.parametrize(("seed", "scenario"), [(0, "gen2-blocking-gc+bureau-timeout-retry"),
                                                (1, "cold-jit-scale-out"), (2, "redis-head-of-line")])
def test_each_format_loads_and_the_truth_names_what_the_run_has(
    tmp_path: Path, seed: int, scenario: str
) -> None:
    spans, summary = load_run(tmp_path, FAMILY, scenario, 150, seed, instance=_instance, lists=True)
    s, n = setup(seed), names(setup(seed))
    assert summary["format"] == s["fmt"] and summary["requests"] == 150
    proxied = s["proxy"] == "yarp"
    assert {x["service"] for x in spans} == ({s["service"], "loan-gateway"} if proxied else {s["service"]})
    roots = [x for x in spans if not x["parent"]]
    assert len(roots) == 150 and {x["name"] for x in roots} == {n["proxy"] if proxied else n["root"]}
    for cause in summary["truth"]:
        assert [x for x in spans if x["name"] == cause["span"]], cause
        assert set(cause["instances"]) <= {x["instance"] for x in spans if x["service"] == cause["service"]}
    by_name = defaultdict(list)
    for x in spans:
        by_name[x["name"]].append(x)
    assert all(("db.system" in x["attrs"]) == s["redis_db_system"] for x in by_name[n["redis"]])
    assert all(("db.system" in x["attrs"]) == s["sql_db_system"] for x in by_name[n["sql"]])
    method = "http.request.method" if s["semconv"] == "new" else "http.method"
    assert all(method in x["attrs"] for x in by_name[n["bureau"]])
    gc = [e for x in spans for e in x["events"] if e["Name"] == "dotnet.gc.pause"]
    assert bool(gc) == s["gc_events"]
    if s["fmt"] != "zipkin":
        redis_events = {e["Name"] for x in by_name[n["redis"]] for e in x["events"]}
        assert redis_events == {"Enqueued", "Sent", "ResponseReceived"}


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_starved_pool_delays_each_start_and_await_during_the_burst_and_steady_does_not() -> None:
    spans, steady = table("threadpool-starvation", 0), table("steady", 0)
    ids = {x["id"]: x for x in spans}

    def accept_waits(run: list[dict]) -> list[float]:  # YARP's forwarded call -> Kestrel's request start
        start = {x["id"]: x["start"] for x in run}
        return [x["start"] - start[x["parent"]] for x in api_roots(run)]

    assert p(accept_waits(steady), 99.9) < 2 * MS
    waits = accept_waits(spans)
    assert p(waits, 90) > 300 * MS
    # every await's completion waits as well: the Service Bus send (4 ms of work) stretches with it
    sends = [x["duration"] for x in named(spans, "bus")]
    assert p(sends, 90) > 100 * MS > 10 * p([x["duration"] for x in named(steady, "bus")], 90)
    # the stretched requests are the burst's and after it, not the run's start
    roots = sorted(api_roots(spans), key=lambda x: x["start"])
    assert max(x["start"] - ids[x["parent"]]["start"] for x in roots[:300]) < 10 * MS  # a young GC at most
    assert p(list(requests(spans).values()), 99) > 5 * p(list(requests(steady).values()), 99)


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_blocking_gen2_pauses_stop_one_pod_and_are_reported() -> None:
    spans, steady = table("gen2-blocking-gc", 0), table("steady", 0)
    (victim,) = blind.truth(FAMILY, "gen2-blocking-gc", 0)[0]["instances"]
    long_gc = [(x["instance"], ea) for x in spans for _t, ev, ea in x["events"]
               if ev == "dotnet.gc.pause" and ea["dotnet.gc.pause.time"] > 0.1]
    assert long_gc and {i for i, _ in long_gc} == {victim}
    assert {ea["gc.heap.generation"] for _, ea in long_gc} == {"gen2"}
    assert not [1 for x in steady for _t, ev, ea in x["events"] if ea.get("dotnet.gc.pause.time", 0) > 0.05]
    roots = api_roots(spans)
    slow = [x for x in roots if x["duration"] > p([r["duration"] for r in roots], 98)]
    share = np.mean([x["instance"] == victim for x in slow])
    assert share > 0.7 > np.mean([x["instance"] == victim for x in roots])
    # the credit-bureau call (not traced on its side, untouched by the pause) is stretched on the victim
    bureau = named(spans, "bureau")
    on, off = ([x["duration"] for x in bureau if (x["instance"] == victim) == v] for v in (True, False))
    assert p(on, 99) > p(off, 99) + 100 * MS
    assert p(list(requests(spans).values()), 99) > 1.8 * p(list(requests(steady).values()), 99)


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_exhausted_sql_pool_makes_open_wait_before_the_query_during_the_slow_window() -> None:
    spans, steady = table("sql-pool-exhaustion", 0), table("steady", 0)

    def open_waits(run: list[dict]) -> list[tuple[float, float, float]]:
        sql = {x["parent"]: x for x in named(run, "sql")}
        return [(x["start"], sql[x["id"]]["start"] - x["start"], sql[x["id"]]["duration"])
                for x in named(run, "repo")]

    assert p([w for _, w, _ in open_waits(steady)], 99.9) < 1 * MS
    rows = open_waits(spans)
    waits = np.array([w for _, w, _ in rows])
    assert (waits > 100 * MS).mean() > 0.15 and p(waits, 99) > 1 * 1e9
    # the slowest requests spend more of their time waiting for a connection than in the slow query
    latency = {x["start"]: x["duration"] for x in named(spans, "repo")}
    tail = sorted(rows, key=lambda r: latency[r[0]])[-len(rows) // 20:]
    assert sum(w for _, w, _ in tail) > 1.5 * sum(q for _, _, q in tail)
    # the connections are held by the slow queries: at most Max Pool Size queries in flight per pod
    by_pod = defaultdict(list)
    for x in named(spans, "sql"):
        by_pod[x["instance"]].append((x["start"], x["end"]))
    for intervals in by_pod.values():
        edges = sorted([(a, 1) for a, _ in intervals] + [(b, -1) for _, b in intervals])
        assert max(np.cumsum([d for _, d in edges])) == setup(0)["max_pool"]


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_large_replies_on_the_multiplexer_hold_the_commands_queued_behind_them() -> None:
    spans, steady = table("redis-head-of-line", 0), table("steady", 0)
    gets = named(spans, "redis")
    slow = [x for x in gets if x["duration"] > 20 * MS]
    assert len(slow) > 100
    by_pod = defaultdict(list)
    for x in gets:
        by_pod[x["instance"]].append((x["events"][1][0], x["events"][2][0]))

    def held(x: dict) -> bool:  # sent while an earlier command's reply was still coming, answered after it
        sent, received = x["events"][1][0], x["events"][2][0]
        return any(s < sent < r <= received for s, r in by_pod[x["instance"]])

    assert np.mean([held(x) for x in slow]) > 0.7
    assert p([x["duration"] for x in named(steady, "redis")], 99.9) < 20 * MS
    assert p(list(requests(spans).values()), 99) > 1.5 * p(list(requests(steady).values()), 99)


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_bureau_attempts_are_cut_at_the_attempt_timeout_and_retried() -> None:
    spans, steady = table("bureau-timeout-retry", 0), table("steady", 0)
    calls = defaultdict(list)
    for x in named(spans, "bureau"):
        calls[x["parent"]].append(x)
    cancelled = "System.Threading.Tasks.TaskCanceledException"
    cut = [x for c in calls.values() for x in c if x["attrs"].get("error.type") == cancelled]
    assert len(cut) > 0.05 * len(calls)
    assert min(x["duration"] for x in cut) > 400 * MS
    assert np.mean([x["duration"] < 401 * MS for x in cut]) > 0.9  # a young GC may hold the cancellation
    for c in calls.values():
        c.sort(key=lambda x: x["start"])
        for a, b in itertools.pairwise(c):
            assert a["status"] == "Error" and b["start"] - a["end"] >= 100 * MS  # timeout or 503, backoff
    steady_cut = [x for x in named(steady, "bureau") if x["status"] == "Error"]
    assert len(steady_cut) < 0.01 * len(api_roots(steady))
    assert p(list(requests(spans).values()), 99) > 4 * p(list(requests(steady).values()), 99)


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_throttled_writes_wait_for_the_next_seconds_request_units() -> None:
    spans, steady = table("cosmos-throttling", 0), table("steady", 0)
    writes = named(spans, "cosmos")
    throttled = [x for x in writes if x["attrs"].get("db.cosmosdb.sub_status_code") == 3200]
    assert len(throttled) > 0.1 * len(writes)
    assert not [x for x in named(steady, "cosmos") if "db.cosmosdb.sub_status_code" in x["attrs"]]
    # a retry-after runs to the budget's next second: throttled writes end just after a second boundary
    ends = np.array([(x["end"] % 1e9) / MS for x in throttled])
    assert np.mean(ends < 60) > 0.7
    # the wait grows while the backfill takes the budget
    throttled.sort(key=lambda x: x["start"])
    third = len(throttled) // 3
    assert np.median([x["duration"] for x in throttled[-third:]]) > 1.3 * np.median(
        [x["duration"] for x in throttled[:third]])
    assert p(list(requests(spans).values()), 99) > 3 * p(list(requests(steady).values()), 99)


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_scaled_out_pods_are_slow_for_their_first_requests() -> None:
    spans = table("cold-jit-scale-out", 0)
    new = set(blind.truth(FAMILY, "cold-jit-scale-out", 0)[0]["instances"])
    roots = api_roots(spans)
    assert {x["instance"] for x in roots} >= new
    scores = named(spans, "score")
    for pod in new:
        mine = sorted((x for x in roots if x["instance"] == pod), key=lambda x: x["start"])
        assert mine[0]["start"] > min(x["start"] for x in roots) + 2e9  # joined mid-run
        first, later = [x["duration"] for x in mine[:10]], [x["duration"] for x in mine[60:]]
        assert np.median(first) > 3 * np.median(later)
        own = sorted((x for x in scores if x["instance"] == pod), key=lambda x: x["start"])
        assert own[0]["duration"] > 250 * MS > 10 * MS > np.median([x["duration"] for x in own[60:]])
    old = [x["duration"] for x in scores if x["instance"] not in new]
    assert p(old, 99.9) < 30 * MS


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_serialisation_grows_with_the_quote_payload() -> None:
    spans, steady = table("rate-table-growth", 0), table("steady", 0)
    ser = named(spans, "serialize")
    size = np.array([x["attrs"]["quote.payload_bytes"] for x in ser], dtype=float)
    took = np.array([x["duration"] for x in ser], dtype=float)
    ranks = np.argsort(np.argsort(size)), np.argsort(np.argsort(took))
    assert np.corrcoef(*ranks)[0, 1] > 0.9
    before = max(x["attrs"]["quote.payload_bytes"] for x in named(steady, "serialize"))
    assert size.max() > 1.5e6 > 5e5 > before
    assert p(list(requests(spans).values()), 99) > 1.5 * p(list(requests(steady).values()), 99)


def _marked(scenario: str, spans: list[dict], part: str) -> dict[int, bool]:
    """Per trace: whether `part` of the pair touched it."""
    if part == "bureau-timeout-retry":
        cut = {x["trace"] for x in named(spans, "bureau") if x["status"] == "Error"}
        return {t: t in cut for t in requests(spans)}
    if part == "gen2-blocking-gc":
        return {x["trace"]: any(ea["dotnet.gc.pause.time"] > 0.1 for _t, ev, ea in x["events"]
                                if ev == "dotnet.gc.pause") for x in api_roots(spans)}
    if part == "cold-jit-scale-out":
        new = set(blind.truth(FAMILY, scenario, 0)[0]["instances"])
        firsts: dict[str, list[dict]] = defaultdict(list)
        for x in sorted(api_roots(spans), key=lambda x: x["start"]):
            firsts[x["instance"]].append(x)
        cold = {x["trace"] for pod in new for x in firsts[pod][:40]}
        return {x["trace"]: x["trace"] in cold for x in api_roots(spans)}
    if part == "rate-table-growth":
        return {x["trace"]: x["attrs"]["quote.payload_bytes"] > 1e6 for x in named(spans, "serialize")}
    if part == "cosmos-throttling":
        return {x["trace"]: "db.cosmosdb.sub_status_code" in x["attrs"] and x["duration"] > 200 * MS
                for x in named(spans, "cosmos")}
    sql = {x["parent"]: x for x in named(spans, "sql")}  # sql-pool-exhaustion: Open() waited
    return {x["trace"]: sql[x["id"]]["start"] - x["start"] > 200 * MS for x in named(spans, "repo")}


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
@pytest.mark.parametrize("scenario", [s for s in SCENARIOS if "+" in s])
def test_both_causes_of_a_pair_are_in_the_tail(scenario: str) -> None:
    """Each cause of a pair is over-represented among the slowest 10 % of requests."""
    spans, steady = table(scenario, 0), table("steady", 0)
    roots = requests(spans)
    slowest = sorted(roots, key=roots.get)[-len(roots) // 10:]
    assert p(list(roots.values()), 99) > 2 * p(list(requests(steady).values()), 99)
    for part in scenario.split("+"):
        marked = _marked(scenario, spans, part)
        base = np.mean(list(marked.values()))
        share = np.mean([marked.get(t, False) for t in slowest])
        assert share > max(0.15, 1.5 * base), (part, share, base)


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_the_runtime_models_queue_inject_and_throttle_as_their_systems_do() -> None:
    rng = random.Random(5)
    threads = ThreadPool(2, rng)
    assert threads.acquire(0.0) == 0.0 == threads.acquire(0.0)  # both held (sync-over-async) ...
    threads.release(10e9)
    threads.release(10e9)
    late = threads.acquire(1 * MS)  # ... so the next work item waits for an injected thread
    assert 0.25e9 <= late <= 0.5e9 + MS and threads.threads == 3
    pool = ConnectionPool(size=1, opened=0)
    first, opened = pool.open(0.0, rng)
    assert opened and 18 * MS <= first <= 45 * MS  # a new physical connection: TLS + login
    pool.close(100e9)
    assert pool.open(1e9, rng) == (100e9, False)  # Max Pool Size reached: Open() waits for the one
    pool.give_up(100e9)
    assert pool.open(101e9, rng) == (101e9, False)
    units = RequestUnits(100.0, None)
    accepted = [units.write(rng, 0.1e9, 10.0) for _ in range(11)]
    assert all(a == (0.1e9, 0) for a in accepted[:10])
    assert accepted[10][0] >= 1e9 and accepted[10][1] == 1  # 429, retried once the next second began
    mux = Multiplexer(rng)
    _sent, big = mux.command(0.0, 4e6)
    _sent, small = mux.command(1 * MS, 100.0)
    assert big > 80 * MS and small >= big  # a reply is read only after the replies written before it
