"""The spans of one request of the blind family `vertx-hazelcast` (vertx_hazelcast.py), written from
its timeline in the seed's conventions (vertx_hazelcast_spans.py): the Vert.x SERVER span, its JDBC,
Hazelcast, `@WithSpan` and gRPC children, Envoy's spans around them, and the model server's.
"""

from __future__ import annotations

from typing import Any

from reference_pipeline.simulate.trace_table import TraceTable
from reference_pipeline.simulate.vertx_hazelcast_spans import (
    AGENT,
    ASSEMBLE,
    BLEND,
    COMPUTE,
    CONSENT_SPAN,
    CONSENT_SQL,
    EGRESS,
    ENVOY,
    EVENTS_SPAN,
    EVENTS_SQL,
    GATEWAY,
    HISTORY,
    HISTORY_ROUTE,
    HZ_NAMES,
    INFER,
    INGRESS,
    MODEL,
    MODEL_HOST,
    ROOT,
    ROUTE,
    Attempt,
    Request,
    Resources,
    Style,
    jit_events,
    pod_ip,
    stall_events,
)


def _peer(style: Style, host: str, port: int) -> dict[str, Any]:
    if style.semconv == "new":
        return {"server.address": host, "server.port": port}
    return {"net.peer.name": host, "net.peer.port": port}


def _thread(style: Style, name: str, tid: int) -> dict[str, Any]:
    return {"thread.name": name, "thread.id": tid} if style.threads else {}


def loop_thread(style: Style, loop: int) -> dict[str, Any]:
    return _thread(style, f"vert.x-eventloop-thread-{loop}", 31 + loop)


def _jdbc(style: Style, table: str, sql: str) -> dict[str, Any]:
    if style.semconv == "new":
        return {
            "db.system": "postgresql",
            "db.namespace": "reco",
            "db.query.text": sql,
            "db.operation.name": "SELECT",
            "db.collection.name": table,
            **_peer(style, "pg-reco.db.svc", 5432),
        }
    return {
        "db.system": "postgresql",
        "db.name": "reco",
        "db.statement": sql,
        "db.operation": "SELECT",
        "db.sql.table": table,
        "db.user": "reco_ro",
        **_peer(style, "pg-reco.db.svc", 5432),
    }


def _http(style: Style, path: str, status: int) -> dict[str, Any]:
    if style.semconv == "new":
        return {
            "http.request.method": "GET",
            "url.path": path,
            "url.scheme": "http",
            "http.response.status_code": status,
            "network.protocol.version": "1.1",
        }
    return {
        "http.method": "GET",
        "http.target": path,
        "http.scheme": "http",
        "http.status_code": status,
        "http.flavor": "1.1",
    }


def _ingress(table: TraceTable, res: Resources, trace: int, gen: int, pod: int, times: tuple[float, float],
             path: str) -> int | None:
    """The Envoy sidecar's inbound span of a request, on the seeds that export Envoy (else None)."""
    if not res.style.envoy:
        return None
    return table.span(
        trace,
        None,
        INGRESS,
        "Server",
        res.get(ENVOY, gen, pod),
        "envoy",
        *times,
        {
            "component": "proxy",
            "upstream_cluster": "inbound|8080||",
            "response_flags": "-",
            **_http(res.style, path, 200),
        },
    )


def write_history(
    table: TraceTable,
    res: Resources,
    gen: int,
    pod: int,
    loop: int,
    envoy: tuple[float, float],
    root: tuple[float, float],
    query: tuple[float, float],
    worker: int,
    user: int,
    days: int,
) -> None:
    """The other route: a user's history, one query through executeBlocking."""
    style = res.style
    trace = table.new_trace()
    path = f"/v1/users/{user}/history?days={days}"
    parent = _ingress(table, res, trace, gen, pod, envoy, path)
    me = res.get(GATEWAY, gen, pod)
    top = table.span(
        trace,
        parent,
        HISTORY,
        "Server",
        me,
        f"{AGENT}.vertx-http-server-4.0",
        *root,
        {**_http(style, path, 200), "http.route": HISTORY_ROUTE, **loop_thread(style, loop)},
    )
    table.span(
        trace,
        top,
        EVENTS_SPAN,
        "Client",
        me,
        f"{AGENT}.jdbc",
        *query,
        {
            **_jdbc(style, "user_events", EVENTS_SQL),
            **_thread(style, f"vert.x-worker-thread-{worker}", 60 + worker),
        },
        peer="postgresql",
    )


def write_request(table: TraceTable, res: Resources, r: Request) -> None:
    style = res.style
    trace = table.new_trace()
    path = f"/v1/recommendations/{r.user}"
    parent = _ingress(table, res, trace, r.generation, r.pod, r.envoy, path)
    me = res.get(GATEWAY, r.generation, r.pod)
    events = stall_events(style, r.stalls)
    root = table.span(
        trace,
        parent,
        ROOT,
        "Server",
        me,
        f"{AGENT}.vertx-http-server-4.0",
        *r.root,
        {**_http(style, path, 200), "http.route": ROUTE, **loop_thread(style, r.loop)},
        events=events,
    )
    if r.consent is not None:  # the synchronous JDBC call, on the event loop itself
        table.span(
            trace,
            root,
            CONSENT_SPAN,
            "Client",
            me,
            f"{AGENT}.jdbc",
            *r.consent,
            {**_jdbc(style, "consent_flags", CONSENT_SQL), **loop_thread(style, r.loop)},
            peer="postgresql",
        )
    table.span(
        trace,
        root,
        EVENTS_SPAN,
        "Client",
        me,
        f"{AGENT}.jdbc",
        *r.events,
        {
            **_jdbc(style, "user_events", EVENTS_SQL),
            **_thread(style, f"vert.x-worker-thread-{r.worker}", 60 + r.worker),
        },
        peer="postgresql",
    )
    if style.hz is not None:
        kind = "Internal" if style.hz == "withspan" else "Client"
        scope = (
            f"{AGENT}.opentelemetry-instrumentation-annotations-1.16"
            if style.hz == "withspan"
            else "reco.features"
        )
        peer = None if kind == "Internal" else "hazelcast"
        table.span(
            trace,
            root,
            HZ_NAMES[style.hz][0],
            kind,
            me,
            scope,
            *r.user_get,
            {
                "hazelcast.map": "user-features",
                "hazelcast.near_cache": False,
                **({"hazelcast.invocation.retries": r.user_retries} if r.user_retries else {}),
            },
            peer=peer,
        )
        table.span(
            trace,
            root,
            HZ_NAMES[style.hz][1],
            kind,
            me,
            scope,
            *r.items,
            {
                "hazelcast.map": "item-features",
                "hazelcast.keys": r.item_keys,
                "hazelcast.near_cache.hits": r.item_keys - r.misses,
                "hazelcast.near_cache.misses": r.misses,
                **({"hazelcast.invocation.retries": r.retries} if r.retries else {}),
            },
            peer=peer,
        )
    table.span(
        trace,
        root,
        ASSEMBLE,
        "Internal",
        me,
        f"{AGENT}.opentelemetry-instrumentation-annotations-1.16",
        *r.assemble,
        {"reco.candidates": r.candidates, **loop_thread(style, r.loop)},
        events=jit_events(style, r),
    )
    for n, a in enumerate(r.attempts):
        _write_attempt(table, res, trace, root, me, r, n, a)
    table.span(
        trace,
        root,
        BLEND,
        "Internal",
        me,
        f"{AGENT}.opentelemetry-instrumentation-annotations-1.16",
        *r.blend,
        {"reco.scored": r.attempts[-1].outcome == "ok", **loop_thread(style, r.loop)},
    )


def _write_attempt(
    table: TraceTable, res: Resources, trace: int, root: int, me: int, r: Request, n: int, a: Attempt
) -> None:
    style = res.style
    code = {"ok": 0, "overflow": 14, "internal": 13}[a.outcome]
    message = {
        "ok": "",
        "overflow": "UNAVAILABLE: upstream connect error or disconnect/reset before headers. "
        "reset reason: overflow",
        "internal": "INTERNAL: CUDA error: an illegal memory access was encountered",
    }
    attrs = {
        "rpc.system": "grpc",
        "rpc.service": "inference.GRPCInferenceService",
        "rpc.method": "ModelInfer",
        "rpc.grpc.status_code": code,
        **_peer(style, MODEL_HOST, 8001),
        **loop_thread(style, r.loop),
    }
    if n:
        attrs["reco.retry.attempt"] = n
    client = table.span(
        trace,
        root,
        INFER,
        "Client",
        me,
        f"{AGENT}.grpc-1.6",
        a.start,
        a.end,
        attrs,
        "Error" if code else "Unset",
        message[a.outcome],
        peer=MODEL if not style.envoy else ENVOY,
    )
    parent = client
    if style.envoy and a.envoy is not None:
        flags = "UO" if a.outcome == "overflow" else "-"
        status = 503 if a.outcome == "overflow" else 500 if a.outcome == "internal" else 200
        envoy = {
            "component": "proxy",
            "upstream_cluster": f"outbound|8001||{MODEL_HOST}",
            "response_flags": flags,
            "http.status_code": status,
            "grpc.status_code": code,
            "node_id": f"sidecar~{pod_ip(r.generation, r.pod)}",
        }
        if a.host >= 0:
            envoy["peer.address"] = f"10.44.0.{30 + a.host}:8001"
        parent = table.span(
            trace,
            client,
            EGRESS,
            "Client",
            res.get(ENVOY, r.generation, r.pod),
            "envoy",
            *a.envoy,
            envoy,
            "Error" if code else "Unset",
            peer=MODEL,
        )
    if a.served is None or a.server is None:
        return
    model = res.get(MODEL, 0, a.host)
    s = a.served
    events = (
        [(s.arrive, "QUEUE_START", {}), (s.queue_end, "COMPUTE_START", {}), (s.end, "COMPUTE_END", {})]
        if (style.internals and not s.failed)
        else []
    )
    server = table.span(
        trace,
        parent,
        INFER,
        "Server",
        model,
        "triton",
        *a.server,
        {
            "rpc.system": "grpc",
            "rpc.service": "inference.GRPCInferenceService",
            "rpc.method": "ModelInfer",
            "rpc.grpc.status_code": code,
            "model_name": "reco-ranker",
            "model_version": str(r.version),
        },
        "Error" if code else "Unset",
        message[a.outcome] if code else "",
        events=events,
    )
    if style.internals and not s.failed:
        table.span(
            trace,
            server,
            COMPUTE,
            "Internal",
            model,
            "triton",
            s.queue_end,
            s.end,
            {"triton.batch_size": s.batch, "triton.model_instance": f"reco-ranker_0_{s.instance}"},
        )
