"""The blind family `llm-agent` (reference_pipeline/simulate/llm_agent.py; held out): each seed's format
loads through the real loader with its conventions, the truth names spans, services and instances the
run has, and each planted mechanism shows in the timings the way the provider's 429s, a drained
connection pool, a drained microVM pool, a tokenizer blocking the event loop, a flushed semantic cache,
a lagging replica, a degraded region, runaway loops, a slow shard or gen-2 collections over a growing
heap would produce it (a steady run of the same seed does not). Three runs go through the loader; the
other mechanisms are read from the generated table, to keep the file fast."""

from __future__ import annotations

from functools import cache
from itertools import pairwise

import numpy as np
import pytest

from reference_pipeline.simulate import blind, llm_agent
from reference_pipeline.simulate import llm_agent_spans as sp
from tests.blind_support import instance_label, kids, load_run, named, p, table_span_dicts

CONTRACT = (
    "tests/test_simulate_blind_llm_agent.py::test_each_format_loads_with_its_seeds_conventions_and_the_truth_names_what_the_run_has",
)

MS, S = 1e6, 1e9
FAMILY = "llm-agent"


@cache
def spans_of(scenario: str, requests: int, seed: int) -> tuple[dict, ...]:
    return table_span_dicts(llm_agent, scenario, requests, seed)


def roots(spans) -> list[dict]:
    return [x for x in spans if x["parent"] == -1 and x["name"] == sp.ROOT]


def run_ns(requests: int, seed: int) -> float:
    return requests / llm_agent.setup(seed)["rps"] * S


@pytest.fixture(scope="module")
def loaded(tmp_path_factory) -> dict[int, tuple[list[dict], dict]]:
    tmp = tmp_path_factory.mktemp("llm-agent")
    runs = {0: ("sandbox-pool-drain", 500), 1: ("conversation-heap-gc", 400), 2: ("huge-tool-result", 400)}
    return {seed: load_run(tmp, FAMILY, scenario, n, seed, instance=instance_label, lists=True)
            for seed, (scenario, n) in runs.items()}


def test_each_format_loads_with_its_seeds_conventions_and_the_truth_names_what_the_run_has(loaded) -> None:
    assert FAMILY not in blind.UNTOUCHED and blind.scenarios(FAMILY) == llm_agent.SCENARIOS  # open now
    assert blind.MODULES[FAMILY] == "llm_agent" and FAMILY in blind.available()
    assert sum("+" in sc for sc in llm_agent.SCENARIOS) == 3 and llm_agent.SCENARIOS[0] == "steady"
    assert 9 <= len(llm_agent.SINGLES) <= 10
    for seed, (spans, summary) in loaded.items():
        s, st = llm_agent.setup(seed), llm_agent.style(seed)
        assert summary["format"] == s["fmt"]
        assert {x["service"] for x in spans} == {sp.AGENT, sp.RECORDS, sp.SANDBOX}
        top = [x for x in spans if not x["parent"]]
        assert len(top) == summary["requests"] and {x["name"].lower() for x in top} == {sp.ROOT.lower()}
        names = {x["name"].lower() for x in spans}
        chat = next(x for x in spans if x["name"].lower() == st.llm.lower())["attrs"]
        if s["telemetry"] == "genai":
            assert "gen_ai.usage.input_tokens" in chat and chat["gen_ai.operation.name"] == "chat"
        elif s["telemetry"] == "openinference":
            assert chat["openinference.span.kind"] == "LLM" and "llm.token_count.prompt" in chat
        else:
            assert "gen_ai.usage.prompt_tokens" in chat and chat["gen_ai.system"] == "openai"
        assert (st.cache.lower() in names) == s["cache_spans"]
        assert (sp.BOOT in names) == (s["boot"] == "span")
        sandbox = [x for x in spans if x["name"].lower() == sp.SANDBOX_SERVER.lower()
                   and x["kind"] == "Server"]
        assert any("sandbox.cold" in x["attrs"] for x in sandbox) == (s["boot"] == "attr")
        agents = {x["instance"] for x in spans if x["service"] == sp.AGENT}
        assert agents == set(llm_agent.agent_instances(seed))
        assert len(agents) == (12 if s["ident"] == "host-pid" else 3)
        gc_events = [x for x in top if any(e["Name"] == "gc.collection" for e in x["events"])]
        assert bool(gc_events) == s["gc_events"]
        nodes = {x["instance"] for x in sandbox}
        for scenario in llm_agent.SCENARIOS:
            for cause in llm_agent.truth(scenario, seed):
                assert cause.span.lower() in names, (scenario, cause)
                where = nodes if cause.service == sp.SANDBOX else agents
                assert set(cause.instances) <= where, (scenario, cause)
                assert cause.stage in (None, "downstream", "preprocessing")
    with pytest.raises(ValueError, match="unknown llm-agent scenario"):
        llm_agent.truth("healthy", 0)


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_a_burst_over_the_tokens_per_minute_gets_429s_and_retries_after_the_retry_after(loaded) -> None:
    spans = spans_of("provider-429-burst", 2000, 0)  # 429s as child POST spans of the chat span
    attempts = kids(spans)
    refused, stretch = 0, []
    for chat in named(spans, llm_agent.style(0).llm):
        tries = sorted(attempts[chat["i"]], key=lambda x: x["start"])  # a cache hit has no chat span
        assert tries[0]["start"] == chat["start"] or tries[0]["start"] > chat["start"]
        for a, b in pairwise(tries):
            assert a["attrs"]["http.response.status_code"] == 429 and a["status"] == "Error"
            wait = int(a["attrs"]["http.response.header.retry-after"][0])
            assert 1 <= wait <= 20 and wait * S <= b["start"] - a["end"]
            stretch.append((b["start"] - a["end"]) / (wait * S))
            refused += 1
    assert refused > 100 and np.median(stretch) < 1.1  # the sleep, then the pool or the loop if busy
    steady = named(spans_of("steady", 2000, 0), "POST")
    assert not any(x["attrs"].get("http.response.status_code") == 429 for x in steady)


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_long_streams_hold_every_connection_and_other_calls_wait_inside_the_chat_span() -> None:
    st = llm_agent.style(1)  # host.name + process.pid: one instance per worker process, one pool each

    def peak_and_excess(scenario):
        chats = named(spans_of(scenario, 1500, 1), st.llm)
        peak, excess = 0, []
        for inst in {x["instance"] for x in chats}:
            mine = sorted((x for x in chats if x["instance"] == inst), key=lambda x: x["start"])
            ends = np.sort([x["end"] for x in mine])
            for x in mine:
                open_now = sum(1 for y in mine if y["start"] < x["start"] < y["end"])
                peak = max(peak, open_now)
                out = int(x["attrs"]["llm.token_count.completion"])
                if out < 200 and x["duration"] > 50 * MS:  # a tool call: ~1-2 s unless it waited
                    excess.append((open_now >= 20, x["duration"] - out / 65 * S))
            assert len(ends) == len(mine)
        return peak, excess

    peak, excess = peak_and_excess("long-streams-pool")
    assert peak >= 20
    waited = [e for full, e in excess if full]
    free = [e for full, e in excess if not full]
    assert len(waited) > 30 and np.median(waited) > 3 * S > 2 * np.median(free)
    assert peak_and_excess("steady")[0] < 20


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_a_code_campaign_drains_the_warm_pools_and_calls_boot_their_own_vms(loaded) -> None:
    spans, _ = loaded[0]
    by_parent: dict[str, list[dict]] = {}
    for x in spans:
        by_parent.setdefault(x["parent"], []).append(x)
    servers = [x for x in spans if x["name"] == sp.SANDBOX_SERVER]
    booted = [x for x in servers if any(c["name"] == sp.BOOT for c in by_parent.get(x["id"], ()))]
    warm = [x for x in servers if x not in booted]
    assert len(booted) > 8 and len(warm) > 20
    assert p([x["duration"] for x in booted], 50) > p([x["duration"] for x in warm], 50) + 0.8 * S
    boots = [c for x in booted for c in by_parent[x["id"]] if c["name"] == sp.BOOT]
    assert all(0.3 * S <= b["duration"] <= 0.9 * S + 1000 for b in boots)
    steady = table_span_dicts(llm_agent, "steady", 500, 0)
    assert len(named(steady, sp.BOOT)) <= 2


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_counting_a_huge_document_blocks_every_other_request_on_that_worker() -> None:
    spans = spans_of("huge-tool-result", 1200, 1)  # one instance per worker process
    st = llm_agent.style(1)
    blocks = [x for x in named(spans, st.tokenizer) if x["duration"] > 0.5 * S]
    assert len(blocks) >= 10 and all(int(x["attrs"]["tokenizer.input_chars"]) > 2_000_000 for x in blocks)
    woken = 0
    for b in blocks:
        others = [x for x in spans if x["instance"] == b["instance"] and x["trace"] != b["trace"]]
        stamps = [t for x in others for t in (x["start"], x["end"])]
        assert not any(b["start"] + MS < t < b["end"] - MS for t in stamps)  # nothing else ran
        woken += sum(1 for t in stamps if b["end"] <= t < b["end"] + 2 * MS)
    assert woken > len(blocks)  # what was due meanwhile runs the moment the loop is free
    steady = named(spans_of("steady", 1200, 1), st.tokenizer)
    assert p([x["duration"] for x in steady], 99.9) < 0.4 * S


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_a_flushed_semantic_cache_misses_everything_then_refills() -> None:
    st = llm_agent.style(0)
    run = run_ns(1500, 0)

    def hit_rates(scenario):
        spans = spans_of(scenario, 1500, 0)
        out = []
        for a, b in ((0.05, 0.24), (0.26, 0.32), (0.8, 1.0)):
            looks = [x["attrs"]["cache.hit"] for x in named(spans, st.cache)
                     if a * run <= x["start"] < b * run]
            out.append(np.mean(looks))
        return out

    before, right_after, late = hit_rates("cache-flush-deploy")
    assert before > 0.4 and right_after < 0.12 and late > right_after + 0.15
    assert min(hit_rates("steady")) > 0.4


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_a_lagging_replica_fails_the_consistency_check_and_the_tool_backs_off() -> None:
    st = llm_agent.style(2)

    def checks(scenario):
        spans = spans_of(scenario, 1000, 2)
        by_parent = kids(spans)
        out = []
        for tool in named(spans, st.tool("sql_query")):
            mine = sorted(by_parent[tool["i"]], key=lambda x: x["start"])
            gaps = [b["start"] - a["end"] for a, b in pairwise(mine)]
            out.append((len(mine), gaps, tool["duration"]))
        return out

    lagging = checks("replica-lag")
    retried = [c for c in lagging if c[0] > 2]
    assert len(retried) > 0.25 * len(lagging)
    assert all(g[-2] >= 0.99 * S for _, g, _ in retried)  # 1 s, 2 s, 4 s sleeps between the checks
    assert p([d for *_, d in retried], 50) > 3 * S
    steady = checks("steady")
    assert np.mean([c[0] > 2 for c in steady]) < 0.05


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_a_degraded_region_doubles_the_time_to_first_token() -> None:
    st = llm_agent.style(0)
    run = run_ns(1200, 0)

    def ratio(scenario):
        chats = [x for x in named(spans_of(scenario, 1200, 0), st.llm) if x["duration"] > 50 * MS
                 and x["attrs"]["gen_ai.usage.output_tokens"] < 200]
        first = [x["duration"] - x["attrs"]["gen_ai.usage.output_tokens"] / 65 * S for x in chats
                 if x["start"] < 0.25 * run]
        later = [x["duration"] - x["attrs"]["gen_ai.usage.output_tokens"] / 65 * S for x in chats
                 if x["start"] > 0.3 * run]
        return np.median(later) / np.median(first)

    assert ratio("provider-region-ttft") > 1.7 and 0.8 < ratio("steady") < 1.2


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_runaway_loops_add_steps_and_grow_the_prompt_not_any_calls_speed() -> None:
    st = llm_agent.style(2)

    def shape(scenario):
        spans = spans_of(scenario, 1000, 2)
        steps = [int(r["attrs"]["agent.steps"]) for r in roots(spans)]
        chats = named(spans, st.llm)
        per_token = [x["duration"] / int(x["attrs"]["gen_ai.usage.prompt_tokens"]) for x in chats
                     if x["duration"] > 50 * MS and int(x["attrs"]["gen_ai.usage.completion_tokens"]) < 200]
        prompts = [int(x["attrs"]["gen_ai.usage.prompt_tokens"]) for x in chats]
        return np.mean(np.array(steps) >= 7), max(prompts), np.median(per_token)

    loops, steady = shape("runaway-loops"), shape("steady")
    assert loops[0] > 0.07 and steady[0] == 0 and loops[1] > 1.3 * steady[1]
    assert loops[2] < 1.2 * steady[2]  # a call is no slower per prompt token


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_a_slow_shard_makes_every_vector_search_wait() -> None:
    st = llm_agent.style(0)
    slow = [x["duration"] for x in named(spans_of("vector-shard-slow", 800, 0), st.vdb)]
    steady = [x["duration"] for x in named(spans_of("steady", 800, 0), st.vdb)]
    assert p(slow, 10) > 3 * p(steady, 90) and p(slow, 50) > 10 * p(steady, 50)


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_gen2_pauses_grow_with_the_heap_on_one_pod_only(loaded) -> None:
    spans, _ = loaded[1]  # Jaeger: GC callbacks as events on the root spans
    (cause,) = llm_agent.truth("conversation-heap-gc", 1)
    pauses: dict[str, dict[int, float]] = {}
    for r in (x for x in spans if not x["parent"]):
        for ev in r["events"]:
            if ev["Name"] == "gc.collection":
                attrs = ev["Attributes"]
                pauses.setdefault(r["instance"], {})[int(float(attrs["gc.objects"]))] = float(
                    attrs["gc.duration_ms"])
    long_ = {inst for inst, v in pauses.items() if max(v.values()) > 1000}
    assert long_ == set(cause.instances)
    for inst in long_:
        sizes = sorted(pauses[inst])
        assert pauses[inst][sizes[-1]] > 3 * pauses[inst][sizes[0]]
    assert all(max(v.values()) < 500 for inst, v in pauses.items() if inst not in long_)


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
@pytest.mark.parametrize(("seed", "scenarios"), [(0, llm_agent.SINGLES[:5]), (1, llm_agent.SINGLES[5:])])
def test_every_planted_cause_moves_the_p99_of_its_seed(seed: int, scenarios: tuple[str, ...]) -> None:
    def p99(scenario):
        return p([r["duration"] for r in roots(spans_of(scenario, 2000, seed))], 99)

    base = p99("steady")
    for scenario in scenarios:
        assert p99(scenario) > 1.3 * base, scenario


def _signature(part: str, spans, seed: int) -> bool:
    """Whether a run shows one mechanism's mark (the single-cause tests above check each in depth)."""
    st = llm_agent.style(seed)
    if part == "cache-flush-deploy":
        hits = [x["attrs"]["cache.hit"] for x in named(spans, st.cache)]
        return np.mean(hits) < 0.3
    if part == "provider-429-burst":
        return sum(x["attrs"]["http.response.status_code"] == 429 for x in named(spans, "POST")
                   if "http.response.status_code" in x["attrs"]) > 20
    if part == "huge-tool-result":
        return sum(x["duration"] > 0.5 * S for x in named(spans, st.tokenizer)) > 5
    if part == "vector-shard-slow":
        return p([x["duration"] for x in named(spans, st.vdb)], 50) > 300 * MS
    if part == "replica-lag":
        tools = named(spans, st.tool("sql_query"))
        return sum(int(x["attrs"]["sql.consistency_retries"]) >= 3 for x in tools) > 30
    assert part == "conversation-heap-gc"
    top = roots(spans)
    by = {}
    for r in top:
        by.setdefault(r["instance"] in llm_agent.truth(part, seed)[0].instances, []).append(r["duration"])
    return p(by[True], 95) > 1.3 * p(by[False], 95)


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
@pytest.mark.parametrize("pair", llm_agent.PAIRS)
def test_a_two_cause_run_has_both_mechanisms_and_steady_has_neither(pair: str) -> None:
    parts = pair.split("+")
    assert [c.pattern for c in llm_agent.truth(pair, 0)] == [llm_agent.truth(x, 0)[0].pattern for x in parts]
    both, steady = spans_of(pair, 2000, 0), spans_of("steady", 2000, 0)
    for part in parts:
        assert _signature(part, both, 0) and not _signature(part, steady, 0), part
