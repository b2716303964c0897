"""The spans of one `python-istio` request (python_istio.py), written from its timeline in the seed's
conventions (python_istio_spans.py): the caller's fetch or Envoy's inbound span, the FastAPI SERVER
span and its children, each embedder attempt (Envoy's outbound and inbound spans where exported, the
replica's SERVER span and its batch), and the Kafka PRODUCER span that starts after the response.
"""

from __future__ import annotations

from typing import Any

from reference_pipeline.simulate.python_istio_spans import (
    _OTEL,
    API,
    API_HOST,
    EMB,
    EMB_HOST,
    EMBED_ROOT,
    FORWARD,
    FRONT,
    GET,
    KNN,
    MESH,
    META,
    OS_HOST,
    PG_HOST,
    POST,
    REDIS_HOST,
    RERANK,
    ROOT,
    SELECT,
    SEND,
    SET,
    TOKENIZE,
    WAIT,
    Embed,
    Resources,
    Timeline,
    _db,
    _envoy,
    _peer,
    ip,
)
from reference_pipeline.simulate.trace_table import NS_PER_MS, TraceTable


def _write_embed(table: TraceTable, res: Resources, trace: int, root: int, tl: Timeline, e: Embed) -> None:
    style, me = res.style, res.get(API, tl.pod, tl.worker)
    new = style.semconv == "new"
    http = (
        {
            "http.request.method": "POST",
            "url.full": f"http://{EMB_HOST}:8000/v1/embed",
            **_peer(style, EMB_HOST, 8000),
            "http.response.status_code": e.status,
        }
        if new
        else {
            "http.method": "POST",
            "http.url": f"http://{EMB_HOST}:8000/v1/embed",
            **_peer(style, EMB_HOST, 8000),
            "http.status_code": e.status,
        }
    )
    bad = e.status >= 500
    client = table.span(
        trace,
        root,
        POST,
        "Client",
        me,
        f"{_OTEL}.httpx",
        e.start,
        e.end,
        http,
        "Error" if bad else "Unset",
        f"{e.status}" if bad else "",
        peer=EMB,
    )
    parent = client
    if style.envoy:
        out = e.attempts[-1]
        flags = out.flags if out.flags != "-" else ("URX" if len(e.attempts) > 1 and bad else "-")
        parent = table.span(
            trace,
            client,
            f"{EMB_HOST}:8000/v1/embed",
            "Client",
            res.get(MESH[API], tl.pod),
            "envoy",
            e.start + 0.06 * NS_PER_MS,
            e.end - 0.04 * NS_PER_MS,
            _envoy(
                EMB_HOST, "/v1/embed", f"outbound|8000||{EMB_HOST}", e.status, flags, ip(EMB, out.replica)
            ),
            "Error" if bad else "Unset",
            peer=MESH[EMB],
        )
    for a in e.attempts:
        above = parent
        if style.envoy:
            above = table.span(
                trace,
                parent,
                f"{EMB_HOST}:8000/v1/embed",
                "Server",
                res.get(MESH[EMB], a.replica),
                "envoy",
                a.start,
                a.end,
                _envoy(
                    EMB_HOST,
                    "/v1/embed",
                    "inbound|8000||",
                    a.status,
                    "DR" if a.flags == "UT" else a.flags,
                    ip(API, tl.pod),
                ),
                "Error" if a.status >= 500 else "Unset",
            )
        s = a.served
        if s.rejected:
            continue
        srv_http = (
            {"http.request.method": "POST", "http.route": "/v1/embed", "http.response.status_code": 200}
            if new
            else {"http.method": "POST", "http.route": "/v1/embed", "http.status_code": 200}
        )
        me2 = res.get(EMB, a.replica)
        srv = table.span(
            trace,
            above,
            EMBED_ROOT,
            "Server",
            me2,
            f"{_OTEL}.fastapi",
            s.start,
            s.end,
            {**srv_http, "embed.tokens": e.tokens},
        )
        if style.internals:
            table.span(
                trace,
                srv,
                WAIT,
                "Internal",
                me2,
                "embedder",
                s.start + 0.05 * NS_PER_MS,
                s.batch_start,
                {"batch.size": s.batch, "batch.max_size": 16},
            )
            table.span(
                trace,
                srv,
                FORWARD,
                "Internal",
                me2,
                "embedder",
                s.batch_start,
                s.end - 0.2 * NS_PER_MS,
                {"batch.size": s.batch, "model.name": "bge-base-en-v1.5", "model.device": "cuda:0"},
            )


def write_request(table: TraceTable, res: Resources, tl: Timeline, query_id: int) -> None:
    style = res.style
    trace = table.new_trace()
    me = res.get(API, tl.pod, tl.worker)
    new = style.semconv == "new"
    if not style.envoy:  # no sidecar spans: the caller's fetch is the trace's root
        a, b = tl.inbound
        top = table.span(
            trace,
            None,
            POST,
            "Client",
            res.get(FRONT, 0),
            "@opentelemetry/instrumentation-undici",
            a - 0.5 * NS_PER_MS,
            b + 0.5 * NS_PER_MS,
            {
                "http.request.method": "POST",
                "url.full": f"http://{API_HOST}:8000/v1/search",
                "server.address": API_HOST,
                "server.port": 8000,
                "http.response.status_code": tl.status,
            },
            peer=API,
        )
    else:
        top = table.span(
            trace,
            None,
            f"{API_HOST}:8000/v1/search",
            "Server",
            res.get(MESH[API], tl.pod),
            "envoy",
            *tl.inbound,
            _envoy(API_HOST, "/v1/search", "inbound|8000||", tl.status, "-", "10.44.0.7"),
            "Error" if tl.status >= 500 else "Unset",
        )
    http = (
        {
            "http.request.method": "POST",
            "http.route": "/v1/search",
            "url.path": "/v1/search",
            "http.response.status_code": tl.status,
        }
        if new
        else {
            "http.method": "POST",
            "http.route": "/v1/search",
            "http.target": "/v1/search",
            "http.status_code": tl.status,
        }
    )
    attrs: dict[str, Any] = {**http, "search.cache.hit": tl.cache_hit}
    events = []
    paused = [(a, b, g, n) for a, b, g, n in tl.gc if a < tl.root[1] and b > tl.root[0]]
    if style.gc == "events":
        events = [
            (a, "gc", {"gc.generation": g, "gc.pause_ms": round((b - a) / NS_PER_MS, 2), "gc.collected": n})
            for a, b, g, n in paused
        ]
    elif style.gc == "attribute" and paused:
        attrs["process.runtime.cpython.gc.pause_ms"] = round(
            sum(b - a for a, b, _, _ in paused) / NS_PER_MS, 2
        )
    root = table.span(
        trace,
        top,
        ROOT,
        "Server",
        me,
        f"{_OTEL}.fastapi",
        *tl.root,
        attrs,
        "Error" if tl.status >= 500 else "Unset",
        events=events,
    )
    s, e, tokens, backend = tl.tokenize
    if style.internals:
        table.span(
            trace,
            root,
            TOKENIZE,
            "Internal",
            me,
            "search_api",
            s,
            e,
            {"tokens.count": tokens, "tokenizer.backend": backend},
        )
    if tl.sync is not None:
        table.span(
            trace,
            root,
            SELECT,
            "Client",
            me,
            f"{_OTEL}.psycopg2",
            *tl.sync,
            _db(
                style,
                "postgresql",
                PG_HOST,
                5432,
                "synonyms",
                "SELECT expansion FROM synonyms WHERE term = ANY(%s)",
            ),
            peer="postgresql",
        )
    cache = {"db.system": "redis", "db.redis.database_index": 0, **_peer(style, REDIS_HOST, 6379)}
    key = f"q:{query_id:08x}"
    table.span(
        trace,
        root,
        GET,
        "Client",
        me,
        f"{_OTEL}.redis",
        *tl.get,
        {**cache, ("db.query.text" if new else "db.statement"): f"GET {key}"},
        peer="redis",
    )
    if tl.embed is not None:
        _write_embed(table, res, trace, root, tl, tl.embed)
    if tl.knn is not None:
        ks, ke, took, mode = tl.knn
        table.span(
            trace,
            root,
            KNN,
            "Client",
            me,
            "search_api",
            ks,
            ke,
            {
                **_db(style, "opensearch", OS_HOST, 9200, "products-emb", f"{mode} k=50"),
                "opensearch.took_ms": int(took / NS_PER_MS),
                "opensearch.shards.total": 3,
            },
            peer="opensearch",
        )
    if tl.cache_set is not None:
        table.span(
            trace,
            root,
            SET,
            "Client",
            me,
            f"{_OTEL}.redis",
            *tl.cache_set,
            {**cache, ("db.query.text" if new else "db.statement"): f"SET {key} ? EX 600"},
            peer="redis",
        )
    fs, fe, qs, qe, filtered = tl.meta
    text = "SELECT id, title, url, lang FROM documents WHERE id = ANY($1)" + (
        " AND tags @> $2" if filtered else ""
    )
    parent = root
    if style.internals:
        parent = table.span(
            trace, root, META, "Internal", me, "search_api", fs, fe, {"search.filtered": filtered}
        )
    table.span(
        trace,
        parent,
        SELECT,
        "Client",
        me,
        f"{_OTEL}.asyncpg",
        qs,
        qe,
        {**_db(style, "postgresql", PG_HOST, 5432, "docs", text), "db.user": "search"},
        peer="postgresql",
    )
    if style.internals:
        table.span(
            trace,
            root,
            RERANK,
            "Internal",
            me,
            "search_api",
            tl.rerank[0],
            tl.rerank[1],
            {"rerank.candidates": tl.rerank[2]},
        )
    dest = "messaging.destination.name" if new else "messaging.destination"
    table.span(
        trace,
        root,
        SEND,
        "Producer",
        me,
        f"{_OTEL}.kafka",
        *tl.send,
        {"messaging.system": "kafka", dest: "search-events", "messaging.kafka.partition": query_id % 12},
        peer="kafka",
    )
