"""How the blind family `pgvector-search` (pgvector_search.py) is instrumented, per seed: resources
(pod names as `service.instance.id`, ip:port as `service.instance.id`, or Zipkin endpoints), old or
new semantic conventions, `db.statement` on the SQL spans or not, TorchServe's own spans (with its
queue time as an attribute, without it, or none), Go GC cycles as span events or nothing; and the
spans of one request, written from its timeline. PgBouncer has no spans.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from reference_pipeline.simulate.pgvector_search_app import Batch, Cycle
from reference_pipeline.simulate.trace_table import NS_PER_MS, TraceTable

API, EMB = "ask-api", "embedder"
_SFX = ("q7m2x", "k4w9d", "z8c5t", "h3r6n")
SERVERS = ("pg-primary", "pg-replica-1", "pg-replica-2")
PRIMARY, REPLICA_1, REPLICA_2 = 0, 1, 2
EMB_HOST = "embedder.ml.svc.cluster.local"
TS_SERVER, TS_INFER = "POST /predictions/minilm-l6", "minilm-l6.inference"
BEGIN, EXEC, QUERY = "sql.conn.begin_tx", "sql.conn.exec", "sql.conn.query"
ROWS, COMMIT = "sql.rows", "sql.tx.commit"
RERANK = "rerank"
SET_SQL = "SET LOCAL hnsw.ef_search = 40"
SELECT_SQL = ("SELECT id, title, snippet, embedding FROM articles WHERE tenant_id = $1 "
              "ORDER BY embedding <=> $2 LIMIT 20")
INSERT_SQL = "INSERT INTO ask_log (tenant_id, question_sha, article_ids, took_ms) VALUES ($1, $2, $3, $4)"
_HTTP = "go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
_SQL = "github.com/XSAM/otelsql"


def bouncer_host(server: int) -> str:
    return f"pgbouncer-{SERVERS[server]}.db.svc.cluster.local"


def pod_name(service: str, k: int) -> str:
    return f"ask-api-6c9d7b8f4-{_SFX[k]}" if service == API else f"embedder-{k}"


def endpoint(service: str, k: int) -> tuple[str, int]:
    return (f"10.40.1.{11 + k}", 8080) if service == API else (f"10.40.2.{21 + k}", 8080)


@dataclass(frozen=True)
class Style:
    """One seed's conventions: `semconv` old | new, `ident` pod | ip-port | endpoint, `statement`
    (db.statement / db.query.text on the SQL spans), `torchserve` queue-attr | plain | none,
    `gc_events` (GC cycles as events on the server span)."""

    semconv: str
    ident: str
    statement: bool
    torchserve: str
    gc_events: bool

    @property
    def root(self) -> str:  # otelhttp: the operation name given to NewHandler, or method + route
        return "POST /v1/ask" if self.semconv == "new" else "ask"

    @property
    def embed_client(self) -> str:
        return "POST" if self.semconv == "new" else "HTTP POST"

    def label(self, service: str, k: int) -> str:
        if self.ident == "pod":
            return pod_name(service, k)
        ip, port = endpoint(service, k)
        return f"{ip}:{port}"


@dataclass
class Resources:
    table: TraceTable
    style: Style
    made: dict[tuple[str, int], int] = field(default_factory=dict)

    def get(self, service: str, k: int) -> int:
        if (service, k) not in self.made:
            attrs: dict[str, Any] = {"service.name": service,
                                     "telemetry.sdk.language": "go" if service == API else "java"}
            if self.style.ident != "endpoint":
                attrs.update({"service.instance.id": self.style.label(service, k),
                              "k8s.namespace.name": "helpcenter" if service == API else "ml",
                              "k8s.pod.name": pod_name(service, k)})
            if service == API:
                attrs.update({"process.runtime.name": "go", "process.runtime.version": "go1.22.7"})
            self.made[(service, k)] = self.table.resource(attrs, *endpoint(service, k))
        return self.made[(service, k)]


@dataclass
class Embed:
    """One call to the embedder: the frontend's receipt and response, and the batch that ran it."""

    pod: int
    arrive: float
    done: float
    batch: Batch


@dataclass
class Ask:
    """One ask-api request, as its model computed it."""

    pod: int
    tenant: str
    server: int
    root: tuple[float, float]
    call: tuple[float, float]
    embed: Embed
    begin: tuple[float, float]
    set_local: tuple[float, float]
    query: tuple[float, float]
    rows: tuple[float, float]
    commit: tuple[float, float]
    rerank: tuple[float, float]
    insert: tuple[float, float]
    cycles: list[Cycle]


def _peer(style: Style, host: str, port: int) -> dict[str, Any]:
    if style.semconv == "new":
        return {"server.address": host, "server.port": port}
    return {"net.peer.name": host, "net.peer.port": port}


def _db(style: Style, server: int, statement: str | None) -> dict[str, Any]:
    new = style.semconv == "new"
    attrs: dict[str, Any] = {"db.system": "postgresql", ("db.namespace" if new else "db.name"): "helpcenter",
                             **_peer(style, bouncer_host(server), 6432)}
    if statement is not None and style.statement:
        attrs["db.query.text" if new else "db.statement"] = statement
    return attrs


def write_embed(table: TraceTable, res: Resources, trace: int, parent: int | None, e: Embed,
                tokens: int) -> None:
    """TorchServe's spans for one prediction (a root when its caller is not traced)."""
    style = res.style
    if style.torchserve == "none":
        return
    me = res.get(EMB, e.pod)
    attrs: dict[str, Any] = {"http.method": "POST", "http.target": "/predictions/minilm-l6",
                             "http.status_code": 200, "model.name": "minilm-l6", "input.tokens": tokens}
    if style.torchserve == "queue-attr":
        attrs["ts.queue_time_ms"] = round((e.batch.start - e.arrive) / NS_PER_MS, 3)
    server = table.span(trace, parent, TS_SERVER, "Server", me, "torchserve", e.arrive, e.done, attrs)
    table.span(trace, server, TS_INFER, "Internal", me, "torchserve", e.batch.start, e.batch.end,
               {"ts.batch.size": e.batch.size, "ts.max_batch_delay_ms": 5})


def write_ask(table: TraceTable, res: Resources, a: Ask, question: int) -> None:
    style = res.style
    trace = table.new_trace()
    me = res.get(API, a.pod)
    new = style.semconv == "new"
    http = ({"http.request.method": "POST", "url.path": "/v1/ask", "http.response.status_code": 200}
            if new else {"http.method": "POST", "http.target": "/v1/ask", "http.status_code": 200})
    events = []
    if style.gc_events:
        for c in a.cycles:
            assist = (c.mark_end - c.start) / NS_PER_MS * (0.45 if c.slow > 2.0 else 0.03)
            events.append((c.end, "go.gc", {"go.gc.cycle": c.number,
                                             "go.gc.stw_ms": round(c.stw_ns / NS_PER_MS, 3),
                                             "go.gc.assist_ms": round(assist, 1),
                                             "go.memory.heap_goal_mb": c.heap_goal_mb}))
    root = table.span(trace, None, style.root, "Server", me, _HTTP, *a.root,
                      {**http, "http.route": "/v1/ask", "tenant.id": a.tenant}, events=events)
    url = {"url.full": f"http://{EMB_HOST}:8080/predictions/minilm-l6"} if new else {
        "http.url": f"http://{EMB_HOST}:8080/predictions/minilm-l6"}
    status = {"http.response.status_code": 200} if new else {"http.status_code": 200}
    call = table.span(trace, root, style.embed_client, "Client", me, _HTTP, *a.call,
                      {("http.request.method" if new else "http.method"): "POST", **url, **status,
                       **_peer(style, EMB_HOST, 8080)}, peer=EMB)
    write_embed(table, res, trace, call, a.embed, 12 + question % 20)
    sql = ((BEGIN, a.begin, None), (EXEC, a.set_local, SET_SQL), (QUERY, a.query, SELECT_SQL),
           (ROWS, a.rows, None), (COMMIT, a.commit, None))
    for name, times, statement in sql:
        table.span(trace, root, name, "Client", me, _SQL, *times, _db(style, a.server, statement),
                   peer="postgresql")
    table.span(trace, root, RERANK, "Internal", me, "ask-api", *a.rerank, {"rerank.candidates": 20})
    table.span(trace, root, EXEC, "Client", me, _SQL, *a.insert, _db(style, PRIMARY, INSERT_SQL),
               peer="postgresql")
