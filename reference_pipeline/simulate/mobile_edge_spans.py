"""How the blind family `mobile-edge` (mobile_edge.py) is instrumented, per seed: the phones' spans as
the Swift and Kotlin SDKs' exporters write them (a service per platform, the device and the link as
attributes, the phone's own clock), the edge proxy's span on some seeds, tagging-api's spans as
otelhttp, otelgrpc and the AWS SDK instrumentation write them (old or new semantic conventions; the
image spans and each HTTP attempt under an AWS operation on some seeds), and how instances are named
(the OTel operator's service.instance.id, host.name + process.pid, or a Zipkin endpoint).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

from reference_pipeline.simulate.mobile_edge_api import Attempt
from reference_pipeline.simulate.mobile_edge_net import CARRIERS, Phone
from reference_pipeline.simulate.trace_table import TraceTable

IOS, ANDROID, EDGE, API = "phototag-ios", "phototag-android", "edge-proxy", "tagging-api"
SERVICE_OF = {"ios": IOS, "android": ANDROID}
REGIONS = ("us-east-1", "eu-west-1", "ap-southeast-1")
HOST = "api.phototag.app"
ROOT = {"ios": "TagPhotoAction", "android": "tagPhoto"}
DNS = {"ios": "dns.lookup", "android": "dns"}
CONNECT = {"ios": "tls.handshake", "android": "connect"}
PARSE = {"ios": "decodeTags", "android": "parse_tags"}
EDGE_SPAN = "ingress"
DECODE, RESIZE = "image.decode", "image.resize"
PREDICT = "tensorflow.serving.PredictionService/Predict"
S3_PUT, DDB_PUT = "S3.PutObject", "DynamoDB.PutItem"
APP_VERSION = {"ios": "6.2.0", "android": "6.1.3"}
_OTELAWS = "go.opentelemetry.io/contrib/instrumentation/github.com/aws/aws-sdk-go-v2/otelaws"
_OTELGRPC = "go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
_POD_HASH = ("6f8d9c7b54", "7c5b8f9d66", "5d7f6c8b97")
_SUFFIX = ("k2x9p", "m7q4z", "t8r2w", "b3n6v", "h9c5j", "w4f7s", "q2l8d", "z6g3m")


def api_pod(region: int, k: int) -> str:
    return f"tagging-api-{_POD_HASH[region]}-{_SUFFIX[k]}"


def edge_node(region: int, k: int) -> str:
    return f"edge-{REGIONS[region]}-{k}"


@dataclass(frozen=True)
class Style:
    """One seed's conventions: `semconv` old | new, `ident` instance-id | host-pid | endpoint, `edge`:
    the edge proxy exports its spans, `internals`: tagging-api's manual image spans and the AWS SDK's
    per-attempt HTTP spans are exported."""

    semconv: str
    ident: str
    edge: bool
    internals: bool

    @property
    def server(self) -> str:  # otelhttp: the handler's operation name, or method + route (new)
        return "POST /v1/tags" if self.semconv == "new" else "/v1/tags"

    @property
    def http_client(self) -> str:
        return "POST" if self.semconv == "new" else "HTTP POST"

    def attempt(self, method: str) -> str:
        return method if self.semconv == "new" else f"HTTP {method}"

    def resize_span(self) -> str:
        """Where the resize's time shows: image.resize, or tagging-api's SERVER span."""
        return RESIZE if self.internals else self.server

    def label(self, service: str, region: int, k: int) -> str:
        """A server-side instance as the store names it."""
        name = api_pod(region, k) if service == API else edge_node(region, k)
        if self.ident == "instance-id":
            return f"photos.{name}.tagging-api" if service == API else f"edge.{name}.envoy"
        if self.ident == "host-pid":
            return f"{name}:1"
        ip, port = endpoint(service, region, k)
        return f"{ip}:{port}"


def endpoint(service: str, region: int, k: int) -> tuple[str, int]:
    if service == API:
        return f"10.{20 + region}.4.{11 + k}", 8080
    return f"10.{20 + region}.1.{5 + k}", 443


@dataclass
class Resources:
    table: TraceTable
    style: Style
    made: dict[tuple[str, int, int], int] = field(default_factory=dict)

    def phone(self, phone: Phone) -> int:
        key = ("phone", phone.ident, 0)
        if key not in self.made:
            attrs: dict[str, Any] = {
                "service.name": SERVICE_OF[phone.platform], "service.version": APP_VERSION[phone.platform],
                "telemetry.sdk.language": "swift" if phone.platform == "ios" else "java",
                "telemetry.sdk.name": "opentelemetry",
                "os.name": "iOS" if phone.platform == "ios" else "Android", "os.version": phone.os_version,
                "device.manufacturer": phone.manufacturer, "device.model.identifier": phone.model}
            if self.style.ident == "instance-id":  # the install's id
                attrs["service.instance.id"] = str(uuid.UUID(int=(phone.ident * 0x9E3779B97F4A7C15 + 77)
                                                   % (1 << 128), version=4))
            if self.style.ident == "endpoint":
                attrs = {"service.name": attrs["service.name"]}
            self.made[key] = self.table.resource(attrs, phone.ip, 0)
        return self.made[key]

    def server(self, service: str, region: int, k: int) -> int:
        key = (service, region, k)
        if key not in self.made:
            attrs = self._attrs(service, region, k)
            self.made[key] = self.table.resource(attrs, *endpoint(service, region, k))
        return self.made[key]

    def _attrs(self, service: str, region: int, k: int) -> dict[str, Any]:
        attrs: dict[str, Any] = {"service.name": service}
        if self.style.ident == "endpoint":
            return attrs
        name = api_pod(region, k) if service == API else edge_node(region, k)
        attrs.update({"cloud.region": REGIONS[region], "host.name": name})
        if service == API:
            attrs.update({"k8s.namespace.name": "photos", "k8s.pod.name": name, "process.pid": 1,
                          "telemetry.sdk.language": "go", "process.runtime.name": "go",
                          "process.runtime.version": "go1.22.9"})
        else:
            attrs.update({"process.pid": 1, "telemetry.sdk.language": "cpp"})
        if self.style.ident == "instance-id":
            attrs["service.instance.id"] = self.style.label(service, region, k)
        return attrs


@dataclass
class Timeline:
    """One user action, in true ns (client spans are written on the phone's clock)."""

    phone: Phone
    region: int
    edge: int
    pod: int
    root: tuple[float, float]
    dns: tuple[float, float, int] | None  # (start, end, queries sent)
    connect: tuple[float, float, int] | None  # (start, end, retransmissions)
    http: tuple[float, float]
    edge_span: tuple[float, float]
    server: tuple[float, float]
    decode: tuple[float, float]
    resize: tuple[float, float]
    s3: list[Attempt]
    predict: tuple[float, float]
    version: int  # the model version that served the Predict (the API records the response's)
    ddb: list[Attempt] | None  # None: the S3 write failed, no tags written
    parse: tuple[float, float]
    nbytes: int
    width: int
    height: int
    tags: int
    status: int  # the API's HTTP status


def _peer(style: Style, host: str, port: int) -> dict[str, Any]:
    if style.semconv == "new":
        return {"server.address": host, "server.port": port}
    return {"net.peer.name": host, "net.peer.port": port}


def _status(style: Style, code: int) -> dict[str, Any]:
    return {"http.response.status_code" if style.semconv == "new" else "http.status_code": code}


def _aws(table: TraceTable, style: Style, trace: int, parent: int, me: int, name: str,
         attempts: list[Attempt], attrs: dict[str, Any], fail_message: str, method: str, url: str) -> None:
    """One AWS SDK operation (otelaws: one span across its attempts), and each attempt's HTTP span
    (otelhttp on the SDK's HTTP client) where those are exported."""
    final = attempts[-1].status
    ok = final < 400
    op = table.span(trace, parent, name, "Client", me, _OTELAWS, attempts[0].start, attempts[-1].end,
                    {**attrs, **_status(style, final)}, "Unset" if ok else "Error",
                    "" if ok else fail_message, peer=name.split(".")[0].lower())
    if not style.internals:
        return
    for a in attempts:
        http = ({"http.request.method": method, "url.full": url} if style.semconv == "new"
                else {"http.method": method, "http.url": url})
        table.span(trace, op, style.attempt(method), "Client", me,
                   "go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp", a.start, a.end,
                   {**http, **_status(style, a.status)}, "Error" if a.status >= 400 else "Unset",
                   peer=name.split(".")[0].lower())


def write_action(table: TraceTable, res: Resources, tl: Timeline) -> None:
    style, ph = res.style, tl.phone
    new = style.semconv == "new"
    trace = table.new_trace()
    me = res.phone(ph)
    skew = ph.skew_ns

    def c(span: tuple[float, ...]) -> tuple[float, float]:  # a client span on the phone's clock
        return span[0] + skew, span[1] + skew

    link = "cell" if ph.cellular else "wifi"
    net = ({"network.connection.type": link, "network.carrier.name": CARRIERS[ph.carrier]} if new
           else {"net.host.connection.type": link, "net.host.carrier.name": CARRIERS[ph.carrier]})
    if not ph.cellular:
        net = {k: v for k, v in net.items() if "carrier" not in k}
    failed = tl.status >= 500
    scope = "io.opentelemetry.swift" if ph.platform == "ios" else "io.opentelemetry.android"
    root = table.span(trace, None, ROOT[ph.platform], "Internal", me, scope, *c(tl.root),
                      {"photo.bytes": tl.nbytes, "device.model.identifier": ph.model, **net},
                      "Error" if failed else "Unset")
    if tl.dns is not None:
        table.span(trace, root, DNS[ph.platform], "Internal", me, scope, *c(tl.dns),
                   {"dns.question.name": HOST, "dns.queries": tl.dns[2]})
    if tl.connect is not None:
        table.span(trace, root, CONNECT[ph.platform], "Internal", me, scope, *c(tl.connect),
                   {**_peer(style, HOST, 443), "tls.protocol.version": "1.3",
                    "tcp.retransmits": tl.connect[2]})
    url = f"https://{HOST}/v1/tags"
    http = ({"http.request.method": "POST", "url.full": url, "http.request.body.size": tl.nbytes} if new
            else {"http.method": "POST", "http.url": url, "http.request_content_length": tl.nbytes})
    http_scope = "URLSession" if ph.platform == "ios" else "io.opentelemetry.okhttp-3.0"
    client = table.span(trace, root, style.http_client, "Client", me, http_scope, *c(tl.http),
                        {**http, **_peer(style, HOST, 443), **_status(style, tl.status), **net},
                        "Error" if failed else "Unset", peer=EDGE if style.edge else API)
    parent = client
    if style.edge:
        edge = res.server(EDGE, tl.region, tl.edge)
        parent = table.span(trace, client, EDGE_SPAN, "Server", edge, "envoy", *tl.edge_span,
                            {"http.method": "POST", "http.url": url, "http.protocol": "HTTP/2",
                             "http.status_code": tl.status, "request_size": tl.nbytes,
                             "upstream_cluster": f"tagging-api-{REGIONS[tl.region]}",
                             "node_id": edge_node(tl.region, tl.edge), "component": "proxy"},
                            "Error" if failed else "Unset")
    api = res.server(API, tl.region, tl.pod)
    server_attrs = ({"http.request.method": "POST", "url.path": "/v1/tags", "http.route": "/v1/tags",
                     "http.request.body.size": tl.nbytes} if new
                    else {"http.method": "POST", "http.target": "/v1/tags", "http.route": "/v1/tags",
                          "http.request_content_length": tl.nbytes})
    otelhttp = "go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
    server = table.span(trace, parent, style.server, "Server", api, otelhttp, *tl.server,
                        {**server_attrs, **_status(style, tl.status)}, "Error" if failed else "Unset")
    if style.internals:
        image = {"image.width": tl.width, "image.height": tl.height}
        table.span(trace, server, DECODE, "Internal", api, "tagging-api", *tl.decode,
                   {"image.format": "jpeg", "image.bytes": tl.nbytes, **image})
        table.span(trace, server, RESIZE, "Internal", api, "tagging-api", *tl.resize,
                   {**image, "image.pixels": tl.width * tl.height, "resize.target": "299x299"})
    bucket = f"phototag-originals-{REGIONS[tl.region]}"
    _aws(table, style, trace, server, api, S3_PUT, tl.s3,
         {"rpc.system": "aws-api", "rpc.service": "S3", "rpc.method": "PutObject",
          "aws.region": REGIONS[tl.region], "aws.s3.bucket": bucket},
         "operation error S3: PutObject, exceeded maximum number of attempts, 3, https response error "
         "StatusCode: 503, api error SlowDown: Please reduce your request rate.",
         "PUT", f"https://{bucket}.s3.{REGIONS[tl.region]}.amazonaws.com/originals/")
    grpc = {"rpc.system": "grpc", "rpc.service": "tensorflow.serving.PredictionService",
            "rpc.method": "Predict", "rpc.grpc.status_code": 0,
            **_peer(style, "tf-serving.ml.svc.cluster.local", 8500)}
    if style.internals:
        grpc["model.version"] = tl.version
    table.span(trace, server, PREDICT, "Client", api, _OTELGRPC, *tl.predict, grpc, peer="tf-serving")
    if tl.ddb is not None:
        _aws(table, style, trace, server, api, DDB_PUT, tl.ddb,
             {"rpc.system": "aws-api", "rpc.service": "DynamoDB", "rpc.method": "PutItem",
              "db.system": "dynamodb", "aws.dynamodb.table_names": "photo_tags",
              "aws.region": REGIONS[tl.region]},
             "operation error DynamoDB: PutItem, exceeded maximum number of attempts, 3, https response "
             "error StatusCode: 400, api error ProvisionedThroughputExceededException: Throughput exceeds "
             "the current capacity for one or more global secondary indexes or the table.",
             "POST", f"https://dynamodb.{REGIONS[tl.region]}.amazonaws.com/")
    table.span(trace, root, PARSE[ph.platform], "Internal", me, scope, *c(tl.parse), {"tags.count": tl.tags})
