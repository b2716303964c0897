"""The untouched blind family `rag-chat` (reference_pipeline/simulate/rag_chat.py): it generates in each
of its formats, loads through the real loader, its truth names spans, services and instances the run
has, and each planted mechanism shows in the timings the way the LLM engine, the vector database, the
cache, the interpreter or the cgroup would produce it (and a steady run of the same seed does not). No
diagnosis is run here (the family was held out until its honest scores)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from reference_pipeline.simulate import blind, rag_chat
from reference_pipeline.simulate.config import DEFAULT_START_NS
from reference_pipeline.simulate.rag_chat import SCENARIOS, setup
from tests.blind_support import cached, load_run

# The family's contract test (each seed's format through the real loader, the truth): its physics
# tests below are in the full tier, covered by it (`reason="simulator physics"`, tests/conftest.py).
CONTRACT = (
    "tests/test_simulate_blind_rag_chat.py::test_each_format_loads_and_the_truth_names_what_the_run_has[0]",
    "tests/test_simulate_blind_rag_chat.py::test_each_format_loads_and_the_truth_names_what_the_run_has[1]",
    "tests/test_simulate_blind_rag_chat.py::test_each_format_loads_and_the_truth_names_what_the_run_has[2]",
)

MS = 1e6
FAMILY = "rag-chat"


@pytest.fixture(scope="module")
def loaded(tmp_path_factory: pytest.TempPathFactory):
    tmp = tmp_path_factory.mktemp("rag")
    return lambda scenario, requests, seed: _load(tmp, scenario, requests, seed)


@pytest.fixture(scope="module")
def runs():
    """A run's spans straight from the family's table (the loaded form is checked per format above:
    same names, kinds, resources, attributes and events), so that the mechanism checks stay fast."""

    return cached(_from_table)


def _from_table(scenario: str, requests: int, seed: int) -> tuple[list[dict], dict]:
    table = rag_chat.generate(scenario, requests, seed)
    zipkin = setup(seed)["fmt"] == "zipkin"
    spans = []
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
    ) in enumerate(table.rows):
        service, ip, port = table.endpoints[res]
        resource = {"net.host.ip": ip, "net.host.port": str(port)} if zipkin else table.resources[res]
        spans.append(
            {
                "start": start,
                "end": end,
                "duration": end - start,
                "trace": trace,
                "id": i,
                "parent": "" if parent < 0 else parent,
                "name": name.lower() if zipkin else name,
                "kind": "Unspecified" if zipkin and kind == "Internal" else kind,
                "service": service,
                "resource": resource,
                "attrs": attrs,
                "status": status,
                "events": [
                    {"Name": ev, "Attributes": {k: str(v) for k, v in ea.items()}} for _, ev, ea in events
                ],
            }
        )
    return spans, {"truth": blind.truth(FAMILY, scenario, seed), "spans": len(table.rows)}


def _load(tmp: Path, scenario: str, requests: int, seed: int) -> tuple[list[dict], dict]:
    """The run's spans as the store holds them, after the real loader read the written file."""
    spans, summary = load_run(tmp, FAMILY, scenario, requests, seed, lists=True)
    assert summary["format"] == setup(seed)["fmt"]
    return spans, summary


def instance(span: dict) -> str:
    r = span["resource"]
    if "service.instance.id" in r:
        return r["service.instance.id"]
    if "host.name" in r:
        return r["host.name"]
    if "net.host.ip" in r:
        return f"{r['net.host.ip']}:{r['net.host.port']}"
    return ""  # the ingress names no instance


def named(spans: list[dict], name: str, kind: str | None = None) -> list[dict]:
    return [s for s in spans if s["name"].lower() == name.lower() and (kind is None or s["kind"] == kind)]


def durations(spans: list[dict]) -> np.ndarray:
    return np.array([s["duration"] for s in spans], dtype=float)


def p(values, q: float) -> float:
    return float(np.percentile(np.asarray(values, dtype=float), q))


def ingress_waits(spans: list[dict]) -> list[float]:
    """Per request, the ingress span's time beyond the orchestrator's request span."""
    served = {
        x["trace"]: x["duration"]
        for x in spans
        if x["service"] == "rag-orchestrator" and x["kind"] == "Server"
    }
    return [
        x["duration"] - served[x["trace"]]
        for x in spans
        if not x["parent"] and x["service"].startswith("ingress")
    ]


def request_p99(spans: list[dict]) -> float:
    return p([s["duration"] for s in spans if not s["parent"]], 99)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_each_format_loads_and_the_truth_names_what_the_run_has(loaded, runs, seed: int) -> None:
    s = setup(seed)
    spans, _ = loaded("llm-rollout", 300, seed)
    services = {x["service"] for x in spans}
    ingress = {"envoy": {"ingress-gateway"}, "nginx": {"ingress-nginx"}, None: set()}[s["ingress"]]
    assert (
        services
        == {
            "rag-orchestrator",
            "text-embeddings",
            "milvus-proxy",
            "milvus-querynode",
            "llm-serving",
            "moderation-api",
        }
        | ingress
    )
    roots = [x for x in spans if not x["parent"]]
    assert len(roots) == 300 and {x["service"] for x in roots} == (ingress or {"rag-orchestrator"})
    assert blind.scenarios(FAMILY) == SCENARIOS and FAMILY not in blind.UNTOUCHED  # open since its scores
    direct, _ = runs("llm-rollout", 300, seed)  # what the mechanism checks below read, as loaded
    assert sorted((x["name"], x["kind"], x["service"]) for x in direct) == sorted(
        (x["name"], x["kind"], x["service"]) for x in spans
    )
    assert {instance(x) for x in direct} == {instance(x) for x in spans}
    for scenario in SCENARIOS:
        for cause in blind.truth(FAMILY, scenario, seed):
            where = [x for x in spans if x["service"] == cause["service"]]
            assert named(where, cause["span"]), (scenario, cause)
            assert cause["instances"] and set(cause["instances"]) <= {instance(x) for x in where}, (
                scenario,
                cause,
            )
            assert set(cause["accept"]) | set(cause["side"]) <= {
                "queueing",
                "compute_bound",
                "slow_dependency",
            }


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_kv_pressure_queues_prompts_for_cache_blocks_not_compute(runs) -> None:
    spans, summary = runs("kv-pressure", 800, 0)  # the engine's phases as spans
    steady, _ = runs("steady", 800, 0)
    assert [c["pattern"] for c in summary["truth"]] == ["queueing"]
    waits = durations(named(spans, "scheduler.wait"))
    assert p(waits, 90) > 300 * MS > 20 * p(durations(named(steady, "scheduler.wait")), 90)
    # fewer sequences fit in the cache: smaller batches, so a decode step is no slower than steady's
    decode = _per_token_decode(spans)
    assert np.median(decode) < 1.2 * np.median(_per_token_decode(steady))
    # a preempted sequence (rare with short answers) re-prefills its prompt and what it had produced
    prompt = {
        x["trace"]: x["attrs"]["gen_ai.usage.input_tokens"] for x in named(spans, "POST /v1/chat/completions")
    }
    recompute = [x for x in named(spans, "prefill") if x["attrs"]["prefill.recompute"]]
    assert all(x["attrs"]["prefill.tokens"] > prompt[x["trace"]] for x in recompute)
    # the generations' time grows (the run's p99 moves on longer runs: x1.8 at 2,000 requests)
    served = durations(named(spans, "POST /v1/chat/completions"))
    assert p(served, 90) > 1.3 * p(durations(named(steady, "POST /v1/chat/completions")), 90)


def _per_token_decode(spans: list[dict]) -> list[float]:
    """Per request, decode time per output token (the decode spans over the server span's count)."""
    tokens = {
        x["trace"]: x["attrs"]["gen_ai.usage.output_tokens"]
        for x in named(spans, "POST /v1/chat/completions")
    }
    took: dict[object, float] = {}
    for x in named(spans, "decode"):
        took[x["trace"]] = took.get(x["trace"], 0.0) + x["duration"]
    return [took[t] / tokens[t] for t in took if tokens[t] > 20]


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_long_prompts_grow_prefill_with_the_prompt_tokens(runs) -> None:
    spans, summary = runs("long-prompts", 800, 0)
    steady, _ = runs("steady", 800, 0)
    assert summary["truth"][0]["pattern"] == "large_payload"
    prefill = [x for x in named(spans, "prefill") if not x["attrs"]["prefill.recompute"]]
    tokens = np.array([x["attrs"]["prefill.tokens"] for x in prefill], dtype=float)
    took = durations(prefill)
    assert (
        np.median(tokens) > 3500 > 2500 > max(x["attrs"]["prefill.tokens"] for x in named(steady, "prefill"))
    )
    big, small = took[tokens > 8000], took[tokens < 3000]
    assert len(big) > 10 and np.median(big) > 2.5 * np.median(small)
    assert np.corrcoef(np.argsort(np.argsort(tokens)), np.argsort(np.argsort(took)))[0, 1] > 0.5
    assert request_p99(spans) > 1.5 * request_p99(steady)


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_compaction_slows_one_query_node_only_in_its_window(runs) -> None:
    spans, summary = runs("shard-compaction", 800, 2)  # Zipkin: instances are ip:port
    steady, _ = runs("steady", 800, 2)
    (cause,) = summary["truth"]
    searches = named(spans, cause["span"], "Server")
    slow = [x for x in searches if instance(x) in cause["instances"]]
    rest = [x for x in searches if instance(x) not in cause["instances"]]
    assert p(durations(slow), 75) > 1000 * MS > 50 * MS > p(durations(rest), 99)
    assert p(durations(named(steady, cause["span"], "Server")), 99) < 100 * MS
    first = min(x["start"] for x in searches)
    early = [x for x in slow if x["start"] - first < 0.2 * (max(y["start"] for y in slow) - first)]
    assert early and p(durations(early), 50) < 20 * MS  # before the merge
    assert request_p99(spans) > 1.3 * request_p99(steady)


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_a_cache_flush_turns_hits_into_full_generations(runs) -> None:
    spans, summary = runs("cache-flush", 800, 0)
    assert summary["truth"][0]["pattern"] == "cache_miss"
    lookups = sorted(named(spans, "semantic_cache.lookup"), key=lambda x: x["start"])
    hits = np.array([x["attrs"]["cache.hit"] for x in lookups])
    generated = {x["trace"] for x in named(spans, "retrieve")}
    assert all((x["trace"] in generated) != x["attrs"]["cache.hit"] for x in lookups)
    cut = int(0.3 * len(lookups))
    assert hits[: cut - 30].mean() > 0.5 > 0.15 > hits[cut + 5 : cut + 60].mean()
    assert hits[-100:].mean() > 2 * hits[cut + 5 : cut + 60].mean()  # refilled as answers are written back
    steady, _ = runs("steady", 800, 0)
    assert request_p99(spans) > 1.15 * request_p99(steady)


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_gen2_collections_stop_the_orchestrator_and_are_reported_on_seed_1_only(runs) -> None:
    spans, summary = runs("orchestrator-gc", 800, 1)
    steady, _ = runs("steady", 800, 1)
    assert summary["truth"][0]["pattern"] == "gc_pause"
    ours = [x for x in named(spans, "POST /v1/chat", "Server") if x["service"] == "rag-orchestrator"]
    gen2 = [
        e for x in ours for e in x["events"] if e["Name"] == "gc" and e["Attributes"]["gc.generation"] == "2"
    ]
    assert len(gen2) > 20 and max(float(e["Attributes"]["gc.duration_ms"]) for e in gen2) > 1500
    # a request that reached a paused process is read after the pause: the ingress span holds the wait
    assert p(ingress_waits(spans), 95) > 300 * MS > 10 * p(ingress_waits(steady), 95)
    quiet, _ = runs("orchestrator-gc", 300, 0)  # OTLP: no GC reporting
    assert not any(e["Name"] == "gc" for x in quiet for e in x["events"])
    assert request_p99(spans) > 1.2 * request_p99(steady)


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_rolled_out_llm_pods_are_slow_at_first_and_warm_up(runs) -> None:
    spans, summary = runs("llm-rollout", 800, 0)
    (cause,) = summary["truth"]
    tokens = {
        x["trace"]: x["attrs"]["gen_ai.usage.output_tokens"]
        for x in named(spans, "POST /v1/chat/completions")
    }

    def per_token(pods: set[str], new: bool) -> list[float]:
        mine = sorted(
            (x for x in named(spans, "decode") if (instance(x) in pods) == new and tokens[x["trace"]] > 20),
            key=lambda x: x["start"],
        )
        return [x["duration"] / tokens[x["trace"]] for x in mine]

    for pod in cause["instances"]:
        warming = per_token({pod}, True)
        assert len(warming) > 40
        assert np.median(warming[:8]) > 2 * np.median(warming[-20:])
    old = per_token(set(cause["instances"]), False)
    assert np.median(old[:8]) < 1.5 * np.median(old)  # the old pods started warm
    steady, _ = runs("steady", 800, 0)
    assert request_p99(spans) > 1.15 * request_p99(steady)


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_moderation_attempts_are_cut_at_the_deadline_and_retried(runs) -> None:
    spans, summary = runs("moderation-timeout", 800, 1)  # Jaeger, old semconv
    steady, _ = runs("steady", 800, 1)
    assert summary["truth"][0]["pattern"] == "timeout_retry"
    calls = [
        x for x in named(spans, "HTTP POST", "Client") if x["attrs"]["net.peer.name"] == "moderation-api"
    ]
    failed = [x for x in calls if x["status"] == "Error"]
    assert len(failed) > 30
    cut = np.array([x["duration"] for x in failed]) / MS  # the deadline, and a young GC pause now and then
    assert cut.min() >= 1500 and np.mean(cut < 1501) > 0.9
    by_trace: dict[str, list[dict]] = {}
    for x in calls:
        by_trace.setdefault(x["trace"], []).append(x)
    for x in failed:
        later = [y for y in by_trace[x["trace"]] if y["start"] > x["end"]]
        assert later or len(by_trace[x["trace"]]) == 2  # a retry follows the first cut attempt
    assert not any(x["status"] == "Error" for x in named(steady, "HTTP POST", "Client"))
    assert request_p99(spans) > 1.15 * request_p99(steady)


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_throttled_pods_resume_on_cfs_period_boundaries(runs) -> None:
    spans, summary = runs("cpu-throttle", 800, 2)  # Zipkin, no GC events anywhere
    steady, _ = runs("steady", 800, 2)
    assert summary["truth"][0]["pattern"] == "cpu_throttling"
    lookups = named(spans, "ft.search", "Client")
    stalled = [(x["end"] - DEFAULT_START_NS) % 100_000_000 for x in lookups if x["duration"] > 5 * MS]
    assert len(stalled) > 30
    assert np.mean(np.asarray(stalled) < 0.05 * MS) > 0.8  # the reply is read when the period ends
    assert sum(x["duration"] > 5 * MS for x in named(steady, "ft.search", "Client")) < 0.2 * len(stalled)
    assert request_p99(spans) > 1.2 * request_p99(steady)


@pytest.mark.full(covered_by=CONTRACT, reason="simulator physics")
def test_steady_plants_nothing(runs) -> None:
    for seed in (0, 2):
        spans, summary = runs("steady", 800, seed)
        assert summary["truth"] == []
        assert not any(x["status"] == "Error" for x in spans)
