"""Blind family `vllm-stream`: a customer-support chat assistant that streams its answers token by token
(vllm_stream_engine.py: vLLM's continuous batching; vllm_stream_serve.py: the router and restarts;
vllm_stream_spans.py: the conventions).

Shape: `chat-gateway` (FastAPI on uvicorn, 2 worker processes per pod, 3 pods; one asyncio loop per process)
receives `POST /v1/chat/stream`, loads the conversation from Redis (`GET`; a miss rebuilds it from Postgres,
`SELECT chat`, and writes it back), asks `moderation` (a small classifier over HTTP, 3 replicas, a 2 s
timeout and one retry; after two timeouts it fails open), retrieves 3 help articles from Qdrant over gRPC
(`/qdrant.Points/Search`: 4 shards, the call waits for the slowest), builds the prompt (the tenant's
3.2k-token system prompt + articles + history + message) and calls the model through the OpenAI SDK,
streaming (`chat support-assistant-8b`, or `openai.chat` with the old `llm.*` names), relaying every token
to the browser as a server-sent event; the server span lasts until the last token, then the turn is saved
(`SET`). `vllm`: 2 replicas, one GPU each, behind a least-outstanding-requests router (vllm_stream_engine.py
describes the engine). 24 tenants (each its own system prompt); 3 of them use their own LoRA adapter. The
user feels the time to first token (TTFT) and the gaps between tokens.

Healthy noise: jitter everywhere; 3 % Redis misses (rebuilt from Postgres, time growing with the history); a
moderation call over 2 s now and then (a GC on the classifier: a retry); Qdrant segment optimisations (1 %
of shard replies ~40 ms); CPython's young collections every fraction of a second and a full one every minute
or two per gateway process; prefill steps interleaved with decodes (TTFT and token gaps vary with the
neighbours); a rare tenant's system prompt evicted from the prefix cache.

Conventions by seed (seed % 3): 0: OTLP/JSON, new semconv (`gen_ai.*`, `server.address`), instances by
`k8s.pod.name`, vLLM's `llm_request` spans exported (time in queue, TTFT, prefill time, cached tokens), an
event on the gateway span at the first token and every 32 tokens, the gateway's collections as `gc.collect`
events; no chunked prefill. 1: Jaeger, old names (`llm.usage.*`, `db.statement`, `net.peer.name`), host.name
+ process.pid (each uvicorn worker is its own instance), `llm_request` (time in queue, in the scheduler,
TTFT), no token or GC events, chunked prefill (512 tokens a step). 2: Zipkin v2, new names, instances are
endpoints (ip:port), nothing from vLLM, a first-token annotation only, no GC events, no chunked prefill.

Mechanisms (scenario: truth; where vLLM exports nothing, a vLLM cause is named at the gateway's LLM CLIENT
span, service chat-gateway, its instances):
- `long-conversation-burst`: from 30 % to 55 % of the run 12 % of the conversations are long (8-14k history
  tokens, longer answers: median 320 tokens); the KV cache fills, decode steps preempt the youngest
  sequences (recompute): their streams stall mid-answer and they prefill again; new requests wait for KV
  blocks. TTFT and the whole stream. queueing, stage queue, llm_request (side compute_bound: the recompute;
  large_payload).
- `long-prompt-prefill`: from 30 % of the run 5 % of the prompts are 14-28k tokens (pasted logs): each
  prefill takes a whole step of ~0.25-0.75 s (chunked: 30-55 steps 2-3x longer) and every other stream's next
  token waits; prompts behind it wait to start. Gaps and TTFT. queueing, stage queue, llm_request, accept
  large_payload (side compute_bound).
- `prefix-cache-eviction`: from 30 % to 65 % of the run an internal summarizer (untraced) holds 30k KV
  tokens and churns the free pool with long transcripts: a tenant's system prompt that no running request
  holds is evicted between uses, and about half the requests prefill their 3.2k-token system prompt again;
  the engine spends that much more time in prefill. TTFT first, the stream's gaps too. cache_miss, stage
  model_forward, llm_request (side queueing, compute_bound).
- `lora-adapter-thrash`: from 25 % of the run 8 tenants use adapters with 4 GPU slots: a request for a
  non-resident adapter waits in the scheduler until a slot's adapter has no running sequence, then for its
  load. TTFT. cache_miss, stage queue, llm_request, accept queueing and cold_start.
- `replica-restart`: vllm-1 restarts at 40 % of the run (drained, ~20 s of weights load and CUDA graph
  capture); the other replica carries everything meanwhile; the router keeps sending for 2.5 s on seed 1
  (refused, the SDK retries) and the replica rejoins at once (it has no outstanding requests: it takes every
  new call), or slow-starts over 30 s (seeds 0, 2); back cold: an empty prefix cache, slow first steps.
  cold_start, stage model_forward, llm_request at vllm-1 (side queueing, timeout_retry, cache_miss).
- `moderation-slow-replica`: one of 3 classifier replicas answers in ~2.4 s: calls to it time out at 2 s and
  are retried (a second unlucky pick fails open after 4 s). TTFT and whole stream alike. timeout_retry,
  stage downstream, the moderation CLIENT span `POST` (side slow_dependency).
- `vector-slow-shard`: one Qdrant shard answers in ~1.2 s (heavy tail): every search waits for it.
  slow_dependency, stage downstream, `/qdrant.Points/Search`.
- `detokenizer-lag`: a campaign's surge (1.7x the arrivals from 35 % to 70 % of the run): so many concurrent
  streams that the API server's event loop (detokenize + SSE, per token) falls behind the engine; tokens
  leave late and in clumps, the lag building while the surge lasts. Gaps and TTFT. compute_bound (one Python
  thread's CPU), stage postprocessing, llm_request, accept queueing.
- `router-stale-load`: the router balances on the replicas' scraped `running + waiting` every 5 s instead of
  its own counts: each interval's calls herd onto one replica (bigger batches, KV waits) while the other
  idles. queueing, stage queue, llm_request, both replicas.
- `gateway-gen2-gc`: an in-process conversation cache of millions of small objects: CPython's full
  collections every 5-10 s stop each gateway process for 1.8-3.6 s (a heap of several GB): its loop relays
  nothing meanwhile (tokens arrive in a clump after), its spans stretch. gc_pause, the gateway's server
  span, every gateway instance.
- Two causes: `long-conversation-burst+gateway-gen2-gc` (long conversations are the big objects),
  `lora-adapter-thrash+vector-slow-shard`, `router-stale-load+moderation-slow-replica`.
"""

from __future__ import annotations

import random
from typing import Any

import numpy as np

from reference_pipeline.simulate import vllm_stream_spans as sp
from reference_pipeline.simulate.trace_table import (
    NS_PER_MS,
    NS_PER_S,
    Cause,
    Stalls,
    TraceTable,
    lognormal_ms,
    merge_intervals,
    poisson_arrivals,
)
from reference_pipeline.simulate.vllm_stream_engine import EngineConfig, Replica, Seq
from reference_pipeline.simulate.vllm_stream_serve import Call, Restart, serve

FAMILY = "vllm-stream"
SINGLES = ("long-conversation-burst", "long-prompt-prefill", "prefix-cache-eviction", "lora-adapter-thrash",
           "replica-restart", "moderation-slow-replica", "vector-slow-shard", "detokenizer-lag",
           "router-stale-load", "gateway-gen2-gc")
PAIRS = ("long-conversation-burst+gateway-gen2-gc", "lora-adapter-thrash+vector-slow-shard",
         "router-stale-load+moderation-slow-replica")
SCENARIOS = ("steady", *SINGLES, *PAIRS)
PODS, WORKERS, REPLICAS, MOD_REPLICAS, SHARDS = 3, 2, 2, 3, 4
SLOW_MOD, SLOW_SHARD, RESTARTED = 2, 3, 1
SYSTEM_TOKENS = 3200
TENANT_SHARE = tuple(1.0 / (k + 3) ** 0.7 for k in range(24))
ADAPTERS = (0, 3, 6)
THRASH = 8  # tenants with an adapter in lora-adapter-thrash
MOD_TIMEOUT_MS = 2000.0
MAX_TOKENS = 400
_SETUPS = (
    {"fmt": "otlp-json", "semconv": "new", "ident": "pod", "engine_spans": True, "token_every": 32,
     "gc_events": True, "chunked": False, "rps": 14.0, "detect_s": 0.0, "ramp_s": 30.0},
    {"fmt": "jaeger", "semconv": "old", "ident": "host-pid", "engine_spans": True, "token_every": 0,
     "gc_events": False, "chunked": True, "rps": 12.0, "detect_s": 2.5, "ramp_s": 0.0},
    {"fmt": "zipkin", "semconv": "new", "ident": "endpoint", "engine_spans": False, "token_every": -1,
     "gc_events": False, "chunked": False, "rps": 15.0, "detect_s": 0.0, "ramp_s": 30.0},
)


def setup(seed: int) -> dict[str, Any]:
    return dict(_SETUPS[seed % 3])


def style(seed: int) -> sp.Style:
    s = setup(seed)
    return sp.Style(s["semconv"], s["ident"], s["engine_spans"], s["token_every"], s["gc_events"])


def gateway_instances(seed: int) -> tuple[str, ...]:
    st = style(seed)
    return tuple(dict.fromkeys(st.label(sp.GW, p, w) for p in range(PODS) for w in range(WORKERS)))


def truth(scenario: str, seed: int) -> tuple[Cause, ...]:
    if scenario not in SCENARIOS:
        raise ValueError(f"unknown {FAMILY} scenario {scenario!r}; one of {', '.join(SCENARIOS)}")
    st = style(seed)
    gw = gateway_instances(seed)
    span = st.engine_span()

    def engine(pattern: str, stage: str, replicas: tuple[int, ...] = (0, 1), **kw: Any) -> Cause:
        if st.engine_spans:
            return Cause(pattern, stage, span, sp.VLLM, tuple(st.label(sp.VLLM, j) for j in replicas), **kw)
        return Cause(pattern, stage, span, sp.GW, gw, **kw)

    causes = {
        "long-conversation-burst": engine("queueing", "queue", side=("compute_bound", "large_payload")),
        "long-prompt-prefill": engine("queueing", "queue", accept=("large_payload",),
                                      side=("compute_bound",)),
        "prefix-cache-eviction": engine("cache_miss", "model_forward", side=("queueing", "compute_bound")),
        "lora-adapter-thrash": engine("cache_miss", "queue", accept=("queueing", "cold_start")),
        "replica-restart": engine("cold_start", "model_forward", (RESTARTED,),
                                  side=("queueing", "timeout_retry", "cache_miss")),
        "moderation-slow-replica": Cause("timeout_retry", "downstream", sp.MODERATE, sp.GW, gw,
                                         side=("slow_dependency",)),
        "vector-slow-shard": Cause("slow_dependency", "downstream", sp.SEARCH, sp.GW, gw),
        "detokenizer-lag": engine("compute_bound", "postprocessing", accept=("queueing",)),
        "router-stale-load": engine("queueing", "queue"),
        "gateway-gen2-gc": Cause("gc_pause", None, sp.ROOT, sp.GW, gw),
    }
    return tuple(causes[part] for part in scenario.split("+") if part != "steady")


def _pauses(rng: random.Random, horizon: float, full_gc: bool) -> list[tuple[float, float, int]]:
    """One gateway process's collections (start, end, generation)."""
    out = []
    for gen, every, length in ((0, (0.2, 1.0), (0.3, 1.5)), (1, (5.0, 15.0), (3.0, 10.0)),
                               (2, (60.0, 150.0), (40.0, 90.0))):
        t = rng.uniform(0.0, every[1]) * NS_PER_S
        while t < horizon:
            out.append((t, t + rng.uniform(*length) * NS_PER_MS, gen))
            t += rng.uniform(*every) * NS_PER_S
    if full_gc:
        t = rng.uniform(1.0, 8.0) * NS_PER_S
        while t < horizon:
            out.append((t, t + rng.uniform(1800.0, 3600.0) * NS_PER_MS, 2))
            t += rng.uniform(5.0, 10.0) * NS_PER_S
    return sorted(out)


def _moderation(rng: random.Random, t: float, slow: bool, stalls: Stalls) -> tuple[list[sp.Attempt], float]:
    attempts: list[sp.Attempt] = []
    for _ in range(2):
        j = rng.randrange(MOD_REPLICAS)
        arrive = t + lognormal_ms(rng, 0.4, 0.3)
        work = lognormal_ms(rng, 2400.0, 0.25) if slow and j == SLOW_MOD else (
            lognormal_ms(rng, 2300.0, 0.2) if rng.random() < 0.002 else lognormal_ms(rng, 18.0, 0.4))
        done = arrive + work
        back = done + lognormal_ms(rng, 0.4, 0.3)
        timed_out = back - t > MOD_TIMEOUT_MS * NS_PER_MS
        end = stalls.settle((t + MOD_TIMEOUT_MS * NS_PER_MS) if timed_out else back)
        attempts.append(sp.Attempt(j, t, end, (arrive, done), timed_out))
        t = end + lognormal_ms(rng, 0.1, 0.3)
        if not timed_out:
            break
    return attempts, t


def _search(rng: random.Random, t: float, slow: bool, stalls: Stalls) -> tuple[float, float]:
    shards = []
    for k in range(SHARDS):
        ms = lognormal_ms(rng, 1200.0, 0.5) if slow and k == SLOW_SHARD else lognormal_ms(rng, 6.0, 0.35)
        shards.append(ms + (lognormal_ms(rng, 40.0, 0.3) if rng.random() < 0.01 else 0.0))
    return t, stalls.settle(t + max(shards) + lognormal_ms(rng, 1.2, 0.3))


def _replicas(rng: random.Random, s: dict[str, Any], parts: set[str], run_ns: float) -> list[Replica]:
    out = []
    for j in range(REPLICAS):
        cfg = EngineConfig(s["chunked"], 80_000, 0.3, 0.002, 6_000.0)
        r = Replica(j, cfg, random.Random(rng.getrandbits(32)))
        r.host = dict.fromkeys(ADAPTERS, 0.0)  # loaded since the process started
        r.prefix_touch = dict.fromkeys(range(len(TENANT_SHARE)), 0.0)  # a process running for a while
        if "prefix-cache-eviction" in parts:
            window = (0.3 * run_ns, 0.65 * run_ns)
            r.extra_churn.append((*window, 400_000.0, 30_000))
            r.overhead.append((*window, 1.5))
        out.append(r)
    return out


def _settle_all(starts: np.ndarray, ends: np.ndarray, times: np.ndarray) -> np.ndarray:
    """Stalls.settle over an array of times (the stalls are merged: one at most holds a time)."""
    k = np.maximum(np.searchsorted(starts, times, side="right") - 1, 0)
    inside = (np.searchsorted(starts, times, side="right") > 0) & (times < ends[k])
    return np.where(inside, ends[k], times)


def generate(scenario: str, requests: int, seed: int, **opts: Any) -> TraceTable:
    truth(scenario, seed)
    s = {**setup(seed), **opts}
    parts = set(scenario.split("+")) - {"steady"}
    rng = random.Random(seed * 1_000_003 + 3434)
    table = TraceTable(seed, 0x34A)
    res = sp.Resources(table, style(seed))
    run_s = requests / s["rps"]
    run_ns = run_s * NS_PER_S
    bursts = ((0.35 * run_s, 0.35 * run_s, 1.7),) if "detokenizer-lag" in parts else ()
    arrivals = poisson_arrivals(rng, s["rps"], requests, bursts)
    horizon = arrivals[-1] + 120 * NS_PER_S
    full_gc = "gateway-gen2-gc" in parts
    pauses = [[_pauses(rng, horizon, full_gc) for _ in range(WORKERS)] for _ in range(PODS)]
    stalls = [[Stalls(merge_intervals([(a, b) for a, b, _ in ps])) for ps in pod] for pod in pauses]
    replicas = _replicas(rng, s, parts, run_ns)
    turns: list[dict[str, Any]] = []
    calls: list[Call] = []
    for i, t0 in enumerate(arrivals):
        pod, worker = rng.randrange(PODS), rng.randrange(WORKERS)
        st = stalls[pod][worker]
        at = t0 / run_ns
        tenant = rng.choices(range(len(TENANT_SHARE)), TENANT_SHARE)[0]
        thrash = "lora-adapter-thrash" in parts and at >= 0.25
        adapter = tenant if tenant in ADAPTERS or (thrash and tenant < THRASH) else None
        long_conv = "long-conversation-burst" in parts and 0.3 <= at < 0.55 and rng.random() < 0.12
        history = (int(rng.uniform(8000, 14000)) if long_conv
                   else int(min(7000, 600 * rng.lognormvariate(0, 0.9))))
        if "long-prompt-prefill" in parts and at >= 0.3 and rng.random() < 0.05:
            history = int(rng.uniform(14000, 28000)) - SYSTEM_TOKENS
        root_s = st.settle(t0 + lognormal_ms(rng, 0.3, 0.3))
        get = (root_s + lognormal_ms(rng, 0.2, 0.3), 0.0)
        get = (get[0], st.settle(get[0] + lognormal_ms(rng, 0.6, 0.3)))
        t = get[1]
        rebuild = rebuild_set = None
        if rng.random() < 0.03:
            a = t + lognormal_ms(rng, 0.1, 0.3)
            rebuild = (a, st.settle(a + lognormal_ms(rng, 6.0 + 0.004 * history, 0.4)))
            b = rebuild[1] + lognormal_ms(rng, 0.2, 0.3)
            rebuild_set = (b, st.settle(b + lognormal_ms(rng, 0.7, 0.3)))
            t = rebuild_set[1]
        mod, t = _moderation(rng, t + lognormal_ms(rng, 0.1, 0.3), "moderation-slow-replica" in parts, st)
        search = _search(rng, t + lognormal_ms(rng, 0.1, 0.3), "vector-slow-shard" in parts, st)
        b0 = search[1] + lognormal_ms(rng, 0.1, 0.3)
        build = (b0, st.run(b0, (1.0 + 0.0006 * history) * NS_PER_MS * rng.lognormvariate(0, 0.2)))
        send = build[1] + lognormal_ms(rng, 0.2, 0.3)
        prompt = SYSTEM_TOKENS + int(rng.uniform(800, 1200)) + history + int(rng.uniform(20, 120))
        out = int(min(MAX_TOKENS, max(8, (320 if long_conv else 90) * rng.lognormvariate(0, 0.55))))
        seq = Seq(i, 0.0, prompt, SYSTEM_TOKENS, out, tenant, adapter)
        calls.append(Call(seq, send))
        turns.append({"pod": pod, "worker": worker, "tenant": tenant, "root_s": root_s, "get": get,
                      "rebuild": rebuild, "rebuild_set": rebuild_set, "mod": mod, "search": search,
                      "build": build, "history": history})
    restart = None
    if "replica-restart" in parts:
        down = 0.4 * run_ns
        restart = Restart(RESTARTED, down, down + 20 * NS_PER_S, s["detect_s"], s["ramp_s"])
    serve(calls, replicas, random.Random(rng.getrandbits(32)), 5.0 if "router-stale-load" in parts else 0.0,
          restart)
    delivered = [r.delivered() for r in replicas]
    ticks = [np.asarray(r.tick_step, dtype=np.int64) for r in replicas]
    held = [[(np.asarray(x.starts), np.asarray(x.ends)) for x in pod] for pod in stalls]
    full = [[[p for p in ps if p[2] >= 1] for ps in pod] for pod in pauses]
    jitter = np.random.default_rng(seed * 7 + 34)
    for i, (call, tr) in enumerate(zip(calls, turns, strict=True)):
        st = stalls[tr["pod"]][tr["worker"]]
        seq = call.seq
        send = call.send
        tokens: list[float] = []
        engine = None
        queue_s = scheduler_s = prefill_s = ttft_s = 0.0
        if call.failed:
            llm = (send, st.settle(call.refused[-1][1] + lognormal_ms(rng, 0.3, 0.3)))
            save = None
        else:
            rep = replicas[call.replica]
            raw = rep.token_times(seq, delivered[call.replica], ticks[call.replica])
            relayed = raw + 0.15 * NS_PER_MS * jitter.lognormal(0.0, 0.3, len(raw))
            tokens = _settle_all(*held[tr["pod"]][tr["worker"]], relayed).tolist()
            engine = (seq.arrive, float(raw[-1]))
            assert seq.first_sched is not None
            queue_s = (seq.first_sched - seq.arrive) / NS_PER_S
            scheduler_s = queue_s + seq.preemptions * 0.002
            prefill_s = seq.prefill_ns / NS_PER_S
            ttft_s = float(raw[0] - seq.arrive) / NS_PER_S
            llm = (send, st.settle(tokens[-1] + lognormal_ms(rng, 0.2, 0.3)))
            a = llm[1] + lognormal_ms(rng, 0.2, 0.3)
            save = (a, st.settle(a + lognormal_ms(rng, 0.7, 0.3)))
        end = (save or llm)[1] + lognormal_ms(rng, 0.3, 0.3)
        gc = [(a, b, g) for a, b, g in full[tr["pod"]][tr["worker"]] if a < end and b > tr["root_s"]]
        sp.write_turn(table, res, sp.Turn(
            tr["pod"], tr["worker"], seq.tenant, i, (tr["root_s"], end), tr["get"], tr["rebuild"],
            tr["rebuild_set"], tr["mod"], tr["search"], tr["build"], llm, call.refused, call.failed,
            max(call.replica, 0), seq.prompt, seq.cached, seq.out, engine, queue_s, scheduler_s, prefill_s,
            ttft_s, tokens, save, seq.adapter, tr["history"], gc))
    return table
