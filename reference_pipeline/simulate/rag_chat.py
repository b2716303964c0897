"""Blind family `rag-chat`: a retrieval-augmented chat endpoint, a Python orchestrator in front of an
embedding service, a semantic cache in Redis, a Milvus-like vector database and a continuous-batching
LLM server, then a moderation call.

Shape: an ingress (Envoy on seeds = 0 mod 3, span `chat-api.internal:8080/v1/*`; ingress-nginx on
seeds = 1, span `POST /v1/chat`; not traced on seeds = 2) forwards `POST /v1/chat` to
`rag-orchestrator` (FastAPI on uvicorn, one asyncio loop per process, one process per pod, 3-5 pods).
A request embeds its query (`POST` to `text-embeddings`: a dynamic batcher with one GPU worker per
replica, its `queue` and `inference` spans), looks it up in the semantic cache (Redis `FT.SEARCH`, a
vector range query); a hit answers at once. A miss searches `milvus-proxy` over gRPC
(`MilvusService/Search`), which asks every shard's query node in parallel (`QueryNode/Search`, 48
search threads each) and reduces the results; the orchestrator reranks the 24 candidates with a
cross-encoder on its own CPU (ONNX Runtime, ~190 ms of CPU on ~3.4 threads), builds the prompt from the
top-k chunks and calls `llm-serving` (an 8B model on one GPU, OpenAI-compatible, continuous batching:
a step prefills the prompts admitted in it and decodes one token for every other running sequence; a
step costs the weights read plus per-sequence, KV-read and prefill work). The answer streams back; the
client span records the first token (an event, or `llm.ttft_ms`). Then `moderation-api` checks the
answer (httpx, 1.5 s timeout, one retry after 250 ms, fail-open), the reply goes out, and a background
task writes the answer to the cache (`HSET`, after the response).

Conventions by seed (mod 3): OTLP/JSON, new semconv (`http.request.method`, `gen_ai.usage.input_tokens`),
snake-case manual spans, instances `service.instance.id` = namespace.pod.container (+ `k8s.pod.name`),
the LLM server's phases as spans (`scheduler.wait`, `prefill`, `decode`, again after a preemption) /
Jaeger, old semconv (`http.method`, `gen_ai.usage.prompt_tokens`), `rag.*` spans, instances `host.name`
(+ `process.pid`), the phases as span events (`queued`, `scheduled`, `first_token`, `preempted`,
`finished`), Python GC reported as `gc` events on the request span / Zipkin v2 (names lower-cased),
class-style spans, instances ip:port, the LLM server as one `llm_request` span with token counts only.
Healthy noise: ~35-45 % cache misses, answers of 4-512 tokens (median 100), young GC pauses of a few
ms, a gen-2 pass now and then, slow shard searches (1.5 %: index pages from disk), slow Redis and
moderation calls (1 %).

Mechanisms (truth: pattern, stage, span, service, instances):

- `kv-pressure`: the LLM server's `gpu_memory_utilization` was cut to share its GPU, leaving 9k tokens
  of KV cache instead of 300k. Prompts wait in the scheduler's queue for blocks; when a running sequence
  needs a block and none is free, the newest is preempted, re-queued at the head and recomputes its
  prompt and the tokens it had (rare here: answers are short next to the prompts, so the blocks held
  for the prompts are most of it). queueing, stage queue, the server's wait span (or its request span).
  The queue builds up over bursts: x1.1-1.4 of steady's p99 in an 800-request run, x1.35-2 in 2,000.
- `long-prompts`: a new retrieval setting (parent-document retrieval) puts each hit's whole parent
  section in the prompt instead of its chunk: prompts of ~2k tokens become 1.5k-25k (the prompt-token
  attributes, `prompt.tokens`); prefill grows with the prompt (linearly, its attention
  quadratically), every decode step reads the longer contexts and is held up by the others' prefills,
  and prompts wait longer for their turn (queueing: side). large_payload, model_forward, `prefill`
  (or the server's span).
- `shard-compaction`: one query node merged segments; until the merged segment's HNSW index is built
  (25-85 % of the run) every search on it scans the segment flat (~2 s, holding a search thread).
  slow_dependency, downstream, `QueryNode/Search` at that node (queueing at its threads: side).
- `cache-flush`: the semantic cache is flushed at 30 % of the run; hits drop to none and recover as
  answers are written back; every miss takes retrieval, rerank and generation (and the LLM's batches
  grow: compute_bound side). cache_miss, feature_hydration, the cache lookup span, all pods.
- `orchestrator-gc`: a leak (objects never freed) makes CPython's gen-2 collections run every 2-5 s and
  take longer as the heap grows (0.5 s to 5 s): the whole process stops, so a request that arrives
  during one is read after it (the ingress span holds the wait), and every step and reply read of
  its requests in flight waits (without a traced ingress, seeds = 2, that first wait is in no span).
  gc_pause, at the request span on every pod (reported as events on seeds = 1 only).
- `llm-rollout`: the LLM pods are replaced one by one (from 25 % of the run, over half of it) by pods that
  pass readiness before they are warm: their first steps are slow (weights paged in, allocator warm-up,
  decaying) and each new batch-size bucket compiles its graph once (0.15-0.45 s). cold_start,
  model_forward, `decode` (or the server's span), the new pods (queueing behind the compiles: side).
- `moderation-timeout`: the moderation model moved to CPU nodes (median 400 ms, 25 % queue behind
  others: + Pareto 900 ms, alpha 1.1); an attempt still running at 1.5 s ends with an error
  (`ReadTimeout`) and one retry follows; when both are cut the answer goes out unmoderated.
  timeout_retry, downstream, the orchestrator's HTTP client span, all pods (slow_dependency: side).
- `cpu-throttle`: the pods' CPU limit was cut from 3 CPUs to 0.4: a rerank's burst uses the 40 ms quota of
  a 100 ms period in a few ms and the whole process stalls to the period's end (the work left carries
  over). cpu_throttling at the request span on every pod; stalls end on period boundaries, no gen-2 GC.
- Two causes: `kv-pressure+cpu-throttle`, `orchestrator-gc+shard-compaction`,
  `long-prompts+moderation-timeout`.

`accept` is empty everywhere: each mechanism leaves its own evidence (GC events or not, throttled stalls
end on 100 ms boundaries, the deadline's error status and the repeated call, the token attributes).
"""

from __future__ import annotations

import random
from typing import Any

from reference_pipeline.simulate.rag_chat_flow import (
    Plan,
    draw,
    horizon_of,
    orchestrator_stalls,
    plan_summary,
    simulate,
)
from reference_pipeline.simulate.rag_chat_spans import SHARD_RPC, STEPS, Where, write_request
from reference_pipeline.simulate.trace_table import Cause, TraceTable, poisson_arrivals

FAMILY = "rag-chat"
ORCH, LLM, NODE, PROXY = "rag-orchestrator", "llm-serving", "milvus-querynode", "milvus-proxy"
ROOT = "POST /v1/chat"
SINGLES = (
    "kv-pressure",
    "long-prompts",
    "shard-compaction",
    "cache-flush",
    "orchestrator-gc",
    "llm-rollout",
    "moderation-timeout",
    "cpu-throttle",
)
SCENARIOS = (
    "steady",
    *SINGLES,
    "kv-pressure+cpu-throttle",
    "orchestrator-gc+shard-compaction",
    "long-prompts+moderation-timeout",
)
FORMATS = ("otlp-json", "jaeger", "zipkin")
PODS, RPS, REPLICAS, SHARDS, HITS = (4, 5, 3), (24.0, 30.0, 18.0), (3, 4, 2), (4, 6, 3), (0.6, 0.55, 0.65)


def setup(seed: int) -> dict[str, Any]:
    s = seed % 3
    return {
        "fmt": FORMATS[s],
        "pods": PODS[s],
        "rps": RPS[s],
        "replicas": REPLICAS[s],
        "shards": SHARDS[s],
        "hit_rate": HITS[s],
        "ingress": ("envoy", "nginx", None)[s],
        "semconv": ("new", "old", "new")[s],
        "style": ("snake", "dotted", "classy")[s],
        "llm_report": ("phases", "events", "single")[s],
        "cache_attr": ("cache.hit", "rag.cache_hit", None)[s],
        "gc_events": s == 1,
        "compacting": seed % SHARDS[s],
    }


def _pod_names(seed: int, service: str, n: int, replicaset: str) -> list[str]:
    rng = random.Random(f"{service}-{seed}-{replicaset}")
    letters = "bcdfghjklmnpqrstvwxz2456789"
    return [f"{service}-{replicaset}-{''.join(rng.choice(letters) for _ in range(5))}" for _ in range(n)]


def _ips(service: str, n: int, offset: int = 0) -> list[str]:
    net = {
        ORCH: 20,
        LLM: 30,
        NODE: 40,
        PROXY: 41,
        "text-embeddings": 50,
        "moderation-api": 60,
        "ingress": 10,
    }[service]
    return [f"10.8.{net}.{11 + offset + k}" for k in range(n)]


PORTS = {
    ORCH: 8080,
    LLM: 8000,
    NODE: 21123,
    PROXY: 19530,
    "text-embeddings": 3000,
    "moderation-api": 8090,
    "ingress": 443,
}


def _instances(seed: int, service: str) -> list[str]:
    """Every instance's label as the truth names it: service.instance.id, host.name or ip:port."""
    s = setup(seed)
    n = {ORCH: s["pods"], LLM: 2 * s["replicas"], NODE: s["shards"]}[service]
    if service == LLM:
        names = _pod_names(seed, LLM, s["replicas"], "5d8c7b") + _pod_names(
            seed, LLM, s["replicas"], "6f9d4c"
        )
    elif service == NODE:
        names = [f"{NODE}-{k}" for k in range(n)]
    else:
        names = _pod_names(seed, ORCH, n, "7b9c6d5f4")
    if s["fmt"] == "zipkin":
        return [f"{ip}:{PORTS[service]}" for ip in _ips(service, n)]
    if s["fmt"] == "otlp-json":
        return [f"rag.{name}.{service.split('-')[-1]}" for name in names]
    return names


def _llm_span(seed: int, phase: str) -> str:
    return {"phases": phase, "events": "POST /v1/chat/completions", "single": "llm_request"}[
        setup(seed)["llm_report"]
    ]


def truth(scenario: str, seed: int) -> tuple[Cause, ...]:
    if scenario not in SCENARIOS:
        raise ValueError(f"unknown {FAMILY} scenario {scenario!r}; one of {', '.join(SCENARIOS)}")
    s = setup(seed)
    low = s["fmt"] == "zipkin"

    def name(x: str) -> str:
        return x.lower() if low else x

    pods = tuple(_instances(seed, ORCH))
    llms = _instances(seed, LLM)
    client = "POST" if s["semconv"] == "new" else "HTTP POST"
    causes = {
        "kv-pressure": Cause(
            "queueing", "queue", name(_llm_span(seed, "scheduler.wait")), LLM, tuple(llms[: s["replicas"]])
        ),
        "long-prompts": Cause(
            "large_payload",
            "model_forward",
            name(_llm_span(seed, "prefill")),
            LLM,
            tuple(llms[: s["replicas"]]),
            side=("queueing",),
        ),
        "shard-compaction": Cause(
            "slow_dependency",
            "downstream",
            name(SHARD_RPC),
            NODE,
            (_instances(seed, NODE)[s["compacting"]],),
            side=("queueing",),
        ),
        "cache-flush": Cause(
            "cache_miss", "feature_hydration", name(STEPS[s["style"]][1]), ORCH, pods, side=("compute_bound",)
        ),
        "orchestrator-gc": Cause("gc_pause", None, name(ROOT), ORCH, pods),
        "llm-rollout": Cause(
            "cold_start",
            "model_forward",
            name(_llm_span(seed, "decode")),
            LLM,
            tuple(llms[s["replicas"] :]),
            side=("queueing",),
        ),
        "moderation-timeout": Cause(
            "timeout_retry", "downstream", name(client), ORCH, pods, side=("slow_dependency",)
        ),
        "cpu-throttle": Cause("cpu_throttling", None, name(ROOT), ORCH, pods),
    }
    return tuple(causes[part] for part in scenario.split("+") if part != "steady")


def plan_for(scenario: str, seed: int) -> Plan:
    s = setup(seed)
    parts = set(scenario.split("+"))
    return Plan(
        pods=s["pods"],
        rps=s["rps"],
        replicas=s["replicas"],
        shards=s["shards"],
        hit_rate=s["hit_rate"],
        parent_docs="long-prompts" in parts,
        kv_tokens=9_000 if "kv-pressure" in parts else 300_000,
        quota_ms=40.0 if "cpu-throttle" in parts else 300.0,
        old_gen_gc="orchestrator-gc" in parts,
        compacting=s["compacting"] if "shard-compaction" in parts else -1,
        flush_at=0.3 if "cache-flush" in parts else -1.0,
        rollout="llm-rollout" in parts,
        slow_moderation="moderation-timeout" in parts,
    )


def _resources(table: TraceTable, seed: int, rng: random.Random) -> Where:
    s = setup(seed)
    fmt = s["fmt"]

    def add(service: str, names: list[str], language: str, offset: int = 0) -> list[int]:
        out = []
        for name, ip in zip(names, _ips(service, len(names), offset), strict=True):
            attrs: dict[str, Any] = {"service.name": service, "telemetry.sdk.language": language}
            if fmt == "otlp-json":
                attrs.update(
                    {
                        "service.instance.id": f"rag.{name}.{service.split('-')[-1]}",
                        "k8s.pod.name": name,
                        "k8s.namespace.name": "rag",
                    }
                )
            elif fmt == "jaeger":
                attrs.update({"host.name": name, "process.pid": 1 + rng.randrange(60)})
            out.append(table.resource(attrs, ip, PORTS.get(service, 8080)))
        return out

    ingress = None
    if s["ingress"]:
        service = "ingress-gateway" if s["ingress"] == "envoy" else "ingress-nginx"
        ingress = table.resource({"service.name": service}, "10.8.10.11", 443)
    pods = add(ORCH, _pod_names(seed, ORCH, s["pods"], "7b9c6d5f4"), "python")
    llm_names = _pod_names(seed, LLM, s["replicas"], "5d8c7b") + _pod_names(
        seed, LLM, s["replicas"], "6f9d4c"
    )
    return Where(
        ingress=ingress,
        ingress_name={"envoy": "chat-api.internal:8080/v1/*", "nginx": ROOT, None: None}[s["ingress"]],
        ingress_scope={"envoy": "envoy", "nginx": "nginx", None: None}[s["ingress"]],
        pods=pods,
        embedders=add("text-embeddings", _pod_names(seed, "text-embeddings", 2, "84f6d"), "rust"),
        proxy=add(PROXY, [f"{PROXY}-0"], "go")[0],
        nodes=add(NODE, [f"{NODE}-{k}" for k in range(s["shards"])], "go"),
        llms=add(LLM, llm_names, "python"),
        moderation=add("moderation-api", _pod_names(seed, "moderation-api", 1, "59b7c"), "python")[0],
        style=s["style"],
        semconv=s["semconv"],
        llm_report=s["llm_report"],
        cache_attr=s["cache_attr"],
        gc_events=s["gc_events"],
    )


def generate(scenario: str, requests: int, seed: int, **opts: Any) -> TraceTable:
    truth(scenario, seed)
    plan = plan_for(scenario, seed)
    rng = random.Random(seed * 1_000_033 + 101)
    table = TraceTable(seed, 0x4A6C)
    where = _resources(table, seed, rng)
    arrivals = poisson_arrivals(rng, opts.get("rps", plan.rps), requests)
    reqs = draw(plan, requests, arrivals, rng)
    stalls, pauses = orchestrator_stalls(plan, reqs, horizon_of(reqs), rng)
    simulate(plan, reqs, stalls, rng)
    for r in reqs:
        write_request(table, where, r, pauses[r.pod])
    return table


def describe(scenario: str, seed: int) -> dict[str, Any]:
    return {**plan_summary(plan_for(scenario, seed)), "scenario": scenario}
