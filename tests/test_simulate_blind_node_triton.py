"""The blind family `node-triton` (reference_pipeline/simulate/node_triton.py; held out): each seed's
format loads through the real loader with its conventions, the truth names spans, services and
instances the run has, and each planted mechanism shows in the timings the way Node's one JavaScript
thread, libuv's threadpool, V8's collector, Triton's batcher and GPUs, the verdict cache, the pg pool,
the reputation agent's timeouts or kube-proxy's connection spread would produce it (a steady run of
the same seed does not). Three runs go through the loader; the others are read from the generated
table, to keep the file fast."""

from __future__ import annotations

from functools import cache

import numpy as np
import orjson
import pytest

from reference_pipeline.simulate import blind, node_triton
from reference_pipeline.simulate import node_triton_spans as sp
from tests.blind_support import instance_label, kids, load_run, named, p, table_span_dicts

# The family's contract test (each seed's format through the real loader, the truth): its physics
# tests below are in the full tier, covered by it (`reason="simulator physics"`, tests/conftest.py).
CONTRACT = (
    "tests/test_simulate_blind_node_triton.py::test_each_format_loads_with_its_seeds_conventions_and_the_truth_names_what_the_run_has",
)

MS = 1e6
FAMILY = "node-triton"
STAGES = ("queue", "parsing", "serialization", "downstream", "model_forward", None)
N = 600  # requests of a table run


@cache
def spans_of(scenario: str, seed: int, requests: int = N) -> tuple[dict, ...]:
    return table_span_dicts(node_triton, scenario, requests, seed)


def run_ns(seed: int, requests: int = N) -> float:
    return requests / node_triton.setup(seed)["rps"] * 1e9


def roots(spans, seed: int) -> list[dict]:
    return named(spans, node_triton.style(seed).root, "Server")


def callers(spans) -> list[dict]:
    return [x for x in spans if x["service"] == sp.CALLER]


@pytest.fixture(scope="module")
def loaded(tmp_path_factory) -> dict[int, tuple[list[dict], dict]]:
    tmp = tmp_path_factory.mktemp("node-triton")
    runs = {0: ("heap-limit-gc", 400), 1: ("batcher-delay", 300), 2: ("reputation-timeouts", 300)}
    return {seed: load_run(tmp, FAMILY, scenario, n, seed, instance=instance_label, lists=True)
            for seed, (scenario, n) in runs.items()}


def test_each_format_loads_with_its_seeds_conventions_and_the_truth_names_what_the_run_has(loaded) -> None:
    assert FAMILY not in blind.UNTOUCHED and blind.MODULES[FAMILY] == "node_triton"  # open now
    assert blind.scenarios(FAMILY) == node_triton.SCENARIOS and node_triton.SCENARIOS[0] == "steady"
    assert len(node_triton.SINGLES) == 10 and len(node_triton.PAIRS) == 3
    for seed, (spans, summary) in loaded.items():
        s, style = node_triton.setup(seed), node_triton.style(seed)
        assert summary["format"] == s["fmt"]
        services = {x["service"] for x in spans}
        assert services == ({sp.CALLER, sp.BFF, sp.TRITON} if style.triton != "none" else {sp.CALLER, sp.BFF})
        top = [x for x in spans if not x["parent"]]
        assert len(top) == summary["requests"] and {x["service"] for x in top} == {sp.CALLER}
        assert len(roots(spans, seed)) == summary["requests"]
        names = {x["name"].lower() for x in spans}
        assert (sp.DNS in names) == style.dns and (sp.COMPRESS.lower() in names) == style.hooks
        assert (sp.COMPUTE in names) == (style.triton == "children")
        gc = [ev for x in roots(spans, seed) for ev in x["events"] if ev["Name"] == sp.GC_EVENT]
        assert bool(gc) == style.gc  # OTLP events or Zipkin annotations; never spans
        assert not any(x["name"].startswith("v8") or "gc" in x["name"] for x in spans)
        insert = named(spans, style.insert)[0]["attrs"]
        assert ("db.query.text" in insert and "server.address" in insert) == (s["semconv"] == "new")
        assert ("db.statement" in insert and "net.peer.name" in insert) == (s["semconv"] == "old")
        labels = {svc: {x["instance"] for x in spans if x["service"] == svc} for svc in services}
        assert len(labels[sp.BFF]) == s["bff_pods"]
        if style.triton != "none":
            assert len(labels[sp.TRITON]) == s["triton_pods"]
        if s["ident"] == "instance-id":
            assert "service.instance.id" in top[0]["resource"]
        for scenario in node_triton.SCENARIOS:
            for cause in node_triton.truth(scenario, seed):
                assert cause.span.lower() in names, (seed, scenario, cause)
                assert cause.service in services and set(cause.instances) <= labels[cause.service], cause
                assert cause.stage in STAGES and cause.pattern not in cause.accept, cause
    events = [ev for x in loaded[1][0] if x["name"] == "text_classifier" for ev in x["events"]]
    assert {ev["Name"] for ev in events} == {"QUEUE_START", "COMPUTE_START", "COMPUTE_END"}
    with pytest.raises(ValueError, match="unknown node-triton scenario"):
        node_triton.truth("healthy", 0)


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_back_to_back_major_gcs_stall_one_pod_and_are_reported_as_span_events(loaded) -> None:
    spans, _ = loaded[0]
    (cause,) = node_triton.truth("heap-limit-gc", 0)
    majors: dict[str, set[float]] = {}
    for root in roots(spans, 0):
        for ev in root["events"]:
            if ev["Attributes"]["v8.gc.type"] == "major":
                majors.setdefault(root["instance"], set()).add(float(ev["Attributes"]["v8.gc.duration_ms"]))
    assert {pod for pod, ds in majors.items() if max(ds) > 100} == set(cause.instances)
    table = spans_of("heap-limit-gc", 2)  # every span of the pod is stretched, the other pods' are not
    (cause,) = node_triton.truth("heap-limit-gc", 2)
    start = min(x["start"] for x in table)
    late = [x for x in roots(table, 2) if x["start"] - start > 0.35 * run_ns(2)]
    mine = [x["duration"] for x in late if x["instance"] in cause.instances]
    others = [x["duration"] for x in late if x["instance"] not in cause.instances]
    assert p(mine, 95) > 100 * MS and p(mine, 95) > 2 * p(others, 95) and p(others, 95) < 100 * MS
    steady = [x for x in spans_of("steady", 0) if x["events"]]
    gcs = [a["v8.gc.duration_ms"] for x in steady for _t, name, a in x["events"] if name == sp.GC_EVENT]
    assert gcs and max(gcs) < 80


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_a_long_max_queue_delay_holds_every_text_request_in_the_batcher(loaded) -> None:
    spans, _ = loaded[1]

    def waits(events):
        at = {ev["Name"]: ev["Timestamp"] for ev in events}
        return (at["COMPUTE_START"] - at["QUEUE_START"]) / MS

    held = [waits(x["events"]) for x in spans if x["name"] == "text_classifier"]
    assert p(held, 50) > 30 and p(held, 90) > 60
    steady = spans_of("steady", 0)  # queue: from the model span's start to its compute child's
    computes = {x["parent"]: x for x in named(steady, sp.COMPUTE)}
    queued = [(computes[x["i"]]["start"] - x["start"]) / MS for x in named(steady, "text_classifier")]
    assert p(queued, 90) < 10
    vision = [waits(x["events"]) for x in spans if x["name"] == "vision_classifier"]
    assert p(vision, 50) < 10  # only text_classifier's batcher changed


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_timed_out_reputation_calls_end_at_the_timeout_in_error_and_are_retried(loaded) -> None:
    spans, _ = loaded[2]
    by_parent: dict[str, list[dict]] = {}
    for x in spans:
        by_parent.setdefault(x["parent"], []).append(x)
    calls = [x for x in spans if x["name"] == "get" and "http.url" in x["attrs"]]  # Zipkin: not ioredis' get
    failed = [x for x in calls if x["status"] == "Error"]
    assert len(failed) > 10 and all(abs(x["duration"] - 250 * MS) < 3 * MS for x in failed)
    for handler in {x["parent"] for x in failed}:
        tries = sorted((x for x in calls if x["parent"] == handler), key=lambda x: x["start"])
        assert tries[0]["status"] == "Error" and len(tries) == 2 and tries[1]["start"] >= tries[0]["end"]
    steady = spans_of("steady", 2)
    assert sum(x["name"] == "GET" and x["status"] == "Error" for x in steady) <= 2
    # each timeout destroys its socket: the agent connects (dns.lookup first) far more often
    lookups = sum(x["name"] == sp.DNS for x in spans)
    assert lookups > 0.5 * len(failed) and lookups > 3 * sum(x["name"] == sp.DNS for x in steady)


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_a_bulk_json_body_blocks_its_process_event_loop_for_every_request_in_flight() -> None:
    spans = spans_of("large-json-bodies", 0)
    handler = {x["parent"]: x for x in named(spans, sp.HANDLER)}
    body = "http.request.body.size"
    bulk = [x for x in roots(spans, 0) if x["attrs"][body] > 2_000_000]
    assert len(bulk) >= 1
    for x in bulk:  # JSON.parse at ~70 MB/s before the handler starts
        assert handler[x["i"]]["start"] - x["start"] > x["attrs"][body] / 70e3 * MS * 0.9
    parent = {x["i"]: x for x in callers(spans)}
    blocks = [(handler[x["i"]]["start"] - x["attrs"][body] / 70e3 * MS, handler[x["i"]]["start"],
               x["instance"]) for x in bulk]
    # a request that reaches the pod while its thread parses cannot even start its server span
    waited = [r["start"] - parent[r["parent"]]["start"] for r in roots(spans, 0) if any(
        r["instance"] == pod and a + 5 * MS < parent[r["parent"]]["start"] < b - 5 * MS
        for a, b, pod in blocks)]
    assert len(waited) >= 5 and np.median(waited) > 10 * MS
    steady = spans_of("steady", 0)
    first = {x["i"]: x for x in callers(steady)}
    assert p([r["start"] - first[r["parent"]]["start"] for r in roots(steady, 0)], 95) < 8 * MS


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_gzip_of_large_responses_fills_the_threadpool_and_small_responses_wait_for_a_thread() -> None:
    spans = spans_of("gzip-threadpool", 0)
    start = min(x["start"] for x in spans)
    late = [x for x in named(spans, sp.COMPRESS) if x["start"] - start > 0.4 * run_ns(0)]
    parent = {x["i"]: x for x in roots(spans, 0)}
    small = [x["duration"] for x in late if parent[x["parent"]]["attrs"]["http.response.body.size"] < 10_000]
    steady = [x["duration"] for x in named(spans_of("steady", 0), sp.COMPRESS)]
    assert p(small, 90) > 5 * MS and p(steady, 90) < 1 * MS and p(steady, 99) < 5 * MS
    sizes = [x["attrs"]["http.response.body.size"] for x in parent.values()]
    steady_sizes = [r["attrs"]["http.response.body.size"] for r in roots(spans_of("steady", 0), 0)]
    assert max(sizes) > 1_000_000 > max(steady_sizes)


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_a_reloaded_model_runs_its_first_batches_cold_then_warms() -> None:
    spans = spans_of("model-reload", 0)
    kids_of = kids(spans)
    batches: dict[str, dict[str, dict[float, float]]] = {}  # pod -> version -> batch start -> compute time
    for x in named(spans, "text_classifier"):
        (compute,) = kids_of[x["i"]]
        pod = batches.setdefault(x["instance"], {"1": {}, "2": {}})
        pod[x["attrs"]["triton.model_version"]][compute["start"]] = compute["duration"]
    assert len(batches) == node_triton.setup(0)["triton_pods"]
    for pod in batches.values():
        old = list(pod["1"].values())
        new = [d for _, d in sorted(pod["2"].items())]
        assert len(old) > 5 and len(new) > 3
        # the first run creates the context and loads kernels; the backlog it left drains in batches
        # that shrink back towards the old version's
        assert new[0] > 250 * MS > 10 * np.median(old) and new[-1] < 0.5 * new[0]
    steady = [x["duration"] for x in named(spans_of("steady", 0), sp.COMPUTE)]
    assert max(steady) < 100 * MS


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_a_second_model_on_the_same_gpu_slows_every_text_batch_after_the_move() -> None:
    def ratio(scenario):
        spans = spans_of(scenario, 0)
        start = min(x["start"] for x in spans)
        models = {x["i"] for x in named(spans, "text_classifier")}
        compute = [(x["start"] - start, x["duration"]) for x in named(spans, sp.COMPUTE)
                   if x["parent"] in models]
        before = [d for t, d in compute if t < 0.28 * run_ns(0)]
        after = [d for t, d in compute if t > 0.35 * run_ns(0)]
        return np.median(after) / np.median(before)

    assert ratio("shared-gpu") > 1.5 and 0.75 < ratio("steady") < 1.3


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_an_evicted_verdict_cache_sends_nearly_every_request_to_the_model() -> None:
    def miss_share(scenario, a, b):
        spans = spans_of(scenario, 2)
        start = min(x["start"] for x in spans)
        handlers = [x for x in named(spans, sp.HANDLER) if a < (x["start"] - start) / run_ns(2) < b]
        infer = {x["parent"] for x in named(spans, "POST", "Client", sp.BFF)}
        assert all((x["i"] in infer) == (not x["attrs"]["moderation.verdict.cached"]) for x in handlers)
        return np.mean([x["i"] in infer for x in handlers])

    assert 0.3 < miss_share("verdict-eviction", 0.0, 0.28) < 0.5
    assert miss_share("verdict-eviction", 0.3, 0.45) > 0.85
    assert 0.3 < miss_share("steady", 0.3, 0.45) < 0.5


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_slow_audit_commits_exhaust_the_pg_pool_and_requests_wait_for_a_connection() -> None:
    spans = spans_of("audit-pool", 2)
    start = min(x["start"] for x in spans)
    late = [x["duration"] for x in named(spans, sp.POOL) if x["start"] - start > 0.5 * run_ns(2)]
    inserts = [x["duration"] for x in named(spans, "pg.query:INSERT") if x["start"] - start > 0.5 * run_ns(2)]
    assert p(inserts, 50) > 40 * MS and p(late, 90) > 10 * MS
    steady = [x["duration"] for x in named(spans_of("steady", 2), sp.POOL)]
    assert p(steady, 95) < 1 * MS


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_after_a_rollout_one_pod_holds_most_connections_and_requests_wait_before_its_server_span() -> None:
    spans = spans_of("keepalive-skew", 2)
    (cause,) = node_triton.truth("keepalive-skew", 2)
    parent = {x["i"]: x for x in callers(spans)}
    wait: dict[str, list[float]] = {}
    for r in roots(spans, 2):
        wait.setdefault(r["instance"], []).append(r["start"] - parent[r["parent"]]["start"])
    hot = cause.instances[0]
    assert len(wait[hot]) > 0.4 * N
    assert all(p(wait[hot], 90) > 5 * p(v, 90) for pod, v in wait.items() if pod != hot)
    counts = [sum(r["instance"] == pod for r in roots(spans_of("steady", 2), 2)) for pod in wait]
    assert max(counts) < 0.5 * N


_ON_SEED_0 = ("large-json-bodies", "gzip-threadpool", "model-reload", "batcher-delay", "shared-gpu")
_ON_SEED_2 = tuple(x for x in node_triton.SINGLES if x not in _ON_SEED_0)


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
@pytest.mark.parametrize(("seed", "scenarios"), [(0, _ON_SEED_0), (2, _ON_SEED_2)])
def test_every_planted_cause_moves_the_p99_of_its_seed(seed: int, scenarios: tuple[str, ...]) -> None:
    def p99(scenario):
        return p([x["duration"] for x in callers(spans_of(scenario, seed))], 99)

    base = p99("steady")
    for scenario in scenarios:
        assert p99(scenario) > 1.3 * base, scenario


def _signature(part: str, spans, seed: int) -> bool:
    """Whether a run shows one mechanism's mark (the single-cause tests above check each in depth)."""
    style = node_triton.style(seed)
    if part == "reputation-timeouts":
        return sum(x["status"] == "Error" for x in named(spans, "GET", "Client")) > 10
    if part == "heap-limit-gc":
        (cause,) = node_triton.truth(part, seed)
        mine = [x["duration"] for x in roots(spans, seed) if x["instance"] in cause.instances]
        return p(mine, 95) > 100 * MS
    if part == "verdict-eviction":
        return np.mean([not x["attrs"]["moderation.verdict.cached"] for x in named(spans, sp.HANDLER)]) > 0.6
    if part == "batcher-delay":
        return p([x["duration"] for x in named(spans, style.model_span("text"))], 50) > 30 * MS
    if part == "keepalive-skew":
        (cause,) = node_triton.truth(part, seed)
        return np.mean([x["instance"] in cause.instances for x in roots(spans, seed)]) > 0.4
    assert part == "model-reload"
    return any(x["attrs"]["triton.model_version"] == "2" for x in named(spans, "text_classifier"))


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
@pytest.mark.parametrize("pair", node_triton.PAIRS)
def test_a_two_cause_run_has_both_mechanisms_and_steady_has_neither(pair: str) -> None:
    parts = pair.split("+")
    singles = [node_triton.truth(x, 0)[0].pattern for x in parts]
    assert [c.pattern for c in node_triton.truth(pair, 0)] == singles
    both, steady = spans_of(pair, 0), spans_of("steady", 0)
    for part in parts:
        assert _signature(part, both, 0) and not _signature(part, steady, 0), part


def test_the_same_seed_gives_the_same_bytes() -> None:
    a = node_triton.generate("steady", 50, 4)
    b = node_triton.generate("steady", 50, 4)
    assert orjson.dumps(a.rows) == orjson.dumps(b.rows) and a.trace_ids == b.trace_ids
