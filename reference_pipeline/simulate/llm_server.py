"""An LLM server that traces the way vLLM does: one span per request, its phases as attributes.

No child spans: each request is a SERVER span named `llm_request` from arrival to finish, carrying
vLLM's `gen_ai.latency.*` durations (seconds) and `gen_ai.usage.*` token counts (vllm/tracing.py).
The engine is simulated as a continuous-batching scheduler with `slots` concurrent sequences: a
request waits in the queue for a free slot, then prefills (a fixed cost plus a cost per prompt
token), then decodes one token per step. Time per decode step grows with the number of sequences
running, as it does on a real GPU.

Scenarios (planted causes, for the diagnosis):
- `steady`: moderate load, ordinary prompts;
- `burst`: arrivals jump to several times capacity for a few seconds every minute: queueing;
- `long-prompt`: light load, heavy-tailed prompt lengths (3 % of prompts of 16-32 k tokens): prefill
  carries the tail, compute_bound.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

import numpy as np

from ingest.columns import SpanColumns

SCENARIOS = ("steady", "burst", "long-prompt")
BASE_NS = 1_767_225_600_000_000_000  # 2026-01-01T00:00:00Z


@dataclass(frozen=True)
class LlmServerConfig:
    requests: int = 3000
    seed: int = 0
    scenario: str = "steady"
    slots: int = 16  # max concurrent sequences
    rps: float = 6.0
    prefill_fixed_s: float = 0.012
    prefill_per_token_s: float = 0.00015
    decode_step_s: float = 0.012  # per token, with one sequence running
    decode_step_per_seq_s: float = 0.0004  # added per other running sequence


def _arrivals(cfg: LlmServerConfig, rng: np.random.Generator) -> np.ndarray:
    """Arrival times (s): Poisson at `rps`; in `burst`, 6x the rate for 6 s of every 60 s."""
    if cfg.scenario != "burst":
        return np.cumsum(rng.exponential(1.0 / cfg.rps, cfg.requests))
    times: list[float] = []
    t = 0.0
    while len(times) < cfg.requests:
        rate = cfg.rps * (6.0 if (t % 60.0) < 6.0 else 0.6)
        t += rng.exponential(1.0 / rate)
        times.append(t)
    return np.array(times)


def _tokens(cfg: LlmServerConfig, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    prompt = rng.lognormal(np.log(400), 0.5, cfg.requests)
    if cfg.scenario == "long-prompt":
        long = rng.random(cfg.requests) < 0.03
        prompt = np.where(long, rng.uniform(16000, 32000, cfg.requests), prompt)
    output = np.clip(rng.lognormal(np.log(60), 0.4, cfg.requests), 4, 512)
    return prompt.astype(np.int64), output.astype(np.int64)


def simulate_llm_server(cfg: LlmServerConfig) -> SpanColumns:
    """Simulate the run and return its spans."""
    rng = np.random.default_rng(cfg.seed)
    rps = cfg.rps * (0.35 if cfg.scenario == "long-prompt" else 1.0)
    cfg = LlmServerConfig(**{**cfg.__dict__, "rps": rps})
    arrival = _arrivals(cfg, rng)
    prompt, output = _tokens(cfg, rng)
    lead = 0.0008 + prompt * 2e-6 + rng.exponential(0.0004, cfg.requests)  # tokenize, input processing
    queued = arrival + lead
    free: list[float] = [0.0] * cfg.slots  # when each slot frees up (a heap)
    running: list[float] = []  # finish times of sequences in flight (for the decode step cost)
    cols = SpanColumns()
    for i in np.argsort(queued, kind="stable"):
        slot_free = heapq.heappop(free)
        scheduled = max(queued[i], slot_free)
        running = [f for f in running if f > scheduled]
        prefill = cfg.prefill_fixed_s + cfg.prefill_per_token_s * prompt[i] * rng.lognormal(0, 0.05)
        step = cfg.decode_step_s + cfg.decode_step_per_seq_s * len(running)
        decode = step * (output[i] - 1) * rng.lognormal(0, 0.05)
        first_token = scheduled + prefill
        last_token = first_token + decode
        finish = last_token + 0.0005 + rng.exponential(0.0003)  # detokenize, respond
        heapq.heappush(free, last_token)
        running.append(last_token)
        _append(
            cols,
            cfg,
            int(i),
            arrival[i],
            queued[i],
            scheduled,
            first_token,
            last_token,
            finish,
            int(prompt[i]),
            int(output[i]),
        )
    return cols


def _seconds(value: float) -> str:
    return repr(float(value))


def _append(
    cols: SpanColumns,
    cfg: LlmServerConfig,
    i: int,
    arrival: float,
    queued: float,
    scheduled: float,
    first_token: float,
    last_token: float,
    finish: float,
    prompt: int,
    output: int,
) -> None:
    attributes = {
        "gen_ai.request.id": f"cmpl-{cfg.seed}-{i}",
        "gen_ai.response.model": "meta-llama/Llama-3.1-8B-Instruct",
        "gen_ai.request.max_tokens": "512",
        "gen_ai.usage.prompt_tokens": str(prompt),
        "gen_ai.usage.completion_tokens": str(output),
        "gen_ai.latency.time_in_queue": _seconds(scheduled - queued),
        "gen_ai.latency.time_to_first_token": _seconds(first_token - arrival),
        "gen_ai.latency.e2e": _seconds(finish - arrival),
        "gen_ai.latency.time_in_model_prefill": _seconds(first_token - scheduled),
        "gen_ai.latency.time_in_model_decode": _seconds(last_token - first_token),
        "gen_ai.latency.time_in_model_inference": _seconds(last_token - scheduled),
    }
    cols.append(
        timestamp_ns=BASE_NS + int(arrival * 1e9),
        trace_id=f"{cfg.seed:08x}{i:024x}",
        span_id=f"{i + 1:016x}",
        parent_span_id="",
        span_name="llm_request",
        duration_ns=int((finish - arrival) * 1e9),
        service_name="vllm",
        span_kind="Server",
        resource_attributes={"service.name": "vllm", "service.instance.id": "vllm-0"},
        scope_name="vllm.entrypoints.openai.api_server",
        span_attributes=attributes,
    )
