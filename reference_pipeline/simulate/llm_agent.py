"""Blind family `llm-agent`: a customer-operations agent answering questions such as "why was order 123
refunded twice?" with an LLM that plans, calls tools, reads their results and answers, in a loop of
1-6 steps (most take 2-3). Physics in llm_agent_sim.py, one request's coroutine in llm_agent_flow.py,
the conventions in llm_agent_spans.py.

Shape: `support-agent` (Python, asyncio, a LangGraph-like graph; 3 pods, 4 uvicorn worker processes per
pod under gunicorn, one event loop each; a request stays on the worker that accepted it) serves
`POST /v1/agent/ask`. Each step of a request: the prompt (system prompt, question, every earlier answer
and tool result: it grows each step) is counted by a tiktoken-like tokenizer, synchronously, on the
event loop (~0.3 µs a character, worse than linear on long unbroken runs: while it counts, no other
coroutine of that worker runs); a semantic cache (the prompt's embedding, a vector lookup in Redis)
answers ~40 % of the steps in ~5 ms; the others go to the hosted provider's chat API (streamed, HTTPS,
through the worker's httpx client: max_connections = 20, a call waits inside the client for a free
connection, and the LLM span starts when the call is made: the wait has no span of its own). The
provider enforces a tokens-per-minute (prompt + max_tokens) and a requests-per-minute limit on the
key; a call over either gets a 429 with a Retry-After (1-20 s), the client sleeps that long and
retries, up to 3 times (a fourth 429 fails the request). A streamed answer takes the time to first
token (the provider's queue + prefill, ~0.1 ms a prompt token) then ~65 tokens/s; the connection is
held until the stream ends. A step that is not the last runs the tool the model asked for:
`sql_query` (a Postgres read replica through asyncpg; a consistency check first: a replica more than
1 s behind is retried after 0.5, 1, 2 s, then the primary is read), `search_docs` (a Qdrant collection
of 4 shards: a query waits for its slowest shard), `http_fetch` (`crm-api`, a Go REST service with its
own spans; documents come back whole, then the agent cuts them to 6,000 tokens after counting them) or
`run_python` (`code-sandbox`, one per node: Firecracker microVMs, each used once, from a warm pool of 8
restored from a snapshot; taking one starts a replacement boot, 2 boots at a time per node; an empty
pool means the call boots its own, 300-900 ms, and pays cold imports; 10 s timeout).

Healthy noise: jitter; provider hiccups (1 % of calls queue 2-5x longer); the odd 429 when arrivals
bunch; small tokenizer stalls every step; each worker's full collections (a healthy heap: ~1.5 M
objects, ~0.15 s every ~30 s); replica-lag spikes while a long transaction replays (a consistency
retry now and then); 0.8 % slow SQL, 0.4 % slow shard answers, 0.6 % slow crm-api reads; 3 % of
fetched documents are a few hundred KB; a cold VM boot when code requests bunch.

Conventions by seed (seed % 3): 0: OTLP/JSON, current GenAI semconv (`chat gpt-4.1`,
`execute_tool sql_query`, `gen_ai.usage.input_tokens`), each 429 and the final attempt as child
`POST` spans of the chat span (`http.response.status_code` 429, `retry-after`), semantic-cache lookup
spans, the sandbox's in-line boot as a `vm.boot` span, instances the operator's pod-level
`service.instance.id`, no GC events. 1: Jaeger JSON, OpenInference (LangChain callbacks: `agent`
CHAIN, `ChatOpenAI` LLM, tools named as is, `llm.token_count.prompt`), 429s as `retry` span events
(the sleep in `retry.after_s`), no cache spans, the boot as `sandbox.cold` / `sandbox.vm.boot_ms`,
host.name + process.pid (each worker process is an instance), GC callbacks as `gc.collection` events
on the root spans they overlap. 2: Zipkin v2, older GenAI names (`gen_ai.system`,
`gen_ai.usage.prompt_tokens`), `tool:sql_query`, retries invisible (the sleeps are inside the chat
span), cache spans, nothing of the boot, instances the pods' endpoints.

Mechanisms (scenario: truth):
- `provider-429-burst`: arrivals 3.5x for 15 % of the run (from a quarter of it, 5 s into a provider
  window): the key's tokens per minute run out, calls get 429s and sleep their Retry-After (seconds)
  before retrying: timeout_retry at the chat span, accept queueing (a Retry-After is the provider
  metering admission: waiting for budget).
- `long-streams-pool`: for the middle 40 % of the run a "detailed report" answer (14 requests/s: 88 %
  to all of them; the semantic cache answers some) streams 2,400-3,200 tokens (~43 s) holding its
  connection; each worker's 20 are all busy (40 % of calls wait, p90 9-17 s) and calls wait inside the
  client, inside the chat span, with nothing to show for it: queueing at the chat span, accept
  large_payload (the long answers are themselves a large part of the tail).
- `sandbox-pool-drain`: an "analyse this CSV" campaign (8 requests/s, half or more, for a quarter of
  the run, each running code 1-3 times) drains every node's warm pool; calls boot their own VMs
  behind the refills in 2 boot slots and import cold: cold_start at code-sandbox's server span (side
  queueing).
- `huge-tool-result`: from a tenth of the run 15 % of fetched documents are whole exports (2-5 MB);
  counting one blocks the worker's event loop for seconds, stalling every request on it: large_payload
  at the tokenizer span, accept compute_bound (side queueing).
- `cache-flush-deploy`: a deploy flushes the semantic cache at 25 % of the run; every step goes to the
  provider, hit rates recover as it refills: cache_miss at the chat span, accept timeout_retry (the
  doubled provider traffic meets the tokens-per-minute limit: 10-22 % of the run's requests get a 429
  and sleep its Retry-After, a large part of the tail's added time; side queueing).
- `replica-lag`: one of the two replicas falls 3-12 s behind from 20 % of the run; the SQL tool's check
  fails and it retries after backoff sleeps, then reads the primary: timeout_retry at the sql tool's
  span, accept slow_dependency.
- `provider-region-ttft`: from a quarter of the run the provider's region serving gpt-4.1 is degraded:
  time to first token doubles with a heavier tail: slow_dependency at the chat span.
- `runaway-loops`: a prompt change from 20 % of the run makes 12 % of requests re-verify in 7-10 steps;
  no call is slower than its prompt makes it, each request does more of them and its prompt grows:
  compute_bound at the step span (the request's own work grew), accept large_payload (the prompts
  grow), side slow_dependency and timeout_retry (the extra tokens can meet the limit).
- `vector-shard-slow`: one Qdrant shard compacting on a busy node, answering in ~1.5 s with a heavy
  tail; every search waits for it: slow_dependency at the vector search's CLIENT span.
- `conversation-heap-gc`: one pod's workers keep every conversation's state (an unbounded cache): the
  tracked objects grow ~600 k/s, CPython's gen-2 collections walk them all, pauses grow to seconds and
  freeze the worker's loop: gc_pause at the root span on that pod's workers (side queueing).
- Two causes: `cache-flush-deploy+provider-429-burst`, `huge-tool-result+vector-shard-slow` (a bulk
  import of big documents: huge results, and a shard compacting), `conversation-heap-gc+replica-lag`.

Truth instances: the agent's instances as the store names them (pods on the instance-id and endpoint
seeds, worker processes on the host-pid seed); the sandbox's nodes.
"""

from __future__ import annotations

import random
from typing import Any

from reference_pipeline.simulate import llm_agent_spans as sp
from reference_pipeline.simulate.llm_agent_flow import Req, World, agent, hit_curve
from reference_pipeline.simulate.llm_agent_sim import (
    Loop,
    Pool,
    RateLimit,
    Replica,
    Sandbox,
    Scheduler,
    gc_pauses,
)
from reference_pipeline.simulate.trace_table import NS_PER_S, Cause, TraceTable, poisson_arrivals

FAMILY = "llm-agent"
SINGLES = ("provider-429-burst", "long-streams-pool", "sandbox-pool-drain", "huge-tool-result",
           "cache-flush-deploy", "replica-lag", "provider-region-ttft", "runaway-loops", "vector-shard-slow",
           "conversation-heap-gc")
PAIRS = ("cache-flush-deploy+provider-429-burst", "huge-tool-result+vector-shard-slow",
         "conversation-heap-gc+replica-lag")
SCENARIOS = ("steady", *SINGLES, *PAIRS)
PODS, WORKERS, MAX_CONNECTIONS = 3, 4, 20
GC_POD, LAG_REPLICA, SLOW_SHARD = 1, 1, 2
TOOLS = ("sql_query", "search_docs", "http_fetch", "run_python")
_TOOL_WEIGHTS = (0.36, 0.30, 0.27, 0.07)
_STEPS = (1, 2, 3, 4, 5, 6)
_STEP_WEIGHTS = (0.08, 0.37, 0.33, 0.13, 0.06, 0.03)
_SETUPS = (
    {"fmt": "otlp-json", "telemetry": "genai", "ident": "instance-id", "retries": "spans",
     "cache_spans": True,
     "boot": "span", "gc_events": False, "rps": 14.0, "tpm": 6_900_000.0, "rpm": 2_600.0},
    {"fmt": "jaeger", "telemetry": "openinference", "ident": "host-pid", "retries": "events",
     "cache_spans": False, "boot": "attr", "gc_events": True, "rps": 12.0, "tpm": 6_200_000.0,
     "rpm": 2_350.0},
    {"fmt": "zipkin", "telemetry": "genai-old", "ident": "endpoint", "retries": "none", "cache_spans": True,
     "boot": "none", "gc_events": False, "rps": 16.0, "tpm": 8_400_000.0, "rpm": 3_050.0},
)


def setup(seed: int) -> dict[str, Any]:
    return dict(_SETUPS[seed % 3])


def style(seed: int) -> sp.Style:
    s = setup(seed)
    return sp.Style(s["telemetry"], s["ident"], s["retries"], s["cache_spans"], s["boot"], s["gc_events"])


def agent_instances(seed: int, pods: tuple[int, ...] = tuple(range(PODS))) -> tuple[str, ...]:
    st = style(seed)
    return tuple(dict.fromkeys(st.label(sp.AGENT, p, w) for p in pods for w in range(WORKERS)))


def truth(scenario: str, seed: int) -> tuple[Cause, ...]:
    if scenario not in SCENARIOS:
        raise ValueError(f"unknown {FAMILY} scenario {scenario!r}; one of {', '.join(SCENARIOS)}")
    st = style(seed)
    every = agent_instances(seed)
    nodes = tuple(st.label(sp.SANDBOX, j) for j in range(PODS))
    causes = {
        "provider-429-burst": Cause("timeout_retry", "downstream", st.llm, sp.AGENT, every,
                                    accept=("queueing",)),
        "long-streams-pool": Cause("queueing", "downstream", st.llm, sp.AGENT, every,
                                   accept=("large_payload",)),
        "sandbox-pool-drain": Cause("cold_start", "downstream", sp.SANDBOX_SERVER, sp.SANDBOX, nodes,
                                    side=("queueing",)),
        "huge-tool-result": Cause("large_payload", "preprocessing", st.tokenizer, sp.AGENT, every,
                                  accept=("compute_bound",), side=("queueing",)),
        "cache-flush-deploy": Cause("cache_miss", "downstream", st.llm, sp.AGENT, every,
                                    accept=("timeout_retry",), side=("queueing",)),
        "replica-lag": Cause("timeout_retry", "downstream", st.tool("sql_query"), sp.AGENT, every,
                             accept=("slow_dependency",)),
        "provider-region-ttft": Cause("slow_dependency", "downstream", st.llm, sp.AGENT, every),
        "runaway-loops": Cause("compute_bound", "downstream", st.step, sp.AGENT, every,
                               accept=("large_payload",),
                               side=("slow_dependency", "timeout_retry")),
        "vector-shard-slow": Cause("slow_dependency", "downstream", st.vdb, sp.AGENT, every),
        "conversation-heap-gc": Cause("gc_pause", None, sp.ROOT, sp.AGENT, agent_instances(seed, (GC_POD,)),
                                      side=("queueing",)),
    }
    return tuple(causes[part] for part in scenario.split("+") if part != "steady")


def _plan(rng: random.Random, parts: set[str], frac: float, long_share: float, code_share: float
          ) -> tuple[int, list[str], int, bool]:
    """(steps, the tool of each step but the last, the final answer's tokens, a code request)."""
    steps = rng.choices(_STEPS, _STEP_WEIGHTS)[0]
    if "runaway-loops" in parts and frac >= 0.2 and rng.random() < 0.12:
        steps = rng.randint(7, 10)
    code = "sandbox-pool-drain" in parts and 0.3 <= frac < 0.55 and rng.random() < code_share
    if code:
        steps = rng.randint(3, 5)
        tools = ["sql_query"] + ["run_python"] * (steps - 2)
    else:
        tools = rng.choices(TOOLS, _TOOL_WEIGHTS, k=steps - 1)
    final = int(150 + 300 * rng.random())
    if "long-streams-pool" in parts and 0.3 <= frac < 0.7 and rng.random() < long_share:
        final = int(2400 + 800 * rng.random())
    return steps, tools, final, code


def generate(scenario: str, requests: int, seed: int, **opts: Any) -> TraceTable:
    truth(scenario, seed)
    s = {**setup(seed), **opts}
    parts = set(scenario.split("+")) - {"steady"}
    rng = random.Random(seed * 1_000_003 + 3636)
    table = TraceTable(seed, 0x36A)
    st = style(seed)
    res = sp.Resources(table, st)
    run_s = requests / s["rps"]
    run_ns = run_s * NS_PER_S
    # where the provider's one-minute windows fall in the run: one starts 5 s before a quarter of it
    window = (60.0 - (0.25 * run_s - 5.0) % 60.0) % 60.0
    bursts = ((0.25 * run_s, 0.15 * run_s, 3.5),) if "provider-429-burst" in parts else ()
    arrivals = poisson_arrivals(rng, s["rps"], requests, bursts)
    horizon = arrivals[-1] + 900 * NS_PER_S
    loops = [Loop() for _ in range(PODS * WORKERS)]
    for j, loop in enumerate(loops):
        storm = "conversation-heap-gc" in parts and j // WORKERS == GC_POD
        objects = 4.0e6 if storm else 1.2e6 + 0.6e6 * rng.random()
        loop.gcs = gc_pauses(rng, horizon, objects, 600_000.0 if storm else 0.0)
        for a, b, _n in loop.gcs:
            loop.block(a, b)
    sched = Scheduler()
    world = World(
        rng, sched, loops, [Pool(MAX_CONNECTIONS) for _ in loops],
        RateLimit(s["tpm"], s["rpm"], window * NS_PER_S),
        [Sandbox() for _ in range(PODS)],
        [Replica(rng, horizon, 0.2 * run_ns if "replica-lag" in parts and j == LAG_REPLICA else None)
         for j in range(2)],
        hit_curve(0.5, 0.25 * run_ns if "cache-flush-deploy" in parts else None, 0.8 * run_ns),
        0.25 * run_ns if "provider-region-ttft" in parts else None,
        SLOW_SHARD if "vector-shard-slow" in parts else None)
    reqs = []
    for i, t0 in enumerate(arrivals):
        frac = t0 / run_ns
        steps, tools, final, _code = _plan(rng, parts, frac, min(1.0, 14.0 / s["rps"]),
                                           min(0.9, 8.0 / s["rps"]))
        huge: dict[int, int] = {}
        for k, tool in enumerate(tools):
            if tool != "http_fetch":
                continue
            if "huge-tool-result" in parts and frac >= 0.1 and rng.random() < 0.15:
                huge[k] = int(2.0e6 + 3.0e6 * rng.random())
            elif rng.random() < 0.03:
                huge[k] = int(1.5e5 + 4.5e5 * rng.random())
        q = Req(i, t0, rng.randrange(PODS), rng.randrange(WORKERS), steps, tools, final, huge)
        q.proc = agent(world, q)
        sched.start(q.proc, loops[q.pod * WORKERS + q.worker])
        reqs.append(q)
    sched.run()
    for q in reqs:
        sp.write_request(table, res, q, loops[q.pod * WORKERS + q.worker].gcs)
    return table
