"""How the blind family `mesh-triton` (mesh_triton.py) reports itself: resources and instance labels by
seed (k8s.pod.name, host.name or a Zipkin endpoint), span names, attributes in old or new semantic
conventions, Envoy's proxy spans where the mesh exports them, and Triton's own trace as span events,
as child spans, or not at all; then the spans of one request from its timings (mesh_triton_flow.Request)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from reference_pipeline.simulate.mesh_triton_flow import Request
from reference_pipeline.simulate.mesh_triton_physics import Attempt
from reference_pipeline.simulate.trace_table import TraceTable

NS = "ml"
SCORE, TRITON, POLICY, GATEWAY = "score", "triton-ranker", "policy", "istio-ingressgateway"
MODEL = "ranker_xenc"
PORTS = {SCORE: 8080, TRITON: 8001, POLICY: 8000, GATEWAY: 8080}
SIDECAR_PORT = 15006


def fqdn(service: str) -> str:
    return f"{service}.{NS}.svc.cluster.local:{PORTS[service]}"


def sidecar_service(service: str) -> str:
    """Istio names a sidecar's spans after the workload and its namespace."""
    return "istio-ingressgateway.istio-system" if service == GATEWAY else f"{service}.{NS}"


def names(setup: dict[str, Any]) -> dict[str, str]:
    """Span names as the seed's instrumentation writes them (Zipkin lower-cases them on the wire)."""
    new = setup["semconv"] == "new"
    out = {
        "root": "POST /v1/score",
        "features": "load_user_features",
        "hmget": "HMGET",
        "lrange": "LRANGE",
        "build": "build_infer_request",
        "infer": "inference.GRPCInferenceService/ModelInfer",
        "rerank": "rerank",
        "policy_call": "POST" if new else "HTTP POST",
        "policy": "POST /v1/policy/rank",
        "triton": "InferRequest",
        "model": MODEL,
        "queue": "queue",
        "compute": "compute",
        "compute_input": "compute_input",
        "compute_infer": "compute_infer",
        "compute_output": "compute_output",
        "proxy_score": f"{fqdn(SCORE)}/*",
        "proxy_triton": f"{fqdn(TRITON)}/*",
        "proxy_policy": f"{fqdn(POLICY)}/*",
    }
    if setup["fmt"] == "zipkin":
        out = {k: v.lower() for k, v in out.items()}
    return out


def instance_label(setup: dict[str, Any], pod: str, ip: str, port: int) -> str:
    """The instance as the store's readers derive it for this seed's resources."""
    return f"{ip}:{port}" if setup["identity"] == "endpoint" else pod


def resource(
    table: TraceTable,
    setup: dict[str, Any],
    service: str,
    pod: str,
    node: str,
    ip: str,
    port: int,
    language: str,
) -> int:
    attrs: dict[str, Any] = {"service.name": service}
    if setup["identity"] == "k8s.pod.name":  # the collector's k8sattributes processor
        attrs.update(
            {
                "k8s.pod.name": pod,
                "k8s.namespace.name": NS,
                "k8s.node.name": node,
                "k8s.deployment.name": pod.rsplit("-", 2)[0],
                "telemetry.sdk.language": language,
            }
        )
    elif setup["identity"] == "host.name":  # the SDK's host detector: a pod's hostname is its name
        attrs.update({"host.name": pod, "telemetry.sdk.language": language})
    return table.resource(attrs, ip, port)


@dataclass
class Emitter:
    """Writes one request's spans into the table in the seed's conventions."""

    table: TraceTable
    setup: dict[str, Any]
    res: dict[str, list[int]]  # service (app or sidecar) -> resource per pod
    redis_ips: list[str]

    def _http(self, method: str, status: int, route: str | None = None, peer: str | None = None) -> dict:
        new = self.setup["semconv"] == "new"
        out: dict[str, Any] = (
            {"http.request.method": method, "http.response.status_code": status}
            if new
            else {"http.method": method, "http.status_code": status}
        )
        if route:
            out["http.route"] = route
        if peer:
            host, port = peer.split(":")
            out.update(
                {"server.address": host, "server.port": int(port)}
                if new
                else {"net.peer.name": host, "net.peer.port": int(port)}
            )
        return out

    def _proxy(
        self,
        trace: int,
        parent: int | None,
        service: str,
        pod: int,
        kind: str,
        upstream: str,
        span: tuple[float, float],
        status: int,
        nbytes: int,
        flags: str = "-",
        grpc: bool = False,
    ) -> int:
        name = names(self.setup)[
            {SCORE: "proxy_score", TRITON: "proxy_triton", POLICY: "proxy_policy"}[upstream]
        ]
        direction = "outbound" if kind == "Client" else "inbound"
        attrs: dict[str, Any] = {
            "component": "proxy",
            "http.method": "POST",
            "http.protocol": "HTTP/2" if grpc else "HTTP/1.1",
            "upstream_cluster": f"{direction}|{PORTS[upstream]}||{upstream}.{NS}.svc.cluster.local",
            "http.status_code": str(status),
            "response_flags": flags,
            "request_size": str(nbytes),
            "istio.canonical_service": service,
            "istio.namespace": "istio-system" if service == GATEWAY else NS,
        }
        if grpc:
            attrs.update(
                {
                    "grpc.path": "/inference.GRPCInferenceService/ModelInfer",
                    "grpc.status_code": "0" if status == 200 else "14",
                }
            )
        bad = status == 0 or status >= 500
        return self.table.span(
            trace,
            parent,
            name,
            kind,
            self.res[sidecar_service(service)][pod],
            "envoy",
            span[0],
            span[1],
            attrs,
            "Error" if bad else "Unset",
            f"response_flags={flags}" if bad else "",
            peer=sidecar_service(upstream) if kind == "Client" else None,
        )

    def emit(self, r: Request) -> None:
        s, n, tb = self.setup, names(self.setup), self.table
        proxies = s["proxies"]
        trace = tb.new_trace()
        app, scope = self.res[SCORE][r.pod], "tracing-opentelemetry"
        parent: int | None = None
        if proxies:
            parent = self._proxy(
                trace, None, GATEWAY, r.gateway, "Client", SCORE, r.gw, r.status, r.nbytes // 4
            )
            parent = self._proxy(
                trace, parent, SCORE, r.pod, "Server", SCORE, r.inbound, r.status, r.nbytes // 4
            )
        root = tb.span(
            trace,
            parent,
            n["root"],
            "Server",
            app,
            "tower_http",
            r.root[0],
            r.root[1],
            {**self._http("POST", r.status, "/v1/score"), "ranker.candidates": r.items},
            "Error" if r.status >= 500 else "Unset",
        )
        feats = tb.span(trace, root, n["features"], "Internal", app, scope, *r.features)
        for command, a, seen in r.redis:
            self._redis(trace, feats, r.pod, command, a, seen)
        tb.span(
            trace,
            root,
            n["build"],
            "Internal",
            app,
            scope,
            *r.build,
            {"ranker.candidates": r.items, "ranker.request_bytes": r.nbytes},
        )
        self._inference(trace, root, r)
        tb.span(trace, root, n["rerank"], "Internal", app, scope, *r.rerank, {"ranker.candidates": r.items})
        self._policy(trace, root, r)

    def _redis(self, trace: int, parent: int, pod: int, command: str, a: Attempt, seen: float) -> None:
        new = self.setup["semconv"] == "new"
        key = "user:{?}:" + ("f" if command == "HMGET" else "hist")
        text = f"{command} {key} ?" if command == "HMGET" else f"{command} {key} 0 49"
        attrs: dict[str, Any] = {"db.system": "redis"}
        attrs.update(
            {
                "db.operation.name": command,
                "db.query.text": text,
                "server.address": self.redis_ips[a.shard],
                "server.port": 6379,
            }
            if new
            else {
                "db.operation": command,
                "db.statement": text,
                "net.peer.name": self.redis_ips[a.shard],
                "net.peer.port": 6379,
            }
        )
        if a.asking:
            attrs["db.redis.asking"] = True
        redirect = a.reply != "OK"
        if redirect and new:
            attrs["error.type"] = a.reply.split()[0]
        self.table.span(
            trace,
            parent,
            names(self.setup)["hmget" if command == "HMGET" else "lrange"],
            "Client",
            self.res[SCORE][pod],
            "redis",
            a.start,
            seen,
            attrs,
            "Error" if redirect else "Unset",
            a.reply if redirect else "",
            peer="redis-cluster",
        )

    def _inference(self, trace: int, root: int, r: Request) -> None:
        s, n, tb = self.setup, names(self.setup), self.table
        attrs = {
            "rpc.system": "grpc",
            "rpc.service": "inference.GRPCInferenceService",
            "rpc.method": "ModelInfer",
            "rpc.grpc.status_code": 0,
            "ranker.request_bytes": r.nbytes,
            **self._http("POST", 200, peer=fqdn(TRITON)),
        }
        for k in ("http.request.method", "http.response.status_code", "http.method", "http.status_code"):
            attrs.pop(k, None)
        call = tb.span(
            trace,
            root,
            n["infer"],
            "Client",
            self.res[SCORE][r.pod],
            "tonic",
            *r.infer,
            attrs,
            peer=TRITON if not s["proxies"] else sidecar_service(TRITON),
        )
        parent = call
        if s["proxies"]:
            parent = self._proxy(
                trace, call, SCORE, r.pod, "Client", TRITON, r.out_triton, 200, r.nbytes, grpc=True
            )
            parent = self._proxy(
                trace, parent, TRITON, r.triton_pod, "Server", TRITON, r.in_triton, 200, r.nbytes, grpc=True
            )
        if s["triton"] is None or r.job is None:
            return
        res, j = self.res[TRITON][r.triton_pod], r.job
        model_attrs = {"triton.model_name": MODEL, "triton.model_version": 3, "triton.batch_size": j.batch}
        handler = tb.span(
            trace,
            parent,
            n["triton"],
            "Server",
            res,
            "triton",
            *r.grpc,
            {"rpc.system": "grpc", "rpc.method": "ModelInfer"},
        )
        request_end = j.compute_end + 0.03e6
        stamps = [
            ("REQUEST_START", j.arrive),
            ("QUEUE_START", j.queue_start),
            ("COMPUTE_START", j.compute_start),
            ("COMPUTE_INPUT_END", j.input_end),
            ("COMPUTE_OUTPUT_START", j.output_start),
            ("COMPUTE_END", j.compute_end),
            ("REQUEST_END", request_end),
        ]
        if s["triton"] == "events":
            tb.span(
                trace,
                handler,
                n["model"],
                "Internal",
                res,
                "triton",
                j.arrive,
                request_end,
                model_attrs,
                events=[(t, name, {}) for name, t in stamps],
            )
            return
        model = tb.span(
            trace, handler, n["model"], "Internal", res, "triton", j.arrive, request_end, model_attrs
        )
        tb.span(trace, model, n["queue"], "Internal", res, "triton", j.queue_start, j.compute_start)
        compute = tb.span(
            trace, model, n["compute"], "Internal", res, "triton", j.compute_start, j.compute_end
        )
        for key, a, b in (
            ("compute_input", j.compute_start, j.input_end),
            ("compute_infer", j.input_end, j.output_start),
            ("compute_output", j.output_start, j.compute_end),
        ):
            tb.span(trace, compute, n[key], "Internal", res, "triton", a, b)

    def _policy(self, trace: int, root: int, r: Request) -> None:
        s, n, tb = self.setup, names(self.setup), self.table
        ok = r.tries and not r.tries[-1].cut
        status = 200 if ok else 504
        call = tb.span(
            trace,
            root,
            n["policy_call"],
            "Client",
            self.res[SCORE][r.pod],
            "reqwest",
            *r.policy_call,
            self._http("POST", status, peer=fqdn(POLICY)),
            "Unset" if ok else "Error",
            "" if ok else "504 Gateway Timeout",
            peer=POLICY if not s["proxies"] else sidecar_service(POLICY),
        )
        parent = call
        if s["proxies"]:
            parent = self._proxy(
                trace, call, SCORE, r.pod, "Client", POLICY, r.out_policy, status, 2048, "-" if ok else "UT"
            )
        for t in r.tries:
            srv_parent = parent
            if s["proxies"]:
                srv_parent = self._proxy(
                    trace,
                    parent,
                    POLICY,
                    t.endpoint,
                    "Server",
                    POLICY,
                    t.inbound,
                    0 if t.cut else 200,
                    2048,
                    "DC" if t.cut else "-",
                )
            tb.span(
                trace,
                srv_parent,
                n["policy"],
                "Server",
                self.res[POLICY][t.endpoint],
                "opentelemetry.instrumentation.fastapi",
                *t.server,
                self._http("POST", 200, "/v1/policy/rank"),
            )
