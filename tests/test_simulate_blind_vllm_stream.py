"""The blind family `vllm-stream` (reference_pipeline/simulate/vllm_stream.py; held out): each seed's format
loads through the real loader with its conventions, the truth names spans, services and instances the
run has, and each planted mechanism shows in the timings the way vLLM's KV preemption, a long prefill, an
evicted prefix, LoRA slots, a restart, the API server's event loop, a stale router, a slow moderation
replica or Qdrant shard, or CPython's full collections would produce it (a steady run of the same seed
does not). Three runs go through the loader; the other mechanisms are read from the generated table."""

from __future__ import annotations

from functools import cache

import numpy as np
import pytest

from reference_pipeline.simulate import blind, vllm_stream
from reference_pipeline.simulate import vllm_stream_spans as sp
from reference_pipeline.simulate.trace_table import DEFAULT_START_NS
from tests.blind_support import load_run, named, p, span_dicts

CONTRACT = (
    "tests/test_simulate_blind_vllm_stream.py::test_each_format_loads_with_its_seeds_conventions_and_the_truth_names_what_the_run_has",
)
MS = 1e6
FAMILY = "vllm-stream"
RUNS = {0: ("gateway-gen2-gc", 500), 1: ("replica-restart", 700), 2: ("moderation-slow-replica", 400)}


def label(resource: dict) -> str:
    """The instance the store names: the pod, host.name:process.pid, or Zipkin's ip:port."""
    if "process.pid" in resource:
        return f"{resource['host.name']}:{resource['process.pid']}"
    if "k8s.pod.name" in resource:
        return resource["k8s.pod.name"]
    return f"{resource['net.host.ip']}:{resource['net.host.port']}"


@cache
def spans_of(scenario: str, requests: int, seed: int) -> tuple[dict, ...]:
    table = vllm_stream.generate(scenario, requests, seed)
    return span_dicts(table, vllm_stream.setup(seed)["fmt"] == "zipkin", label)


def run_ns(requests: int, seed: int) -> float:
    return requests / vllm_stream.setup(seed)["rps"] * 1e9


def engine_attrs(spans) -> list[dict]:
    return [{**x["attrs"], "start": x["start"], "end": x["end"], "instance": x["instance"]}
            for x in named(spans, sp.ENGINE)]


def token_gaps(spans) -> list[tuple[float, float]]:
    """(root start, largest gap between its token events after the first token) per turn (seed 0)."""
    out = []
    for root in named(spans, sp.ROOT):
        times = [ts for ts, name, _ in root["events"] if name in (sp.FIRST_TOKEN, sp.TOKENS)]
        if len(times) > 2:
            out.append((root["start"], float(np.max(np.diff(times)))))
    return out


@pytest.fixture(scope="module")
def loaded(tmp_path_factory) -> dict[int, tuple[list[dict], dict]]:
    tmp = tmp_path_factory.mktemp("vllm-stream")
    return {seed: load_run(tmp, FAMILY, sc, n, seed, instance=label, lists=True)
            for seed, (sc, n) in RUNS.items()}


def test_each_format_loads_with_its_seeds_conventions_and_the_truth_names_what_the_run_has(loaded) -> None:
    assert FAMILY not in blind.UNTOUCHED and blind.scenarios(FAMILY) == vllm_stream.SCENARIOS  # open now
    assert sum("+" in sc for sc in vllm_stream.SCENARIOS) == 3 and vllm_stream.SCENARIOS[0] == "steady"
    assert 9 <= len(vllm_stream.SINGLES) <= 10
    for seed, (spans, summary) in loaded.items():
        s, st = vllm_stream.setup(seed), vllm_stream.style(seed)
        assert summary["format"] == s["fmt"] and summary["requests"] == RUNS[seed][1]
        services = {x["service"] for x in spans}
        assert services == ({sp.GW, sp.MOD, sp.VLLM} if s["engine_spans"] else {sp.GW, sp.MOD})
        roots = [x for x in spans if x["service"] == sp.GW and x["kind"] == "Server"]
        assert len(roots) == summary["requests"] and not any(x["parent"] for x in roots)
        llm = [x for x in spans if x["name"].lower() == st.llm.lower()]
        assert len(llm) == len(roots)
        keys = set(llm[0]["attrs"])
        assert ("gen_ai.usage.input_tokens" in keys and "server.address" in keys) == (s["semconv"] == "new")
        assert ("llm.usage.prompt_tokens" in keys and "net.peer.name" in keys) == (s["semconv"] == "old")
        engine = named(spans, sp.ENGINE)
        assert bool(engine) == s["engine_spans"]
        if engine:
            assert all(x["kind"] == "Server" and "gen_ai.latency.time_in_queue" in x["attrs"] for x in engine)
        names = [[e["Name"] for e in x["events"]] for x in roots]
        first = [n.count(sp.FIRST_TOKEN) for n in names]
        tokens = sum(n.count(sp.TOKENS) for n in names)
        assert (sum(first) >= 0.95 * len(roots)) == (s["token_every"] != 0)
        assert (tokens > 0) == (s["token_every"] > 0)
        assert any(sp.GC in n for n in names) == s["gc_events"]
        gw = {x["instance"] for x in roots}
        assert gw == set(vllm_stream.gateway_instances(seed))
        assert len(gw) == (6 if s["ident"] == "host-pid" else 3)
        have = {x["name"].lower() for x in spans}
        instances = {svc: {x["instance"] for x in spans if x["service"] == svc} for svc in services}
        for scenario in vllm_stream.SCENARIOS:
            for cause in vllm_stream.truth(scenario, seed):
                assert cause.span.lower() in have, (scenario, cause)
                assert set(cause.instances) <= instances[cause.service], (scenario, cause)
                assert cause.stage in (None, "queue", "model_forward", "downstream", "postprocessing")
    a, b = (vllm_stream.generate("lora-adapter-thrash", 60, 4) for _ in range(2))
    assert a.rows == b.rows and a.trace_ids == b.trace_ids  # a seed gives the same run
    with pytest.raises(ValueError, match="unknown vllm-stream scenario"):
        vllm_stream.truth("healthy", 0)


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_gen2_collections_freeze_a_gateway_process_and_its_tokens_leave_in_a_clump(loaded) -> None:
    spans, _ = loaded[0]
    roots = named(spans, sp.ROOT)
    frozen = 0
    for root in roots:
        pauses = [float(e["Attributes"]["gc.pause_ms"]) for e in root["events"]
                  if e["Name"] == sp.GC and e["Attributes"]["gc.generation"] == "2"]
        assert all(ms >= 40 for ms in pauses)
        frozen += any(ms >= 1200 for ms in pauses)
    assert frozen > 0.1 * len(roots)
    gaps = [g for _, g in token_gaps(spans_of("gateway-gen2-gc", 500, 0))]
    steady = [g for _, g in token_gaps(spans_of("steady", 500, 0))]
    assert p(gaps, 99) > 1500 * MS and max(steady) < 1000 * MS  # 32 tokens take ~0.4 s


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_a_restarting_replica_refuses_calls_the_sdk_retries_and_comes_back_cold(loaded) -> None:
    spans, _ = loaded[1]  # Jaeger, the router notices the restart by its health check only
    run = run_ns(700, 1)
    down, up = DEFAULT_START_NS + 0.4 * run, DEFAULT_START_NS + 0.4 * run + 20e9
    engine = engine_attrs(spans)
    restarted = vllm_stream.style(1).label(sp.VLLM, vllm_stream.RESTARTED)
    mine = sorted((x for x in engine if x["instance"] == restarted), key=lambda x: x["start"])
    assert not [x for x in mine if down + 6e9 < x["start"] < up]
    refused = [e for x in named(spans, sp.LLM_OLD) for e in x["events"] if e["Name"] == "exception"]
    assert len(refused) >= 3
    back = [x for x in mine if x["start"] >= up][:15]
    other = [x for x in engine if x["instance"] != restarted and x["start"] < down - 5e9]
    assert len(back) == 15
    assert np.median([float(x["gen_ai.latency.time_to_first_token"]) for x in back]) > 2 * np.median(
        [float(x["gen_ai.latency.time_to_first_token"]) for x in other])


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_calls_to_the_slow_moderation_replica_time_out_at_2_s_and_are_retried(loaded) -> None:
    spans, _ = loaded[2]
    by_parent = kids_by_id(spans)
    slow = vllm_stream.style(2).label(sp.MOD, vllm_stream.SLOW_MOD)
    timed_out = [x for x in named(spans, sp.MODERATE, "Client") if x["status"] == "Error"]
    assert len(timed_out) > 0.2 * 400
    at_slow = 0
    for call in timed_out:
        assert 1999 * MS < call["duration"] < 2060 * MS
        (server,) = by_parent[call["id"]]
        assert server["duration"] > 1500 * MS  # the server finishes its work after the client gave up
        at_slow += server["instance"] == slow
    assert at_slow > 0.9 * len(timed_out)
    tries = {}
    for call in named(spans, sp.MODERATE, "Client"):
        tries.setdefault(call["trace"], []).append(call)
    assert all(len(v) == 2 for v in tries.values() if any(c["status"] == "Error" for c in v[:1]))


def kids_by_id(spans) -> dict:
    out: dict = {}
    for x in spans:
        out.setdefault(x["parent"], []).append(x)
    return out


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_a_kv_full_burst_preempts_running_streams_mid_answer_and_new_ones_wait() -> None:
    run = run_ns(1000, 0)
    spans = spans_of("long-conversation-burst", 1000, 0)
    burst = [g for t, g in token_gaps(spans) if 0.3 * run < t < 0.55 * run]
    steady = [g for _, g in token_gaps(spans_of("steady", 1000, 0))]
    assert sum(g > 1100 * MS for g in burst) >= 20 and max(steady) < 900 * MS  # stalled mid-answer
    queue = [float(x["gen_ai.latency.time_in_queue"]) for x in engine_attrs(spans)]
    calm = [float(x["gen_ai.latency.time_in_queue"]) for x in engine_attrs(spans_of("steady", 1000, 0))]
    assert p(queue, 95) > 5 * p(calm, 95) and p(queue, 99) > 1.0


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_a_long_prompt_prefill_stalls_every_stream_on_its_replica() -> None:
    spans = spans_of("long-prompt-prefill", 1000, 0)
    engine = engine_attrs(spans)
    long = [x for x in engine if int(x["gen_ai.usage.prompt_tokens"]) >= 14000]
    assert len(long) >= 15
    assert min(float(x["gen_ai.latency.time_in_model_prefill"]) for x in long) > 0.2
    stalled = sum(g > 1100 * MS for _, g in token_gaps(spans))
    steady = [g for _, g in token_gaps(spans_of("steady", 1000, 0))]
    assert stalled >= 30 and max(steady) < 900 * MS  # 32 tokens take ~0.4 s


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_an_evicted_prefix_is_prefilled_again_by_every_request_while_memory_is_tight() -> None:
    run = run_ns(1000, 0)
    engine = engine_attrs(spans_of("prefix-cache-eviction", 1000, 0))
    first = min(x["start"] for x in engine)
    inside = [x for x in engine if 0.35 * run < x["start"] - first < 0.6 * run]
    before = [x for x in engine if x["start"] - first < 0.25 * run]
    miss = np.mean([int(x["gen_ai.usage.cached_tokens"]) == 0 for x in inside])
    calm = np.mean([int(x["gen_ai.usage.cached_tokens"]) == 0 for x in before])
    assert miss > 0.4 and calm < 0.15
    prefill = [float(x["gen_ai.latency.time_in_model_prefill"]) for x in inside]
    calm_prefill = [float(x["gen_ai.latency.time_in_model_prefill"]) for x in before]
    assert np.median(prefill) > 1.5 * np.median(calm_prefill)


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_more_adapters_than_lora_slots_keep_requests_waiting_in_the_scheduler() -> None:
    run = run_ns(1000, 0)
    thrash = engine_attrs(spans_of("lora-adapter-thrash", 1000, 0))
    steady = engine_attrs(spans_of("steady", 1000, 0))
    first = min(x["start"] for x in thrash)
    late = [float(x["gen_ai.latency.time_in_queue"]) for x in thrash if x["start"] - first > 0.3 * run]
    assert p(late, 90) > 10 * p([float(x["gen_ai.latency.time_in_queue"]) for x in steady], 90)
    assert p(late, 90) > 0.3


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_a_saturated_api_event_loop_delivers_tokens_late_though_the_engine_made_them() -> None:
    def lag(scenario: str) -> list[float]:
        return [float(x["gen_ai.latency.time_to_first_token"]) - float(x["gen_ai.latency.time_in_queue"])
                - float(x["gen_ai.latency.time_in_model_prefill"])
                for x in engine_attrs(spans_of(scenario, 1000, 0))]

    surge, steady = lag("detokenizer-lag"), lag("steady")  # TTFT beyond the queue and the prefill
    assert p(surge, 99) > 0.02 and p(steady, 99) < 0.005


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_a_stale_router_herds_each_interval_onto_one_replica() -> None:
    assert herding(spans_of("router-stale-load", 1000, 0)) > 0.85
    assert herding(spans_of("steady", 1000, 0)) < 0.65


def herding(spans) -> float:
    """The mean share of the busier replica among the calls of each 2.5 s (with 8 calls or more)."""
    bins: dict[int, list[str]] = {}
    for x in engine_attrs(spans):
        bins.setdefault(int(x["start"] // 2.5e9), []).append(x["instance"])
    return float(np.mean([max(v.count(i) for i in set(v)) / len(v) for v in bins.values() if len(v) >= 8]))


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_a_slow_qdrant_shard_holds_every_search() -> None:
    slow = [x["duration"] for x in named(spans_of("vector-slow-shard", 600, 2), sp.SEARCH)]
    steady = [x["duration"] for x in named(spans_of("steady", 600, 2), sp.SEARCH)]
    assert p(slow, 10) > 250 * MS and p(steady, 99) < 100 * MS


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
@pytest.mark.parametrize(("seed", "scenarios"), [(0, vllm_stream.SINGLES[:5]), (1, vllm_stream.SINGLES[5:])])
def test_every_planted_cause_moves_the_p99_of_its_seed(seed: int, scenarios: tuple[str, ...]) -> None:
    def p99(scenario: str) -> float:
        return p([x["duration"] for x in named(spans_of(scenario, 1000, seed), sp.ROOT)], 99)

    base = p99("steady")
    for scenario in scenarios:
        assert p99(scenario) > 1.3 * base, scenario


def _signature(part: str, spans, seed: int) -> bool:
    """Whether a run shows one mechanism's mark (the single-cause tests above check each in depth)."""
    if part == "gateway-gen2-gc":
        return p([g for _, g in token_gaps(spans)], 99) > 1500 * MS
    if part == "long-conversation-burst":
        return p([float(x["gen_ai.latency.time_in_queue"]) for x in engine_attrs(spans)], 99) > 1.0
    if part == "lora-adapter-thrash":
        return p([float(x["gen_ai.latency.time_in_queue"]) for x in engine_attrs(spans)], 75) > 0.1
    if part == "vector-slow-shard":
        return p([x["duration"] for x in named(spans, sp.SEARCH)], 50) > 250 * MS
    if part == "moderation-slow-replica":
        errors = sum(x["status"] == "Error" for x in named(spans, sp.MODERATE))
        return errors > 0.1 * len(named(spans, sp.ROOT))
    assert part == "router-stale-load"
    return herding(spans) > 0.78


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
@pytest.mark.parametrize("pair", vllm_stream.PAIRS)
def test_a_two_cause_run_has_both_mechanisms_and_steady_has_neither(pair: str) -> None:
    parts = pair.split("+")
    patterns = [vllm_stream.truth(x, 0)[0].pattern for x in parts]
    assert [c.pattern for c in vllm_stream.truth(pair, 0)] == patterns
    both, steady = spans_of(pair, 1000, 0), spans_of("steady", 1000, 0)
    for part in parts:
        assert _signature(part, both, 0) and not _signature(part, steady, 0), part
