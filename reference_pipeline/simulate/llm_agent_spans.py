"""How the blind family `llm-agent` (llm_agent.py) is instrumented, per seed: the OTel GenAI semantic
conventions (current or the older `gen_ai.system` / `prompt_tokens` names) or OpenInference's
LangChain-callback style, span names that differ with them, the provider's 429s as child spans, span
events or not at all, the semantic cache's lookups exported or not, the sandbox's VM boot as a child
span, an attribute or nothing, GC callbacks as span events on one seed; resources named by the
operator's pod-level `service.instance.id`, by host.name + process.pid (each worker process), or by a
Zipkin endpoint (one per pod). `write_request` renders one request's records (llm_agent_flow.Rec).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from reference_pipeline.simulate.llm_agent_flow import Req
from reference_pipeline.simulate.trace_table import TraceTable

AGENT, RECORDS, SANDBOX = "support-agent", "crm-api", "code-sandbox"
ROOT = "POST /v1/agent/ask"
MODEL, MODEL_VERSION = "gpt-4.1", "gpt-4.1-2025-04-14"
PROVIDER_HOST = "api.openai.com"
REPLICAS = ("orders-replica-0.db.internal", "orders-replica-1.db.internal")
PRIMARY = "orders-primary.db.internal"
SANDBOX_SERVER, BOOT = "POST /v1/execute", "vm.boot"
RECORDS_SERVER = "GET /v1/records/{id}"
_POD = ("support-agent-6d8f7c9b4-kx2pq", "support-agent-6d8f7c9b4-w7rzt", "support-agent-6d8f7c9b4-9mhvd")
WORKER_PIDS = (7, 8, 9, 10)  # gunicorn's master is PID 1; its uvicorn workers come next
_STATEMENT = {True: "SELECT now() - pg_last_xact_replay_timestamp() AS lag",
              False: "SELECT o.*, r.* FROM orders o LEFT JOIN refunds r ON r.order_id = o.id WHERE o.id = $1"}


@dataclass(frozen=True)
class Style:
    """One seed's conventions: `telemetry` genai | openinference | genai-old, `ident` instance-id |
    host-pid | endpoint, `retries` spans | events | none, `cache_spans`, `boot` span | attr | none,
    `gc_events`."""

    telemetry: str
    ident: str
    retries: str
    cache_spans: bool
    boot: str
    gc_events: bool

    @property
    def step(self) -> str:
        return "agent" if self.telemetry == "openinference" else "agent.step"

    @property
    def llm(self) -> str:
        return "ChatOpenAI" if self.telemetry == "openinference" else f"chat {MODEL}"

    @property
    def tokenizer(self) -> str:
        return {"genai": "tiktoken.encode", "openinference": "count_tokens", "genai-old": "tokenize"}[
            self.telemetry]

    def tool(self, name: str) -> str:
        return {"genai": f"execute_tool {name}", "openinference": name, "genai-old": f"tool:{name}"}[
            self.telemetry]

    @property
    def db(self) -> str:
        return "SELECT orders" if self.telemetry == "genai" else "SELECT"

    @property
    def vdb(self) -> str:
        return "search docs_chunks" if self.telemetry == "genai" else "qdrant.search"

    @property
    def cache(self) -> str:
        return "semantic_cache.lookup"

    def label(self, service: str, pod: int, worker: int = 0) -> str:
        """The instance as the store names it."""
        if self.ident == "endpoint":
            ip, port = endpoint(service, pod)
            return f"{ip}:{port}"
        if self.ident == "instance-id":
            return f"support.{host(service, pod)}.{service}"
        pid = WORKER_PIDS[worker] if service == AGENT else 1
        return f"{host(service, pod)}:{pid}"


def host(service: str, pod: int) -> str:
    if service == AGENT:
        return _POD[pod]
    return f"crm-api-5f4b8-{pod}" if service == RECORDS else f"sandbox-node-{pod}"


def endpoint(service: str, pod: int) -> tuple[str, int]:
    net = {AGENT: (2, 8000), RECORDS: (3, 8080), SANDBOX: (4, 7070)}[service]
    return f"10.40.{net[0]}.{10 + pod}", net[1]


@dataclass
class Resources:
    table: TraceTable
    style: Style
    made: dict[tuple[str, int, int], int] = field(default_factory=dict)

    def get(self, service: str, pod: int, worker: int = 0) -> int:
        key = (service, pod, worker if self.style.ident == "host-pid" and service == AGENT else 0)
        if key not in self.made:
            self.made[key] = self.table.resource(self._attrs(service, pod, worker), *endpoint(service, pod))
        return self.made[key]

    def _attrs(self, service: str, pod: int, worker: int) -> dict[str, Any]:
        lang = "go" if service == RECORDS else "python"
        attrs: dict[str, Any] = {"service.name": service, "telemetry.sdk.language": lang}
        if self.style.ident == "endpoint":
            return attrs
        attrs.update({"k8s.namespace.name": "support", "k8s.pod.name": host(service, pod),
                      "host.name": host(service, pod)})
        if self.style.ident == "instance-id":
            attrs["service.instance.id"] = self.style.label(service, pod)
        else:
            attrs["process.pid"] = WORKER_PIDS[worker] if service == AGENT else 1
        if lang == "python":
            attrs.update({"process.runtime.name": "cpython", "process.runtime.version": "3.12.7"})
        return attrs


def _llm_attrs(style: Style, info: dict[str, Any]) -> dict[str, Any]:
    finish = "stop" if info["final"] else "tool_calls"
    if style.telemetry == "openinference":
        return {"openinference.span.kind": "LLM", "llm.model_name": MODEL, "llm.provider": "openai",
                "llm.system": "openai", "llm.token_count.prompt": info["prompt"],
                "llm.token_count.completion": info["out"],
                "llm.token_count.total": info["prompt"] + info["out"],
                "llm.invocation_parameters": '{"max_tokens": 1024, "stream": true, "temperature": 0}'}
    if style.telemetry == "genai":
        return {"gen_ai.operation.name": "chat", "gen_ai.provider.name": "openai",
                "gen_ai.request.model": MODEL, "gen_ai.response.model": MODEL_VERSION,
                "gen_ai.request.max_tokens": 1024, "gen_ai.usage.input_tokens": info["prompt"],
                "gen_ai.usage.output_tokens": info["out"], "gen_ai.response.finish_reasons": (finish,),
                "server.address": PROVIDER_HOST, "server.port": 443}
    return {"gen_ai.system": "openai", "gen_ai.request.model": MODEL, "gen_ai.response.model": MODEL_VERSION,
            "gen_ai.request.max_tokens": 1024, "gen_ai.usage.prompt_tokens": info["prompt"],
            "gen_ai.usage.completion_tokens": info["out"], "gen_ai.response.finish_reasons": f'["{finish}"]',
            "net.peer.name": PROVIDER_HOST}


def _tool_attrs(style: Style, name: str, info: dict[str, Any]) -> dict[str, Any]:
    if style.telemetry == "openinference":
        kind = "RETRIEVER" if name == "search_docs" else "TOOL"
        attrs: dict[str, Any] = {"openinference.span.kind": kind, "tool.name": name}
    elif style.telemetry == "genai":
        attrs = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name,
                 "gen_ai.tool.type": "function"}
    else:
        attrs = {"tool.name": name}
    attrs["tool.output.bytes"] = info["bytes"]
    if name == "sql_query":
        attrs["sql.consistency_retries"] = info["retries"]
    return attrs


def _db_attrs(style: Style, info: dict[str, Any]) -> dict[str, Any]:
    target = PRIMARY if info["host"] < 0 else REPLICAS[info["host"]]
    if style.telemetry == "genai":
        return {"db.system.name": "postgresql", "db.namespace": "orders", "db.operation.name": "SELECT",
                "db.query.text": _STATEMENT[info["check"]], "server.address": target, "server.port": 5432}
    return {"db.system": "postgresql", "db.name": "orders", "db.statement": _STATEMENT[info["check"]],
            "net.peer.name": target, "net.peer.port": 5432}


def write_request(table: TraceTable, res: Resources, q: Req, gcs: list[tuple[float, float, int]]) -> None:
    style = res.style
    trace = table.new_trace()
    me = res.get(AGENT, q.pod, q.worker)
    scope = "opentelemetry.instrumentation.fastapi"
    index: dict[int, int] = {}
    for i, r in enumerate(q.recs):
        parent = index.get(r.parent)
        info = r.info
        if r.role == "root":
            new = style.telemetry == "genai"
            status = 429 if q.failed else 200
            attrs = ({"http.request.method": "POST", "http.route": "/v1/agent/ask",
                      "http.response.status_code": status} if new else
                     {"http.method": "POST", "http.route": "/v1/agent/ask", "http.status_code": status})
            attrs["agent.steps"] = info.get("steps", 0)
            events = [(a, "gc.collection", {"gc.generation": 2, "gc.duration_ms": round((b - a) / 1e6, 3),
                                            "gc.objects": n})
                      for a, b, n in gcs if a < r.end and b > r.start] if style.gc_events else None
            index[i] = table.span(trace, None, ROOT, "Server", me, scope, r.start, r.end, attrs,
                                  "Error" if q.failed else "Unset", "RateLimitError: 429" if q.failed else "",
                                  events=events)
        elif r.role == "step":
            attrs = ({"openinference.span.kind": "CHAIN", "langgraph.step": info["index"] + 1,
                      "langgraph.node": "agent"} if style.telemetry == "openinference"
                     else {"agent.step.index": info["index"]})
            index[i] = table.span(trace, parent, style.step, "Internal", me, "support_agent.graph", r.start,
                                  r.end, attrs)
        elif r.role == "tokenize":
            table.span(trace, parent, style.tokenizer, "Internal", me, "support_agent.tokens", r.start, r.end,
                       {"tokenizer.encoding": "o200k_base", "tokenizer.input_chars": info["chars"],
                        "tokenizer.tokens": info["tokens"]})
        elif r.role == "cache":
            if style.cache_spans:
                table.span(trace, parent, style.cache, "Internal", me, "support_agent.cache", r.start, r.end,
                           {"cache.hit": info["hit"], "cache.backend": "redis", "cache.kind": "semantic"})
        elif r.role == "llm":
            if info["hit"] and style.telemetry != "openinference":
                continue  # the client library's instrumentation: a hit never calls it (LangChain's does)
            _write_llm(table, style, trace, parent, me, r, q.failed and i == len(q.recs) - 1)
        elif r.role == "tool":
            index[i] = table.span(trace, parent, style.tool(info["name"]), "Internal", me,
                                  "support_agent.tools", r.start, r.end,
                                  _tool_attrs(style, info["name"], info))
        elif r.role == "db":
            table.span(trace, parent, style.db, "Client", me, "opentelemetry.instrumentation.asyncpg",
                       r.start, r.end, _db_attrs(style, info), peer="postgres")
        elif r.role == "vdb":
            table.span(trace, parent, style.vdb, "Client", me, "qdrant_client", r.start, r.end,
                       {"db.system" if style.telemetry != "genai" else "db.system.name": "qdrant",
                        "db.collection.name": "docs_chunks", "db.vector.query.top_k": info["top_k"]},
                       peer="qdrant")
        elif r.role == "http":
            _write_http(table, res, trace, parent, me, r, q.pod)
        elif r.role == "sandbox":
            _write_sandbox(table, res, trace, parent, me, r, q.pod)


def _write_llm(table: TraceTable, style: Style, trace: int, parent: int | None, me: int, r: Any,
               failed: bool) -> None:
    info = r.info
    attrs = _llm_attrs(style, info)
    events = None
    retried = [a for a in info["attempts"] if a[2] == 429]
    if style.retries == "events" and retried:
        events = [(b, "retry", {"http.status_code": 429, "retry.after_s": ra, "retry.attempt": k + 1})
                  for k, (_a, b, _c, ra) in enumerate(retried)]
    scope = "openinference.instrumentation.langchain" if style.telemetry == "openinference" else "openai.chat"
    span = table.span(trace, parent, style.llm, "Client", me, scope, r.start, r.end, attrs,
                      "Error" if failed else "Unset", "429 Too Many Requests" if failed else "",
                      events=events, peer="openai")
    if style.retries == "spans":
        for a, b, code, ra in info["attempts"]:
            http = {"http.request.method": "POST", "url.full": f"https://{PROVIDER_HOST}/v1/chat/completions",
                    "server.address": PROVIDER_HOST, "server.port": 443, "http.response.status_code": code}
            if code == 429:
                http["http.response.header.retry-after"] = (str(int(ra)),)
            table.span(trace, span, "POST", "Client", me, "opentelemetry.instrumentation.httpx", a, b, http,
                       "Error" if code == 429 else "Unset", "", peer="openai")


def _write_http(table: TraceTable, res: Resources, trace: int, parent: int | None, me: int, r: Any,
                pod: int) -> None:
    style, info = res.style, r.info
    url = "http://crm-api.support.svc:8080/v1/records/"
    attrs = ({"http.request.method": "GET", "url.full": url + "doc", "http.response.status_code": 200,
              "http.response.body.size": info["size"]} if style.telemetry == "genai" else
             {"http.method": "GET", "http.url": url + "doc", "http.status_code": 200,
              "http.response_content_length": info["size"]})
    client = table.span(trace, parent, "GET", "Client", me, "opentelemetry.instrumentation.httpx", r.start,
                        r.end, attrs, peer=RECORDS)
    server = res.get(RECORDS, (pod + trace) % 2)
    table.span(trace, client, RECORDS_SERVER, "Server", server, "go.opentelemetry.io/otel/net/http",
               r.start + info["net"], r.end - info["net"],
               {"http.route": "/v1/records/{id}", "http.status_code": 200})


def _write_sandbox(table: TraceTable, res: Resources, trace: int, parent: int | None, me: int, r: Any,
                   pod: int) -> None:
    style, info = res.style, r.info
    client = table.span(trace, parent, "POST", "Client", me, "opentelemetry.instrumentation.httpx", r.start,
                        r.end, {"http.method": "POST", "http.url": "http://code-sandbox:7070/v1/execute",
                                "http.status_code": 408 if info["timeout"] else 200}, peer=SANDBOX)
    node = res.get(SANDBOX, pod)
    attrs: dict[str, Any] = {"http.route": "/v1/execute", "http.status_code": 408 if info["timeout"] else 200,
                             "sandbox.runtime": "firecracker"}
    boot = info["boot"]
    if style.boot == "attr":
        attrs.update({"sandbox.cold": boot is not None,
                      "sandbox.vm.boot_ms": 0.0 if boot is None else round((boot[1] - boot[0]) / 1e6, 1)})
    server = table.span(trace, client, SANDBOX_SERVER, "Server", node, "sandboxd", info["arrive"],
                        info["done"], attrs, "Error" if info["timeout"] else "Unset",
                        "execution timed out after 10s" if info["timeout"] else "")
    if style.boot == "span" and boot is not None:
        table.span(trace, server, BOOT, "Internal", node, "sandboxd", boot[0], boot[1],
                   {"vm.snapshot": False, "vm.vcpus": 2, "vm.memory_mb": 1024})
