"""The spans of `rag-chat` (see rag_chat.py): one request's tree, written with the seed's conventions
(semconv generation, manual span naming, how the LLM server reports its phases, GC events)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from reference_pipeline.simulate.rag_chat_flow import CANDIDATES, Req
from reference_pipeline.simulate.rag_chat_llm_spans import llm_spans
from reference_pipeline.simulate.trace_table import NS_PER_MS, TraceTable

SEARCH_RPC = "milvus.proto.milvus.MilvusService/Search"
SHARD_RPC = "milvus.proto.query.QueryNode/Search"
STEPS = {  # the orchestrator's manual spans, per naming style
    "snake": (
        "embed_query",
        "semantic_cache.lookup",
        "retrieve",
        "rerank",
        "build_prompt",
        "moderate",
        "semantic_cache.store",
    ),
    "dotted": (
        "rag.embed",
        "rag.cache.get",
        "rag.retrieve",
        "rag.rerank",
        "rag.prompt",
        "rag.moderation",
        "rag.cache.put",
    ),
    "classy": (
        "Embedder.embed",
        "SemanticCache.lookup",
        "Retriever.search",
        "Reranker.rerank",
        "PromptBuilder.build",
        "Moderator.check",
        "SemanticCache.store",
    ),
}


@dataclass
class Where:
    """The resources (by index) and the seed's conventions."""

    ingress: int | None
    ingress_name: str | None
    ingress_scope: str | None
    pods: list[int]
    embedders: list[int]
    proxy: int
    nodes: list[int]
    llms: list[int]
    moderation: int
    style: str  # snake / dotted / classy
    semconv: str  # new / old
    llm_report: str  # phases / events / single
    cache_attr: str | None
    gc_events: bool


def _http(semconv: str, method: str, url: str, status: int, peer: str) -> dict[str, Any]:
    if semconv == "new":
        return {
            "http.request.method": method,
            "url.full": url,
            "http.response.status_code": status,
            "server.address": peer,
        }
    return {"http.method": method, "http.url": url, "http.status_code": status, "net.peer.name": peer}


def write_request(table: TraceTable, w: Where, r: Req, pauses: list[tuple[float, float, int]]) -> None:
    trace = table.new_trace()
    pod = w.pods[r.pod]
    names = STEPS[w.style]
    root_s, root_e = r.marks["root"]
    parent = None
    route = {"http.route": "/v1/chat"}
    if w.ingress is not None:
        attrs = {
            "upstream_cluster": "outbound|8080||rag-orchestrator",
            "response_flags": "-",
            "http.method": "POST",
            "http.url": "https://chat.internal/v1/chat",
            "http.status_code": 200,
        }
        parent = table.span(
            trace,
            None,
            w.ingress_name or "ingress",
            "Server",
            w.ingress,
            w.ingress_scope or "",
            r.t0,
            root_e + 0.3 * NS_PER_MS,
            attrs,
        )
    http = (
        _http(w.semconv, "POST", "http://rag-orchestrator:8080/v1/chat", 200, "rag-orchestrator")
        if w.semconv == "old"
        else {"http.request.method": "POST", "http.response.status_code": 200}
    )
    events = []
    if w.gc_events:
        for a, b, gen in pauses:
            if a < root_e and b > root_s:
                events.append(
                    (b, "gc", {"gc.generation": gen, "gc.duration_ms": round((b - a) / NS_PER_MS, 3)})
                )
    root = table.span(
        trace,
        parent,
        "POST /v1/chat",
        "Server",
        pod,
        "opentelemetry.instrumentation.fastapi",
        root_s,
        root_e,
        {**http, **route},
        events=events,
    )
    asgi = "opentelemetry.instrumentation.asgi"
    if w.style != "classy":
        table.span(
            trace,
            root,
            "POST /v1/chat http receive",
            "Internal",
            pod,
            asgi,
            *r.marks["receive"],
            {"asgi.event.type": "http.request"},
        )
    emb = table.span(trace, root, names[0], "Internal", pod, "rag", *r.marks["embed_query"])
    c = _call(table, w, trace, emb, pod, r.marks["embed_call"], "text-embeddings", "/embed")
    e_srv_s = r.marks["embed_call"][0] + 0.3 * NS_PER_MS
    start, end, size, replica = r.embed
    srv = table.span(
        trace,
        c,
        "POST /embed",
        "Server",
        w.embedders[replica],
        "text-embeddings-router",
        e_srv_s,
        end + 0.1 * NS_PER_MS,
        {"inputs.tokens": r.query_tokens},
    )
    table.span(
        trace, srv, "queue", "Internal", w.embedders[replica], "text-embeddings-router", e_srv_s, start
    )
    table.span(
        trace,
        srv,
        "inference",
        "Internal",
        w.embedders[replica],
        "text-embeddings-router",
        start,
        end,
        {"batch_size": size},
    )
    hit_attr = {w.cache_attr: r.hit} if w.cache_attr else {}
    lookup = table.span(trace, root, names[1], "Internal", pod, "rag", *r.marks["lookup"], hit_attr)
    db = "db.query.text" if w.semconv == "new" else "db.statement"
    table.span(
        trace,
        lookup,
        "FT.SEARCH",
        "Client",
        pod,
        "opentelemetry.instrumentation.redis",
        *r.marks["redis"],
        {
            "db.system": "redis",
            db: "FT.SEARCH llmcache @embedding:[VECTOR_RANGE $r $vec] LIMIT 0 1",
            "db.redis.database_index": 0,
        },
        peer="redis-semcache",
    )
    if not r.hit:
        _generation(table, w, trace, root, pod, r, names)
    if w.style != "classy":
        table.span(
            trace,
            root,
            "POST /v1/chat http send",
            "Internal",
            pod,
            asgi,
            *r.marks["send"],
            {"asgi.event.type": "http.response.body"},
        )


def _call(
    table: TraceTable,
    w: Where,
    trace: int,
    parent: int,
    pod: int,
    when: tuple[float, float],
    peer: str,
    path: str,
    status: str = "Unset",
    message: str = "",
    code: int = 200,
) -> int:
    name = "POST" if w.semconv == "new" else "HTTP POST"
    attrs = _http(w.semconv, "POST", f"http://{peer}{path}", code, peer)
    if status == "Error":
        attrs.pop("http.response.status_code", None)
        attrs.pop("http.status_code", None)
        if w.semconv == "new":
            attrs["error.type"] = "httpx.ReadTimeout"
    return table.span(
        trace,
        parent,
        name,
        "Client",
        pod,
        "opentelemetry.instrumentation.httpx",
        *when,
        attrs,
        status,
        message,
        peer=peer,
    )


def _generation(table: TraceTable, w: Where, trace: int, root: int, pod: int, r: Req, names: tuple) -> None:
    rv = table.span(
        trace, root, names[2], "Internal", pod, "rag", *r.marks["retrieve"], {"retrieval.top_n": CANDIDATES}
    )
    rpc = {"rpc.system": "grpc", "rpc.service": "milvus.proto.milvus.MilvusService", "rpc.method": "Search"}
    call = table.span(
        trace,
        rv,
        SEARCH_RPC,
        "Client",
        pod,
        "opentelemetry.instrumentation.grpc",
        *r.marks["search_call"],
        {**rpc, "rpc.grpc.status_code": 0},
        peer="milvus-proxy",
    )
    proxy = table.span(
        trace,
        call,
        SEARCH_RPC,
        "Server",
        w.proxy,
        "milvus",
        *r.marks["proxy"],
        {**rpc, "rpc.grpc.status_code": 0},
    )
    node_rpc = {"rpc.system": "grpc", "rpc.service": "milvus.proto.query.QueryNode", "rpc.method": "Search"}
    for k, (send, back, _start, b, _flat) in enumerate(r.shards):
        c = table.span(
            trace,
            proxy,
            SHARD_RPC,
            "Client",
            w.proxy,
            "milvus",
            send,
            back,
            {**node_rpc, "rpc.grpc.status_code": 0},
            peer="milvus-querynode",
        )
        table.span(
            trace,
            c,
            SHARD_RPC,
            "Server",
            w.nodes[k],
            "milvus",
            send + 0.25 * NS_PER_MS,
            b,
            {**node_rpc, "rpc.grpc.status_code": 0, "shard": k},
        )
    table.span(
        trace,
        proxy,
        "ReduceSearchResults",
        "Internal",
        w.proxy,
        "milvus",
        *r.marks["reduce"],
        {"nq": 1, "topk": CANDIDATES},
    )
    table.span(
        trace,
        root,
        names[3],
        "Internal",
        pod,
        "rag",
        *r.marks["rerank"],
        {"rerank.candidates": CANDIDATES, "rerank.model": "ms-marco-MiniLM-L-6-v2"},
    )
    table.span(
        trace,
        root,
        names[4],
        "Internal",
        pod,
        "rag",
        *r.marks["build_prompt"],
        {"retrieval.top_k": r.top_k, "prompt.tokens": r.prompt},
    )
    llm_spans(table, w.semconv, w.llm_report, w.llms[r.replica], trace, root, pod, r)
    mod = table.span(
        trace, root, names[5], "Internal", pod, "rag", *r.marks["moderate"], {"moderation.skipped": r.skipped}
    )
    for a_s, a_e, srv_s, srv_e, failed in r.attempts:
        c = _call(
            table,
            w,
            trace,
            mod,
            pod,
            (a_s, a_e),
            "moderation-api",
            "/v1/moderations",
            "Error" if failed else "Unset",
            "ReadTimeout: timed out" if failed else "",
        )
        table.span(
            trace,
            c,
            "POST /v1/moderations",
            "Server",
            w.moderation,
            "opentelemetry.instrumentation.fastapi",
            srv_s,
            srv_e,
            {"http.route": "/v1/moderations", "http.response.status_code": 200},
        )
    store = table.span(trace, root, names[6], "Internal", pod, "rag", *r.marks["store"])
    table.span(
        trace,
        store,
        "HSET",
        "Client",
        pod,
        "opentelemetry.instrumentation.redis",
        *r.marks["hset"],
        {"db.system": "redis", "db.redis.database_index": 0},
        peer="redis-semcache",
    )
