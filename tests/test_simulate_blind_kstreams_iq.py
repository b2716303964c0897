"""The blind family `kstreams-iq` (simulate/kstreams_iq.py; open since its scores): each seed's
format loads through the real loader with its conventions, the truth names spans, services and
instances the run has, and each planted mechanism shows in the timings the way a Kafka Streams
restart and restoration, RocksDB's L0 write stalls, a thrashed block cache, a hot task's commit
flushes, CFS throttling, a blocked Netty event loop, a small R2DBC pool, BentoML's batching wait, a
saturated runner or G1's humongous allocations would produce it (a steady run of the same seed does
not). Three runs go through the loader; the other mechanisms are read from the generated table."""

from __future__ import annotations

from functools import cache

import numpy as np
import pytest

from reference_pipeline.simulate import blind, kstreams_iq
from reference_pipeline.simulate import kstreams_iq_flow as flow
from reference_pipeline.simulate import kstreams_iq_spans as sp
from tests.blind_support import instance_label, kids, load_run, named, p, table_span_dicts

CONTRACT = (
    "tests/test_simulate_blind_kstreams_iq.py::test_each_format_loads_with_its_seeds_conventions_and_the_truth_names_what_the_run_has",
)
MS = 1e6
FAMILY = "kstreams-iq"


@cache
def table_spans(scenario: str, requests: int, seed: int) -> tuple[dict, ...]:
    return table_span_dicts(kstreams_iq, scenario, requests, seed)


def roots(spans) -> list[dict]:
    return [s for s in spans if s["parent"] == -1]


def queries(spans, seed: int) -> list[dict]:
    """The spans in which a store was read: the owner's internal route, or the public route where the
    receiving instance answered itself (no traced hop under it)."""
    st = kstreams_iq.style(seed)
    children = kids(spans)
    out = named(spans, st.internal, "Server")
    for s in named(spans, st.public, "Server"):
        if not any(c["kind"] == "Client" for c in children.get(s["i"], [])):
            out.append(s)
    return [s for s in out if s["status"] != "Error"]


def card_task(spans) -> dict[int, int]:
    """trace -> the task of its card (from the API's GET url)."""
    out = {}
    for s in spans:
        url = s["attrs"].get("url.full") or s["attrs"].get("http.url") or ""
        if "/v1/cards/" in url:
            out[s["trace"]] = int(url.split("/v1/cards/")[1].split("/")[0]) % flow.TASKS
    return out


@pytest.fixture(scope="module")
def loaded(tmp_path_factory) -> dict[int, tuple[list[dict], dict]]:
    tmp = tmp_path_factory.mktemp("kstreams-iq")
    runs = {0: ("rebalance-restore", 700), 1: ("g1-humongous", 400), 2: ("batch-wait", 400)}
    return {seed: load_run(tmp, FAMILY, scenario, n, seed, instance=instance_label)
            for seed, (scenario, n) in runs.items()}


def test_each_format_loads_with_its_seeds_conventions_and_the_truth_names_what_the_run_has(loaded) -> None:
    assert FAMILY not in blind.UNTOUCHED and blind.scenarios(FAMILY) == kstreams_iq.SCENARIOS
    assert blind.MODULES[FAMILY] == "kstreams_iq" and FAMILY in blind.available()
    assert len(kstreams_iq.SINGLES) == 10 and len(kstreams_iq.PAIRS) == 3
    assert kstreams_iq.SCENARIOS[0] == "steady"
    for seed, (spans, summary) in loaded.items():
        s, st = kstreams_iq.setup(seed), kstreams_iq.style(seed)
        assert summary["format"] == s["fmt"]
        top = [x for x in spans if not x["parent"]]
        assert len(top) == summary["requests"] and {x["name"].lower() for x in top} == {st.root.lower()}
        services = {x["service"] for x in spans}
        assert services == ({sp.API, sp.STREAMS, sp.BENTO} if st.bento_spans else {sp.API, sp.STREAMS})
        names = {x["name"].lower() for x in spans}
        assert (st.internal.lower() in names) == st.hop_traced
        assert (sp.RUNNER_SPAN.lower() in names) == st.bento_spans
        gets = [x for x in spans if x["name"].lower() == st.get.lower() and x["service"] == sp.API]
        assert ("http.request.method" in gets[0]["attrs"]) == (s["names"] == "agent")
        assert ("service.instance.id" in top[0]["resource"]) == (s["ident"] == "pod")
        assert ("jvm.gc.pause.count" in top[0]["attrs"]) == (s["gc"] == "attrs")
        events = [x for x in spans if x["events"] not in (None, "", "[]")]
        assert bool(events) == (s["gc"] == "events") and all(sp.GC_EVENT in x["events"] for x in events)
        have: dict[str, set[str]] = {}
        for x in spans:
            have.setdefault(x["service"], set()).add(x["instance"])
        assert have[sp.API] == {st.label(sp.API, k) for k in range(flow.API_PODS)}
        assert have[sp.STREAMS] <= {st.label(sp.STREAMS, k) for k in range(flow.INSTANCES)}
        for scenario in kstreams_iq.SCENARIOS:
            for cause in kstreams_iq.truth(scenario, seed):
                assert cause.span.lower() in names, (scenario, cause)
                assert cause.service in services and cause.instances, (scenario, cause)
                if cause.service != sp.STREAMS:  # a restarted streams pod may have served nothing yet
                    assert set(cause.instances) <= have[cause.service], (scenario, cause)
                assert cause.stage in (None, "queue", "feature_hydration", "model_forward")
    spans, _ = loaded[0]  # the restart: 503s under the retried GETs, and a fallback
    st = kstreams_iq.style(0)
    failed = [x for x in spans if x["name"] == st.get and x["service"] == sp.API and x["status"] == "Error"]
    assert len(failed) > 10
    a, b = kstreams_iq.generate("steady", 200, 3), kstreams_iq.generate("steady", 200, 3)
    assert a.rows == b.rows and a.trace_ids == b.trace_ids
    with pytest.raises(ValueError, match="unknown kstreams-iq scenario"):
        kstreams_iq.truth("healthy", 0)


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
@pytest.mark.parametrize("seed", [0, 1])
def test_a_restart_makes_the_instances_tasks_fail_fast_and_the_api_retry_with_back_off(seed: int) -> None:
    spans = table_spans("rebalance-restore", 2000, seed)
    st = kstreams_iq.style(seed)
    tasks = card_task(spans)
    gets = [x for x in named(spans, st.get, "Client") if x["service"] == sp.API]
    bad = [x for x in gets if x["status"] == "Error"]
    assert len(bad) > 20 and {flow.owner(tasks[x["trace"]]) for x in bad} == {flow.RESTART}
    assert p([x["duration"] for x in bad], 90) < 10 * MS  # a 503 is fast: the time is in the back-off
    by_trace: dict[int, list[dict]] = {}
    for x in gets:
        by_trace.setdefault(x["trace"], []).append(x)
    gaps = [b["start"] - a["end"] for xs in by_trace.values() if len(xs) > 1
            for a, b in zip(sorted(xs, key=lambda x: x["start"]), sorted(xs, key=lambda x: x["start"])[1:],
                            strict=False)]
    assert min(gaps) > 20 * MS and max(gaps) < 320 * MS
    window = (max(x["start"] for x in bad) - min(x["start"] for x in bad)) / 1e9
    # static membership (seed 0): gone, then restoring (~7 s); standbys (seed 1): only the rebalance
    assert (window > 5.0) if seed == 0 else (window < 3.2)
    steady = named(table_spans("steady", 2000, seed), st.get, "Client")
    assert not [x for x in steady if x["status"] == "Error"]


def _by_instance(spans, seed: int) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {}
    for x in queries(spans, seed):
        out.setdefault(x["instance"], []).append(x["duration"])
    return out


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_l0_write_stalls_hold_one_instances_queries_behind_its_flushes() -> None:
    st = kstreams_iq.style(0)
    w = st.label(sp.STREAMS, flow.L0_INSTANCE)
    got = _by_instance(table_spans("l0-write-stall", 2000, 0), 0)
    stalled = got.pop(w)
    assert max(stalled) > 100 * MS and p(stalled, 99) > 5 * max(p(v, 99) for v in got.values())
    assert p(_by_instance(table_spans("steady", 2000, 0), 0)[w], 99) < 10 * MS


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_a_longer_retention_thrashes_every_instances_block_cache() -> None:
    thrash = _by_instance(table_spans("retention-thrash", 1500, 0), 0)
    steady = _by_instance(table_spans("steady", 1500, 0), 0)
    for k, v in thrash.items():
        assert p(v, 50) > 3 * p(steady[k], 50) and p(v, 95) > 4 * MS, k


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_a_hot_tasks_commit_flushes_make_only_its_queries_wait_for_the_lock() -> None:
    spans = table_spans("hot-card", 2000, 0)
    tasks = card_task(spans)
    hot = [x["duration"] for x in queries(spans, 0) if tasks[x["trace"]] == flow.HOT_TASK]
    same = [x["duration"] for x in queries(spans, 0) if tasks[x["trace"]] != flow.HOT_TASK
            and flow.owner(tasks[x["trace"]]) == flow.owner(flow.HOT_TASK)]
    assert p(hot, 75) > 8 * MS and p(same, 75) < 1.5 * MS and max(hot) < 300 * MS


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_throttled_instances_read_a_query_only_when_the_next_cfs_period_begins() -> None:
    def reads(scenario):
        """(the API's GET start -> its server span's start, that start) per answered GET."""
        spans = table_spans(scenario, 2000, 2)
        children = kids(spans)
        return [(c["start"] - x["start"], c["start"]) for x in named(spans, "http get", "Client")
                if x["service"] == sp.API for c in children.get(x["i"], [])]

    late = [(wait, start) for wait, start in reads("punctuator-throttle") if wait > 5 * MS]
    assert len(late) > 30
    starts = np.asarray([start % (100 * MS) for _, start in late])
    assert np.mean(starts < 3 * MS) > 0.5  # throttled until a 100 ms period's quota arrives
    assert p([wait for wait, _ in reads("steady")], 99) < 2 * MS


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_a_blocked_event_loop_delays_requests_and_continuations_without_a_span_of_its_own() -> None:
    def gaps(scenario):
        spans = table_spans(scenario, 2000, 0)
        children = kids(spans)
        lead, cont = [], []
        for r in roots(spans):
            feats = min(children[r["i"]], key=lambda x: x["start"])
            lead.append(feats["start"] - r["start"])
            # the GET's response handled on the loop: the last GET's end -> the features' end
            cont.append(feats["end"] - max(x["end"] for x in children[feats["i"]]))
        return lead, cont

    lead, cont = gaps("loop-blocked")
    assert p(lead, 85) > 5 * MS and p(cont, 99) > 5 * MS
    lead, cont = gaps("steady")
    assert p(lead, 99) < 2 * MS and p(cont, 98) < 1 * MS


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_a_replay_burst_waits_for_a_pooled_connection_before_the_insert() -> None:
    def waits(scenario):
        spans = table_spans(scenario, 2000, 0)
        st = kstreams_iq.style(0)
        children = kids(spans)
        out, inserts = [], []
        for r in roots(spans):
            by = {x["name"]: x for x in children[r["i"]]}
            out.append(by[st.insert]["start"] - by[st.post]["end"])
            inserts.append(by[st.insert]["duration"])
        return out, inserts

    wait, insert = waits("r2dbc-pool")
    steady_wait, steady_insert = waits("steady")
    assert p(wait, 90) > 5 * MS and p(steady_wait, 99) < 2 * MS
    assert p(insert, 50) < 1.3 * p(steady_insert, 50)  # the query itself is no slower


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_retuned_batching_waits_to_fill_bigger_batches(loaded) -> None:
    spans, _ = loaded[2]
    runner = [x for x in spans if x["name"].lower() == sp.RUNNER_SPAN.lower()]
    wait = [float(x["attrs"]["bentoml.adaptive_batching.wait_ms"]) for x in runner]
    size = [int(x["attrs"]["bentoml.adaptive_batching.batch_size"]) for x in runner]
    steady = [x for x in table_spans("steady", 400, 2) if x["name"] == sp.RUNNER_SPAN]
    assert p(wait, 50) > 8 and p([x["attrs"]["bentoml.adaptive_batching.wait_ms"] for x in steady], 90) < 5
    assert p(size, 50) > 3 * p([x["attrs"]["bentoml.adaptive_batching.batch_size"] for x in steady], 50)


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_a_heavier_model_makes_batches_slow_and_queues_build_in_the_traffics_wave() -> None:
    runner = named(table_spans("runner-cpu", 2000, 0), sp.RUNNER_SPAN)
    steady = named(table_spans("steady", 2000, 0), sp.RUNNER_SPAN)
    assert p([x["duration"] for x in runner], 50) > 2.5 * p([x["duration"] for x in steady], 50)
    wait = [x["attrs"]["bentoml.adaptive_batching.wait_ms"] for x in runner]
    assert p(wait, 99) > 20 and p(wait, 99) > 4 * p([x["attrs"]["bentoml.adaptive_batching.wait_ms"]
                                                     for x in steady], 99)


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_humongous_allocations_bring_full_gcs_on_the_canary_pods_only() -> None:
    spans = table_spans("g1-humongous", 2000, 0)  # JFR-style events on the server spans
    (cause,) = kstreams_iq.truth("g1-humongous", 0)
    events = [(x["instance"], ev[2]) for x in roots(spans) for ev in x["events"]]
    full = {i for i, e in events if e["jfr.name"] == "G1Full"}  # rare in a root: requests arriving in a
    humongous = {i for i, e in events if e["jfr.cause"] == "G1 Humongous Allocation"}  # pause start after it
    assert full <= set(cause.instances) and humongous == set(cause.instances)
    tops = roots(spans)
    canary = [x["duration"] for x in tops if x["instance"] in cause.instances]
    other = [x["duration"] for x in tops if x["instance"] not in cause.instances]
    assert p(canary, 99) > 1.3 * p(other, 99)
    last: dict[str, dict] = {}  # counters on seed 1 (Jaeger): the canaries' pause time is far larger
    for x in table_spans("g1-humongous", 2000, 1):
        if x["parent"] == -1 and (x["instance"] not in last or x["end"] > last[x["instance"]]["end"]):
            last[x["instance"]] = x
    (cause,) = kstreams_iq.truth("g1-humongous", 1)
    paused = {k: float(x["attrs"]["jvm.gc.pause.total_ms"]) for k, x in last.items()}
    others = [v for k, v in paused.items() if k not in cause.instances]
    assert min(paused[k] for k in cause.instances) > 3 * max(others)


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_every_planted_cause_moves_the_p99_of_its_seed(seed: int) -> None:
    def p99(scenario):
        return p([x["duration"] for x in roots(table_spans(scenario, 2000, seed))], 99)

    base = p99("steady")
    for scenario in kstreams_iq.SINGLES:
        assert p99(scenario) > 1.25 * base, scenario


def _signature(part: str, spans, seed: int) -> bool:
    st = kstreams_iq.style(seed)
    if part == "rebalance-restore":
        return any(x["status"] == "Error" for x in named(spans, st.get, "Client"))
    if part == "g1-humongous":
        causes = {ev[2]["jfr.cause"] for x in roots(spans) for ev in x["events"]}
        return "G1 Humongous Allocation" in causes
    if part == "retention-thrash":
        return p([x["duration"] for x in queries(spans, seed)], 50) > 1 * MS
    if part == "runner-cpu":
        return p([x["duration"] for x in named(spans, sp.RUNNER_SPAN)], 50) > 8 * MS
    if part == "hot-card":
        tasks = card_task(spans)
        hot = [x["duration"] for x in queries(spans, seed) if tasks[x["trace"]] == flow.HOT_TASK]
        return p(hot, 75) > 5 * MS
    assert part == "r2dbc-pool"
    children = kids(spans)
    waits = []
    for r in roots(spans):
        by = {x["name"]: x for x in children[r["i"]]}
        waits.append(by[st.insert]["start"] - by[st.post]["end"])
    return p(waits, 90) > 5 * MS


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
@pytest.mark.parametrize("pair", kstreams_iq.PAIRS)
def test_a_two_cause_run_has_both_mechanisms_and_steady_has_neither(pair: str) -> None:
    parts = pair.split("+")
    singles = [kstreams_iq.truth(x, 0)[0].pattern for x in parts]
    assert [c.pattern for c in kstreams_iq.truth(pair, 0)] == singles
    both, steady = table_spans(pair, 2000, 0), table_spans("steady", 2000, 0)
    for part in parts:
        assert _signature(part, both, 0) and not _signature(part, steady, 0), part
