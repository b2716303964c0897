"""How the blind family `vllm-stream` (vllm_stream.py) is instrumented, per seed: resources (the pod's
name, host.name + process.pid per uvicorn worker, or a Zipkin endpoint), old (`llm.*`, `db.statement`,
`net.peer.name`) or new (`gen_ai.*`, `db.query.text`, `server.address`) conventions, whether vLLM
exports its `llm_request` spans, token events and GC events on the gateway's span; and the spans of
one chat turn, written from its timeline.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from reference_pipeline.simulate.trace_table import NS_PER_MS, NS_PER_S, TraceTable

GW, VLLM, MOD = "chat-gateway", "vllm", "moderation"
MODEL = "support-assistant-8b"
ROUTE = "/v1/chat/stream"
ROOT = f"POST {ROUTE}"
GET, SET, PG = "GET", "SET", "SELECT chat"
MODERATE, MOD_SERVER = "POST", "POST /v1/moderate"
SEARCH = "/qdrant.Points/Search"
BUILD = "build_prompt"
LLM_NEW, LLM_OLD = f"chat {MODEL}", "openai.chat"
ENGINE = "llm_request"
FIRST_TOKEN, TOKENS, GC = "first_token", "tokens", "gc.collect"
_SUFFIX = ("7xk2p", "q4m9d", "h8v3n")
_GW_PIDS = (7, 8)
ROUTER = "vllm-router.support.svc"


def gw_pod(k: int) -> str:
    return f"chat-gateway-5f7d9c8b6-{_SUFFIX[k]}"


@dataclass(frozen=True)
class Style:
    """One seed's conventions: `semconv` old | new, `ident` pod | host-pid | endpoint, `engine_spans`:
    vLLM exports llm_request, `token_every`: a token event per N tokens on the gateway span (0: none,
    -1: the first token only), `gc_events`: the gateway reports its collections as span events."""

    semconv: str
    ident: str
    engine_spans: bool
    token_every: int
    gc_events: bool

    @property
    def llm(self) -> str:
        return LLM_NEW if self.semconv == "new" else LLM_OLD

    def engine_span(self) -> str:
        """Where the engine's time shows: its own span, or only the gateway's LLM call."""
        return ENGINE if self.engine_spans else self.llm

    def label(self, service: str, pod: int, worker: int = 0) -> str:
        """The instance as the store names it."""
        name = gw_pod(pod) if service == GW else f"{service}-{pod}"
        if self.ident == "pod":
            return name
        if self.ident == "host-pid":
            return f"{name}:{_GW_PIDS[worker] if service == GW else 1}"
        ip, port = endpoint(service, pod)
        return f"{ip}:{port}"


def endpoint(service: str, pod: int) -> tuple[str, int]:
    return {GW: (f"10.40.1.{11 + pod}", 8000), VLLM: (f"10.40.2.{21 + pod}", 8000),
            MOD: (f"10.40.3.{31 + pod}", 8080)}[service]


@dataclass
class Resources:
    table: TraceTable
    style: Style
    made: dict[tuple[str, int, int], int] = field(default_factory=dict)

    def get(self, service: str, pod: int, worker: int = 0) -> int:
        key = (service, pod, worker if self.style.ident == "host-pid" and service == GW else 0)
        if key not in self.made:
            name = gw_pod(pod) if service == GW else f"{service}-{pod}"
            attrs: dict[str, Any] = {"service.name": service, "telemetry.sdk.language": "python"}
            if self.style.ident == "pod":
                attrs.update({"k8s.pod.name": name, "k8s.namespace.name": "support"})
            elif self.style.ident == "host-pid":
                attrs.update({"host.name": name, "process.pid": _GW_PIDS[worker] if service == GW else 1})
            if service == VLLM and self.style.ident != "endpoint":
                attrs["service.version"] = "0.6.4" if self.style.semconv == "old" else "0.8.5"
            self.made[key] = self.table.resource(attrs, *endpoint(service, pod))
        return self.made[key]


@dataclass
class Attempt:
    replica: int
    start: float
    end: float
    server: tuple[float, float]
    timed_out: bool


@dataclass
class Turn:
    """One chat turn, as the model computed it."""

    pod: int
    worker: int
    tenant: int
    conversation: int
    root: tuple[float, float]
    history_get: tuple[float, float]
    rebuild: tuple[float, float] | None  # Postgres, on a Redis miss
    rebuild_set: tuple[float, float] | None
    moderation: list[Attempt]
    search: tuple[float, float]
    build: tuple[float, float]
    llm: tuple[float, float]
    refused: list[tuple[float, float, int]]
    failed: bool
    replica: int
    prompt: int
    cached: int
    out: int
    engine: tuple[float, float] | None  # llm_request: arrival at vLLM -> last token delivered
    queue_s: float
    scheduler_s: float
    prefill_s: float
    ttft_s: float
    tokens: list[float]  # when the gateway relayed each token
    save: tuple[float, float] | None
    adapter: int | None
    history_tokens: int
    gc: list[tuple[float, float, int]]  # collections (start, end, generation) during the span


def _peer(style: Style, host: str, port: int) -> dict[str, Any]:
    if style.semconv == "new":
        return {"server.address": host, "server.port": port}
    return {"net.peer.name": host, "net.peer.port": port}


def _redis(style: Style, op: str) -> dict[str, Any]:
    key = "db.operation.name" if style.semconv == "new" else "db.operation"
    return {"db.system": "redis", key: op, **_peer(style, "redis-chat.support.svc", 6379)}


def write_turn(table: TraceTable, res: Resources, tl: Turn) -> None:
    st = res.style
    new = st.semconv == "new"
    trace = table.new_trace()
    me = res.get(GW, tl.pod, tl.worker)
    code = 502 if tl.failed else 200
    http = ({"http.request.method": "POST", "http.route": ROUTE, "url.path": ROUTE,
             "http.response.status_code": code} if new else
            {"http.method": "POST", "http.route": ROUTE, "http.target": ROUTE, "http.status_code": code})
    events: list[tuple[float, str, dict[str, Any]]] = []
    if tl.tokens and st.token_every:
        events.append((tl.tokens[0], FIRST_TOKEN, {"gen_ai.server.time_to_first_token": round(
            (tl.tokens[0] - tl.root[0]) / NS_PER_S, 4)}))
        if st.token_every > 0:
            events += [(tl.tokens[k - 1], TOKENS, {"gen_ai.usage.output_tokens": k})
                       for k in range(st.token_every, len(tl.tokens) + 1, st.token_every)]
    if st.gc_events:
        events += [(a, GC, {"gc.generation": g, "gc.pause_ms": round((b - a) / NS_PER_MS, 2)})
                   for a, b, g in tl.gc]
    events.sort(key=lambda e: e[0])
    root = table.span(trace, None, ROOT, "Server", me, "opentelemetry.instrumentation.fastapi", *tl.root,
                      {**http, "app.tenant": f"tenant-{tl.tenant}"}, "Error" if tl.failed else "Unset",
                      "upstream model unavailable" if tl.failed else "", events)
    redis_scope = "opentelemetry.instrumentation.redis"
    table.span(trace, root, GET, "Client", me, redis_scope, *tl.history_get,
               {**_redis(st, "GET"), "app.history.hit": tl.rebuild is None}, peer="redis")
    if tl.rebuild is not None:
        stmt = "SELECT role, content, created_at FROM messages WHERE conversation_id = $1 ORDER BY created_at"
        table.span(trace, root, PG, "Client", me, "opentelemetry.instrumentation.asyncpg", *tl.rebuild,
                   {"db.system": "postgresql", ("db.namespace" if new else "db.name"): "chat",
                    ("db.query.text" if new else "db.statement"): stmt,
                    **_peer(st, "pg-chat.support.svc", 5432)}, peer="postgres")
        if tl.rebuild_set is not None:
            table.span(trace, root, SET, "Client", me, redis_scope, *tl.rebuild_set, _redis(st, "SET"),
                       peer="redis")
    for a in tl.moderation:
        attrs = ({"http.request.method": "POST", "url.full": "http://moderation.support.svc:8080/v1/moderate"}
                 if new else {"http.method": "POST", "http.url": "http://moderation.support.svc:8080/v1/moderate"})
        attrs.update(_peer(st, "moderation.support.svc", 8080))
        if not a.timed_out:
            attrs["http.response.status_code" if new else "http.status_code"] = 200
        client = table.span(trace, root, MODERATE, "Client", me, "opentelemetry.instrumentation.httpx",
                            a.start, a.end, attrs, "Error" if a.timed_out else "Unset",
                            "ReadTimeout: timed out" if a.timed_out else "", peer=MOD)
        server = {"http.request.method" if new else "http.method": "POST", "http.route": "/v1/moderate",
                  "http.response.status_code" if new else "http.status_code": 200}
        table.span(trace, client, MOD_SERVER, "Server", res.get(MOD, a.replica),
                   "opentelemetry.instrumentation.fastapi", *a.server, server)
    table.span(trace, root, SEARCH, "Client", me, "opentelemetry.instrumentation.grpc", *tl.search,
               {"rpc.system": "grpc", "rpc.service": "qdrant.Points", "rpc.method": "Search",
                "rpc.grpc.status_code": 0, **_peer(st, "qdrant.support.svc", 6334)}, peer="qdrant")
    table.span(trace, root, BUILD, "Internal", me, "chat_gateway", *tl.build,
               {"app.history.tokens": tl.history_tokens, "app.articles": 3})
    llm = table.span(trace, root, *_llm(st, tl, me))
    if st.engine_spans:
        write_engine(table, res, trace, llm, tl)
    if tl.save is not None:
        table.span(trace, root, SET, "Client", me, redis_scope, *tl.save, _redis(st, "SET"), peer="redis")


def _llm(st: Style, tl: Turn, me: int) -> tuple:
    new = st.semconv == "new"
    model = MODEL if tl.adapter is None else f"{MODEL}:tenant-{tl.adapter}"
    if new:
        attrs: dict[str, Any] = {"gen_ai.operation.name": "chat", "gen_ai.system": "openai",
                                 "gen_ai.request.model": model, "gen_ai.request.max_tokens": 400,
                                 "gen_ai.usage.input_tokens": tl.prompt, **_peer(st, ROUTER, 8000)}
        if not tl.failed:
            attrs["gen_ai.usage.output_tokens"] = tl.out
    else:
        attrs = {"llm.request.type": "chat", "llm.request.model": model, "llm.is_streaming": True,
                 "llm.usage.prompt_tokens": tl.prompt, **_peer(st, ROUTER, 8000)}
        if not tl.failed:
            attrs.update({"llm.usage.completion_tokens": tl.out,
                          "llm.usage.total_tokens": tl.prompt + tl.out})
    events = [(a, "exception", {"exception.type": "openai.APIConnectionError",
                                "exception.message": "Connection error."}) for a, _, _ in tl.refused]
    status = ("Error", "APIConnectionError: Connection error.") if tl.failed else ("Unset", "")
    return (st.llm, "Client", me, "opentelemetry.instrumentation.openai", *tl.llm, attrs, *status, events,
            VLLM)


def write_engine(table: TraceTable, res: Resources, trace: int, parent: int, tl: Turn) -> None:
    """vLLM's own span: from the request's arrival to its last token; its latencies as attributes."""
    if tl.engine is None:
        return
    st = res.style
    attrs = {"gen_ai.request.id": f"chatcmpl-{trace:08x}", "gen_ai.response.model": MODEL,
             "gen_ai.request.max_tokens": 400, "gen_ai.usage.prompt_tokens": tl.prompt,
             "gen_ai.usage.completion_tokens": tl.out, "gen_ai.latency.time_in_queue": round(tl.queue_s, 4),
             "gen_ai.latency.time_to_first_token": round(tl.ttft_s, 4),
             "gen_ai.latency.e2e": round((tl.engine[1] - tl.engine[0]) / NS_PER_S, 4)}
    if st.semconv == "new":
        attrs.update({"gen_ai.latency.time_in_model_prefill": round(tl.prefill_s, 4),
                      "gen_ai.usage.cached_tokens": tl.cached})
    else:
        attrs["gen_ai.latency.time_in_scheduler"] = round(tl.scheduler_s, 4)
    table.span(trace, parent, ENGINE, "Server", res.get(VLLM, tl.replica), "vllm.tracing", *tl.engine, attrs)
