"""The LLM call's spans in `rag-chat` (see rag_chat.py): the orchestrator's streaming client span and
the LLM server's report of the request, per seed: per-phase spans, span events, or one span."""

from __future__ import annotations

from typing import Any

from reference_pipeline.simulate.rag_chat_engine import Gen
from reference_pipeline.simulate.rag_chat_flow import MAX_TOKENS, Req
from reference_pipeline.simulate.trace_table import NS_PER_MS, TraceTable

MODEL = "meta-llama/Llama-3.1-8B-Instruct"
LLM_CLIENT = {"new": f"chat {MODEL.split('/')[1]}", "old": "openai.chat", "zipkin": "llm.chat"}


def tokens(semconv: str, prompt: int, output: int) -> dict[str, Any]:
    if semconv == "new":
        return {"gen_ai.usage.input_tokens": prompt, "gen_ai.usage.output_tokens": output}
    return {"gen_ai.usage.prompt_tokens": prompt, "gen_ai.usage.completion_tokens": output}


def llm_spans(
    table: TraceTable, semconv: str, report: str, replica: int, trace: int, root: int, pod: int, r: Req
) -> None:
    """The orchestrator's streaming call and the LLM server's side of it, as `report` says: phase
    spans, span events, or one span with token counts."""
    g = r.gen
    assert g is not None
    finish = "length" if r.output >= MAX_TOKENS else "stop"
    client_name = LLM_CLIENT["zipkin" if report == "single" else semconv]
    attrs: dict[str, Any] = {
        "gen_ai.system": "openai",
        "gen_ai.request.model": MODEL,
        "gen_ai.request.max_tokens": MAX_TOKENS,
        **tokens(semconv, r.prompt, r.output),
    }
    events = []
    first = r.marks["first_read"][0]
    if report == "single":
        attrs["llm.ttft_ms"] = round((first - r.marks["llm_call"][0]) / NS_PER_MS, 2)
    else:
        events.append((first, "first_token", {}))
    if semconv == "new":
        attrs["gen_ai.operation.name"] = "chat"
        attrs["gen_ai.response.finish_reasons"] = finish
    call = table.span(
        trace,
        root,
        client_name,
        "Client",
        pod,
        "opentelemetry.instrumentation.openai",
        *r.marks["llm_call"],
        attrs,
        events=events,
        peer="llm-serving",
    )
    server = {"gen_ai.request.model": MODEL, **tokens(semconv, r.prompt, r.output)}
    if report == "single":
        table.span(
            trace,
            call,
            "llm_request",
            "Server",
            replica,
            "vllm.llm_engine",
            g.arrive,
            g.end,
            {**server, "gen_ai.request.id": f"chatcmpl-{trace:08x}"},
        )
        return
    if report == "events":
        ev = [(a, "queued", {}) for a, _ in g.waits[:1]]
        for (_, sched), (_, _end, n_tokens) in zip(g.waits, g.prefills, strict=True):
            ev.append((sched, "scheduled", {"prefill_tokens": n_tokens}))
        ev += [(g.first_token, "first_token", {})] + [(t, "preempted", {}) for t in g.preempted]
        ev.append((g.end, "finished", {"finish_reason": finish}))
        ev.sort(key=lambda e: e[0])
        table.span(
            trace,
            call,
            "POST /v1/chat/completions",
            "Server",
            replica,
            "llm_serving",
            g.arrive,
            g.end,
            {**server, "http.route": "/v1/chat/completions"},
            events=ev,
        )
        return
    srv = table.span(
        trace,
        call,
        "POST /v1/chat/completions",
        "Server",
        replica,
        "llm_serving",
        g.arrive,
        g.end,
        {**server, "http.route": "/v1/chat/completions", "llm.preemptions": len(g.preempted)},
    )
    _phases(table, trace, srv, replica, g)


def _phases(table: TraceTable, trace: int, srv: int, replica: int, g: Gen) -> None:
    """Per-phase spans: each wait in the scheduler's queue, each prefill (a recompute after a
    preemption is one more), each run of decode steps until a preemption or the end."""
    stops = [*g.preempted, g.end]
    for k, ((queued, sched), (p_s, p_e, tokens)) in enumerate(zip(g.waits, g.prefills, strict=True)):
        table.span(trace, srv, "scheduler.wait", "Internal", replica, "llm_serving", queued, sched)
        table.span(
            trace,
            srv,
            "prefill",
            "Internal",
            replica,
            "llm_serving",
            p_s,
            p_e,
            {"prefill.tokens": tokens, "prefill.recompute": k > 0},
        )
        if stops[k] > p_e:
            table.span(trace, srv, "decode", "Internal", replica, "llm_serving", p_e, stops[k])
