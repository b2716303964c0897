"""The spans of blind family `ads-auction` (ads_auction.py): resources, names and attributes in each
seed's conventions, and one request's span tree from the times its model produced."""

from __future__ import annotations

import random
from typing import Any

from reference_pipeline.simulate.ads_auction_runtime import GcCycle
from reference_pipeline.simulate.trace_table import NS_PER_MS, TraceTable

AUCTION, SIDECAR, INDEX = "ad-auction", "ad-auction.ads", "ad-index"
SHARD_RPC = "adindex.v1.CandidateIndex/Retrieve"
ZONES = ("us-east-1a", "us-east-1b", "us-east-1c")
_SUFFIXES = ("x2kqp", "h8mzt", "b4wnr", "q9vls", "c7dfj", "t5gyh")
MODEL_SERVERS: dict[str, dict[str, Any]] = {
    "torchserve": {"service": "ctr-torchserve", "server_span": "POST /predictions/ctr_dcn",
                   "queue_span": "POST /predictions/ctr_dcn", "workers": 2, "max_batch": 16, "delay_ms": 5.0,
                   "fixed_ms": 1.5, "row_ms": 0.045, "port": 8080, "language": "java"},
    "tfserving": {"service": "ctr-tfserving", "server_span": "tensorflow.serving.PredictionService/Predict",
                  "queue_span": "batching_queue", "workers": 1, "max_batch": 32, "delay_ms": 2.0,
                  "fixed_ms": 3.0, "row_ms": 0.012, "port": 8500, "language": "cpp"},
}
_OTELHTTP = "go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
_OTELGRPC = "go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
_REDISOTEL = "github.com/redis/go-redis/extra/redisotel"


class Names:
    """Span names, attribute keys and instance labels for one seed's conventions."""

    def __init__(self, s: dict[str, Any]) -> None:
        self.s = s
        self.new = s["semconv"] == "new"
        self.zipkin = s["fmt"] == "zipkin"
        self.root = "POST /v1/auction" if self.new else "/v1/auction"
        self.method = "http.request.method" if self.new else "http.method"
        self.status = "http.response.status_code" if self.new else "http.status_code"
        self.peer = "server.address" if self.new else "net.peer.name"
        self.port = "server.port" if self.new else "net.peer.port"
        self.query = "db.query.text" if self.new else "db.statement"
        self.operation = "db.operation.name" if self.new else "db.operation"
        self.req_size = "http.request.body.size" if self.new else "http.request_content_length"
        self.resp_size = "http.response.body.size" if self.new else "http.response_content_length"

    def auction_pod(self, k: int) -> str:
        return f"ad-auction-7d4b9c{self.s['pods']}-{_SUFFIXES[k]}"

    def auction_label(self, k: int) -> str:
        return f"10.50.{k % 3}.{20 + k}:8080" if self.zipkin else self.auction_pod(k)

    def shard_label(self, shard: int, replica: int) -> str:
        return f"10.60.{shard}.{10 + replica}:9090" if self.zipkin else f"ad-index-shard-{shard}-{replica}"

    def model_pod(self, k: int) -> str:
        return f"{MODEL_SERVERS[self.s['server']]['service']}-5f6d8-{k}"

    def model_label(self, k: int) -> str:
        port = MODEL_SERVERS[self.s["server"]]["port"]
        return f"10.70.0.{10 + k}:{port}" if self.zipkin else self.model_pod(k)


def resources(table: TraceTable, rng: random.Random, s: dict[str, Any], names: Names) -> dict[str, list[int]]:
    """Every process's resource, in the seed's conventions (see ads_auction.py's docstring)."""
    def otel(service: str, pod: str, zone: str, language: str) -> dict[str, Any]:
        attrs = {"service.name": service, "k8s.namespace.name": "ads", "cloud.availability_zone": zone,
                 "telemetry.sdk.name": "opentelemetry", "telemetry.sdk.language": language}
        attrs[s["pod_key"]] = pod
        if s["instance_id"]:
            attrs["service.instance.id"] = f"{rng.getrandbits(128):032x}"
        return attrs

    out: dict[str, list[int]] = {"auction": [], "sidecar": [], "shard": [], "model": []}
    for k in range(s["pods"]):
        pod, ip = names.auction_pod(k), f"10.50.{k % 3}.{20 + k}"
        attrs = ({"service.name": AUCTION, "hostname": pod, "ip": ip, "jaeger.version": "Go-2.30.0"}
                 if s["fmt"] == "jaeger" else {**otel(AUCTION, pod, ZONES[k % 3], "go"),
                                               "process.runtime.name": "go", "service.version": "4.18.2"})
        out["auction"].append(table.resource(attrs, ip, 8080))
        if s["sidecar"]:
            out["sidecar"].append(table.resource({"service.name": SIDECAR, "k8s.pod.name": pod,
                                                  "istio.mesh_id": "cluster.local"}, ip, 15006))
    for shard in range(s["shards"]):
        for r in range(2):
            out["shard"].append(table.resource(
                otel(INDEX, f"ad-index-shard-{shard}-{r}", ZONES[(shard + r) % 3], "cpp"),
                f"10.60.{shard}.{10 + r}", 9090))
    model = MODEL_SERVERS[s["server"]]
    for k in range(s["model_pods"]):
        out["model"].append(table.resource(otel(model["service"], names.model_pod(k), ZONES[k % 3],
                                                model["language"]), f"10.70.0.{10 + k}", model["port"]))
    return out


def _gc_events(cycles: list[GcCycle], a: float, b: float) -> list[tuple[float, str, dict[str, Any]]]:
    """The GC cycles that finished while the request ran, as the service's middleware reports them."""
    return [(c.mark_end + c.stw_end, "go.runtime.gc", {
        "go.gc.cycle": c.number, "go.gc.pause_ms": round((c.stw_start + c.stw_end) / NS_PER_MS, 3),
        "go.gc.mark_ms": round((c.mark_end - c.mark_start) / NS_PER_MS, 3),
        "go.gc.heap_goal_mb": round(c.heap_goal_mb, 1)})
        for c in cycles if a <= c.mark_end + c.stw_end <= b]


def emit(table: TraceTable, s: dict[str, Any], names: Names, res: dict[str, list[int]], r: dict[str, Any],
         cycles: list[GcCycle]) -> None:
    """One request's spans."""
    n = names
    p = r["pod"]
    app_res = res["auction"][p]
    trace = table.new_trace()
    parent = None
    if s["sidecar"]:
        parent = table.span(trace, None, "ad-auction.ads.svc.cluster.local:8080/*", "Server",
                            res["sidecar"][p], "envoy", r["arrive"], r["end"], {
                                "component": "proxy", "node_id": f"sidecar~10.50.{p % 3}.{20 + p}~"
                                f"{n.auction_pod(p)}.ads~ads.svc.cluster.local", "zone": ZONES[p % 3],
                                "http.method": "POST", "http.url": "http://auction.ads/v1/auction",
                                "http.protocol": "HTTP/1.1", "http.status_code": "200",
                                "upstream_cluster": "inbound|8080||", "request_size": str(r["req_bytes"]),
                                "response_size": str(r["resp_bytes"]), "response_flags": "-",
                                "istio.canonical_service": AUCTION, "istio.namespace": "ads"})
    events = _gc_events(cycles, r["app_start"], r["app_end"]) if s["gc_events"] else []
    root = table.span(trace, parent, n.root, "Server", app_res, _OTELHTTP, r["app_start"], r["app_end"], {
        n.method: "POST", "http.route": "/v1/auction", n.status: 200, n.req_size: r["req_bytes"],
        n.resp_size: r["resp_bytes"], "openrtb.imp.count": r["slots"]}, events=events)
    table.span(trace, root, "parse_bid_request", "Internal", app_res, AUCTION, r["parse_s"], r["parse_e"],
               {"openrtb.imp.count": r["slots"], "openrtb.version": "2.6"})
    fan = table.span(trace, root, "retrieve_candidates", "Internal", app_res, AUCTION, r["fan_s"], r["fan_e"],
                     {"adindex.shards": s["shards"],
                      "adindex.shards_failed": sum(a.timed_out and a.attempt == 2 for a in r["attempts"])})
    for a in r["attempts"]:
        rpc = {"rpc.system": "grpc", "rpc.service": "adindex.v1.CandidateIndex", "rpc.method": "Retrieve"}
        code = 4 if a.timed_out else 0
        call = table.span(trace, fan, SHARD_RPC, "Client", app_res, _OTELGRPC, a.start, a.end, {
            **rpc, n.peer: f"ad-index-shard-{a.pod.shard}.ads.svc.cluster.local", n.port: 9090,
            "rpc.grpc.status_code": code, "adindex.shard": a.pod.shard},
            status="Error" if a.timed_out else "Unset",
            message="context deadline exceeded" if a.timed_out else "", peer=INDEX)
        shard_res = res["shard"][2 * a.pod.shard + a.pod.replica]
        server = table.span(trace, call, SHARD_RPC, "Server", shard_res, "opentelemetry-cpp/grpc",
                            a.server_start, a.server_end, {**rpc, "rpc.grpc.status_code": 0,
                                                           "adindex.candidates": a.candidates})
        table.span(trace, server, "scan_postings", "Internal", shard_res, "adindex", a.scan_start, a.scan_end,
                   {"adindex.imp.count": r["slots"]})
    budget = table.span(trace, root, "budget.lookup", "Internal", app_res, AUCTION, r["budget_s"],
                        r["budget_e"], {"budget.advertisers": r["adv"], "budget.cache.misses": r["missing"]})
    redis = {"db.system": "redis", n.peer: "budget-redis.ads.svc.cluster.local", n.port: 6379}
    table.span(trace, budget, "mget", "Client", app_res, _REDISOTEL, *r["mget"], {
        **redis, n.operation: "MGET", n.query: f"mget budget:{{adv}} x{r['adv']}"}, peer="budget-redis")
    if r["missing"]:
        table.span(trace, budget, "aerospike.batch_get", "Client", app_res, AUCTION, *r["aerospike"], {
            "db.system": "aerospike", "db.namespace": "budgets", n.operation: "batch_get",
            n.peer: "aerospike-budgets.ads.svc.cluster.local", n.port: 3000,
            "db.aerospike.keys": r["missing"], "db.aerospike.records": r["records"]}, peer="budget-aerospike")
        table.span(trace, budget, "pipeline", "Client", app_res, _REDISOTEL, *r["pipeline"], {
            **redis, n.operation: "pipeline", n.query: f"set budget:{{adv}} ex 60 x{r['missing']}",
            "db.redis.num_cmd": r["missing"]}, peer="budget-redis")
    score = table.span(trace, root, "ctr.score", "Internal", app_res, AUCTION, r["score_s"], r["score_e"],
                       {"ctr.rows": r["rows"], "ctr.model": "dcn_v2"})
    _model_spans(table, s, n, res, r, trace, score, app_res)
    table.span(trace, root, "run_auction", "Internal", app_res, AUCTION, r["auction_s"], r["auction_e"],
               {"openrtb.imp.count": r["slots"], "auction.type": "second_price"})
    table.span(trace, root, "encode_bid_response", "Internal", app_res, AUCTION, r["encode_s"], r["encode_e"],
               {"openrtb.bid.count": r["bids"], "openrtb.response.bytes": r["resp_bytes"]})
    dest = "messaging.destination.name" if n.new else "messaging.destination"
    table.span(trace, root, "publish auction-log" if n.new else "auction-log send", "Producer", app_res,
               "github.com/twmb/franz-go/plugin/kotel", *r["log"], {
                   "messaging.system": "kafka", dest: "auction-log", "messaging.kafka.destination.partition":
                   p % 12, "messaging.message.body.size": 400 + 60 * r["bids"]}, peer="kafka")


def _model_spans(table: TraceTable, s: dict[str, Any], n: Names, res: dict[str, list[int]], r: dict[str, Any],
                 trace: int, parent: int, app_res: int) -> None:
    model = MODEL_SERVERS[s["server"]]
    model_res = res["model"][r["model_pod"]]
    if s["server"] == "torchserve":
        url = "url.full" if n.new else "http.url"
        call = table.span(trace, parent, "POST" if n.new else "HTTP POST", "Client", app_res, _OTELHTTP,
                          r["call_s"], r["call_e"], {
                              n.method: "POST", url: "http://ctr-torchserve.ads.svc:8080/predictions/ctr_dcn",
                              n.peer: "ctr-torchserve.ads.svc", n.port: 8080, n.status: 200},
                          peer=model["service"])
        server = table.span(trace, call, model["server_span"], "Server", model_res,
                            "io.opentelemetry.netty-4.1", r["model_arrive"], r["model_e"],
                            {"http.request.method": "POST", "http.route": "/predictions/{model_name}",
                             "http.response.status_code": 200})
        table.span(trace, server, "inference", "Internal", model_res, "ts.handler", r["batch_s"],
                   r["batch_e"], {"ts.model_name": "ctr_dcn", "ts.batch_size": r["batch_size"]})
        return
    rpc = {"rpc.system": "grpc", "rpc.service": "tensorflow.serving.PredictionService",
           "rpc.method": "Predict"}
    call = table.span(trace, parent, model["server_span"], "Client", app_res, _OTELGRPC, r["call_s"],
                      r["call_e"], {**rpc, n.peer: "ctr-tfserving.ads.svc", n.port: 8500,
                                    "rpc.grpc.status_code": 0},
                      peer=model["service"])
    server = table.span(trace, call, model["server_span"], "Server", model_res, "tensorflow_serving",
                        r["model_arrive"], r["model_e"], {**rpc, "rpc.grpc.status_code": 0})
    table.span(trace, server, "batching_queue", "Internal", model_res, "tensorflow_serving",
               r["model_arrive"] + 0.02 * NS_PER_MS, r["batch_s"],
               {"tf.batching.max_batch_size": model["max_batch"]})
    table.span(trace, server, "session_run", "Internal", model_res, "tensorflow_serving", r["batch_s"],
               r["batch_e"], {"tf.batch_size": r["batch_size"], "tf.model.signature": "serving_default"})
