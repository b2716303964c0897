"""One request of `vision-moderation` (vision_moderation_flow.py) as spans: the gateway's, and
Triton's where the seed traces it (vision_moderation_spans has the names and attributes)."""

from __future__ import annotations

from typing import Any

from reference_pipeline.simulate.trace_table import TraceTable
from reference_pipeline.simulate.vision_moderation_runtime import GoRuntime
from reference_pipeline.simulate.vision_moderation_spans import (
    EMBEDDER,
    ENSEMBLE,
    HEAD,
    TRITON,
    db_attrs,
    gc_event,
    grpc_client,
    http_server,
    names,
    publish_attrs,
    redis_attrs,
    s3_attrs,
)

HTTP_SCOPE = "go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
GRPC_SCOPE = "go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
APP_SCOPE = "github.com/acme/moderation-gateway"


def write_request(table: TraceTable, s: dict[str, Any], r: dict[str, Any], gw: int, tr: int | None,
                  go: GoRuntime, tr_pods: list[tuple[str, str, str, int]]) -> None:
    n = names(s)
    trace = table.new_trace()
    attrs = http_server(s, 200)
    attrs["user_agent.original" if s["semconv"] == "new" else "http.user_agent"] = r["client"]
    events = []
    if s["gc_events"]:
        for cycle in go.cycles_in(r["root_s"] - 2e9, r["root_e"]):
            ev = gc_event(cycle)
            if r["root_s"] <= ev[0] <= r["root_e"]:
                events.append(ev)
    scope = GRPC_SCOPE if s["api"] == "grpc" else HTTP_SCOPE
    root = table.span(trace, None, n["root"], "Server", gw, scope, r["root_s"], r["root_e"], attrs,
                      events=events)
    limit = table.span(trace, root, n["limit"], "Internal", gw, APP_SCOPE, r["limit_s"], r["limit_e"],
                       {"ratelimit.tier": "standard"})
    table.span(trace, limit, n["redis"], "Client", gw, "github.com/redis/go-redis/extra/redisotel",
               r["redis_s"], r["redis_e"], redis_attrs(s), peer="ratelimit-redis")
    bucket = f"moderation-uploads-{r['region']}"
    fetch = table.span(trace, root, n["fetch"], "Internal", gw, APP_SCOPE, r["fetch_s"], r["fetch_e"],
                       {"blob.bucket": bucket, "blob.size_bytes": r["bytes"]})
    table.span(trace, fetch, n["s3"], "Client", gw,
               "go.opentelemetry.io/contrib/instrumentation/github.com/aws/aws-sdk-go-v2/otelaws",
               r["s3_s"], r["s3_e"], s3_attrs(s, r["region"], bucket, r["bytes"]), peer="s3")
    size = {"image.width": r["w"], "image.height": r["h"]}
    table.span(trace, root, n["decode"], "Internal", gw, APP_SCOPE, r["decode_s"], r["decode_e"],
               {"image.format": "jpeg", **size, "image.size_bytes": r["bytes"]})
    table.span(trace, root, n["resize"], "Internal", gw, APP_SCOPE, r["resize_s"], r["resize_e"],
               {**size, "image.target_width": 384, "image.target_height": 384})
    call = table.span(trace, root, n["infer"], "Client", gw, GRPC_SCOPE, r["infer_s"], r["infer_e"],
                      grpc_client(s, tr_pods[r["triton"]][2], 0), peer=TRITON)
    if tr is not None:
        _triton_spans(table, s, trace, call, tr, r)
    save = table.span(trace, root, n["save"], "Internal", gw, APP_SCOPE, r["save_s"], r["save_e"])
    pgx = "github.com/exaring/otelpgx"
    for key, op in (("begin", "BEGIN"), ("insert", "INSERT"), ("commit", "COMMIT")):
        table.span(trace, save, n[key], "Client", gw, pgx, r[f"{key}_s"], r[f"{key}_e"], db_attrs(s, op),
                   peer="pgbouncer")
    table.span(trace, root, n["publish"], "Producer", gw, "github.com/twmb/franz-go/plugin/kotel",
               r["publish_s"], r["publish_e"], publish_attrs(s), peer="kafka")


def _triton_spans(table: TraceTable, s: dict[str, Any], trace: int, call: int, tr: int,
                  r: dict[str, Any]) -> None:
    """Triton's OpenTelemetry trace of the ensemble: a span per composing model, with the batcher's
    queue and the compute phases as child spans (seed 0) or one compute span with events (seed 2)."""
    scope = "triton-server"
    server = table.span(trace, call, ENSEMBLE, "Server", tr, scope, r["server_s"], r["server_e"],
                        {"triton.model_name": ENSEMBLE, "triton.model_version": 3,
                         "triton.request_id": f"{trace:08x}"})
    for model, batch, at in ((EMBEDDER, r["embed"], r["embed_at"]), (HEAD, r["head"], r["head_at"])):
        step = table.span(trace, server, model, "Internal", tr, scope, at, batch.end,
                          {"triton.model_name": model, "triton.model_version": 1,
                           "triton.batch_size": batch.size})
        if s["triton_spans"] == "full":
            table.span(trace, step, "queue", "Internal", tr, scope, at, batch.dispatch)
            table.span(trace, step, "compute_input", "Internal", tr, scope, batch.dispatch, batch.input_end)
            table.span(trace, step, "compute_infer", "Internal", tr, scope, batch.input_end, batch.infer_end)
            table.span(trace, step, "compute_output", "Internal", tr, scope, batch.infer_end, batch.end)
        else:
            table.span(trace, step, "compute", "Internal", tr, scope, batch.dispatch, batch.end,
                       {"triton.batch_size": batch.size},
                       events=[(batch.input_end, "COMPUTE_INPUT_END", {}),
                               (batch.infer_end, "COMPUTE_OUTPUT_START", {})])
