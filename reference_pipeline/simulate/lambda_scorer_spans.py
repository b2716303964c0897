"""The spans of the blind family `lambda-scorer` (lambda_scorer.py): the model's records
(lambda_scorer_sim.py) rendered in the seed's conventions: X-Ray segments as the collector's awsxray
receiver turns them into spans (seed 0 mod 3), the ADOT Python layer with old semantic conventions
(seed 1) or with new ones (seed 2); which hops are traced; how an environment is named."""

from __future__ import annotations

import math
import random
from typing import Any

from reference_pipeline.simulate.lambda_scorer_sim import Attempt, Invoke, Run, Stage
from reference_pipeline.simulate.trace_table import TraceTable

FUNCTION, CALLER, GATEWAY, MODEL = "score-handler", "checkout-service", "scoring-api/prod", "fraud-model"
API_HOST = "t8k2m1x9q4.execute-api.eu-west-1.amazonaws.com"
ROUTE = "/api/checkout/{cartId}/confirm"
ENDPOINT, TABLE = "fraud-xgb-prod", "customer_features"
XRAY_NAMES = {"init": "Initialization", "dynamodb": "DynamoDB", "sagemaker": "SageMakerRuntime",
              "sink": "SQS", "client": API_HOST, "root": CALLER}
OTEL_NAMES = {"init": "init", "dynamodb": "DynamoDB.BatchGetItem",
              "sagemaker": "SageMaker Runtime.InvokeEndpoint", "sink": "SQS.SendMessage",
              "client": "HTTP POST",
              "root": f"POST {ROUTE}"}
LOCAL_NAMES = {"validate": "validate_request", "features": "build_features",
               "serialize": "serialize_response", "flush": "flush_metrics"}
BOTOCORE, LAMBDA_SCOPE = "opentelemetry.instrumentation.botocore", "opentelemetry.instrumentation.aws_lambda"


def name_of(s: dict[str, Any], key: str) -> str:
    """A step's span name under the seed's conventions."""
    if key in LOCAL_NAMES:
        return LOCAL_NAMES[key]
    if s["style"] == "xray":
        return XRAY_NAMES[key]
    if key == "sink" and s["sink"] == "kinesis":
        return "Kinesis.PutRecord"
    if key == "client" and s["semconv"] == "new":
        return "POST"
    return OTEL_NAMES[key]


def env_identity(seed: int, k: int, identity: str) -> str:
    """How the run names environment k: its log stream (one per environment), or, in Zipkin, the
    address of its endpoint."""
    if identity == "endpoint":
        return f"169.254.{76 + k // 200}.{21 + k % 200}"
    return f"2026/11/27/[$LATEST]{random.Random(seed * 1_000_003 + k).getrandbits(128):032x}"


def instance_host(seed: int, k: int) -> str:
    return f"i-0{random.Random(seed * 31 + k).getrandbits(64):016x}"


class Writer:
    def __init__(self, table: TraceTable, run: Run, s: dict[str, Any], seed: int) -> None:
        self.table, self.run, self.s, self.seed = table, run, s, seed
        self.ids = random.Random(seed * 977 + 5)
        self.old = s["semconv"] == "old"
        self.xray = s["style"] == "xray"
        self.callers = [self._caller(k) for k in range(s["callers"])]
        self.gateway = table.resource({"service.name": GATEWAY, "cloud.provider": "aws",
                                       "cloud.platform": "aws_api_gateway"}, "10.0.0.1", 443)
        self.envs = [self._env(e.k, run.memory_mb) for e in run.envs]
        self.models = [table.resource({"service.name": MODEL, "host.name": instance_host(seed, k),
                                       "cloud.platform": "aws_sagemaker", "sagemaker.variant": variant,
                                       "telemetry.sdk.language": "python"}, f"10.60.0.{10 + k}", 8080)
                       for k, (variant, _) in enumerate(run.instances)]

    def _caller(self, k: int) -> int:
        pod = f"checkout-service-5d8f7-{k:02d}"
        return self.table.resource({"service.name": CALLER, "host.name": pod, "k8s.pod.name": pod,
                                    "telemetry.sdk.language": "java"}, f"10.30.1.{10 + k}", 8080)

    def _env(self, k: int, memory_mb: float) -> int:
        s = self.s
        ident = env_identity(self.seed, k, s["identity"])
        attrs: dict[str, Any] = {"service.name": FUNCTION, "cloud.provider": "aws",
                                 "cloud.platform": "aws_lambda", "cloud.region": "eu-west-1"}
        if self.xray:
            attrs.update({"aws.log.group.names": f"/aws/lambda/{FUNCTION}", "aws.log.stream.names": ident})
        else:
            attrs.update({"faas.name": FUNCTION, "faas.version": "$LATEST",
                          "telemetry.sdk.language": "python",
                          "faas.max_memory": int(memory_mb) if self.old else int(memory_mb) << 20})
            attrs["faas.instance" if s["identity"] == "faas_instance" else "host.name"] = ident
        ip = ident if s["identity"] == "endpoint" else f"169.254.{76 + k // 200}.{21 + k % 200}"
        return self.table.resource(attrs, ip, 9001)

    def http(self, method: str, status: int | None, **more: Any) -> dict[str, Any]:
        attrs: dict[str, Any] = {("http.method" if self.old else "http.request.method"): method}
        if status:
            attrs["http.status_code" if self.old else "http.response.status_code"] = status
        for key, value in more.items():
            old, new = {"url": ("http.url", "url.full"), "route": ("http.route", "http.route"),
                        "peer": ("net.peer.name", "server.address"),
                        "body": ("http.request_content_length", "http.request.body.size")}[key]
            attrs[old if self.old else new] = value
        return attrs

    def request(self, req: Any) -> None:
        t, s = self.table, self.s
        trace = t.new_trace()
        ok = req.status == 200
        status = req.status if req.status in (200, 500) else 503
        root = t.span(trace, None, name_of(s, "root"), "Server", self.callers[req.pod],
                      "io.opentelemetry.spring-webmvc-6.0", req.t0, req.end,
                      self.http("POST", status if ok else 502, route=ROUTE), "Unset" if ok else "Error")
        for att in req.attempts:
            self.attempt(trace, root, att, req)

    def attempt(self, trace: int, root: int, att: Attempt, req: Any) -> None:
        t, s = self.table, self.s
        message = {0: "java.net.http.HttpTimeoutException: request timed out", 429: "429 Too Many Requests",
                   500: "500 Internal Server Error"}.get(att.status, "")
        client = t.span(trace, root, name_of(s, "client"), "Client", self.callers[req.pod],
                        "io.opentelemetry.java-http-client", att.start, att.end,
                        self.http("POST", att.status, url=f"https://{API_HOST}/prod/v1/score", peer=API_HOST),
                        "Unset" if att.status == 200 else "Error", message, peer=GATEWAY)
        parent = client
        if s["gateway_span"]:
            gw_status = att.status or (att.invoke.status if att.invoke else 504)
            parent = t.span(trace, client, GATEWAY, "Server", self.gateway, "awsxray", *att.gateway,
                            {**self.http("POST", gw_status, url=f"https://{API_HOST}/prod/v1/score"),
                             "aws.api_gateway.stage": "prod"}, "Unset" if gw_status == 200 else "Error")
        if att.invoke is not None:
            self.invoke(trace, parent, att.invoke, req)

    def invoke(self, trace: int, parent: int, inv: Invoke, req: Any) -> None:
        t, s = self.table, self.s
        res = self.envs[inv.env.k]
        failed = inv.status != 200
        if self.xray:
            segment = t.span(trace, parent, FUNCTION, "Server", res, "awsxray", inv.received, inv.done,
                             {"aws.origin": "AWS::Lambda::Function", "aws.request_id": self._request_id()},
                             "Error" if failed else "Unset")
            if inv.init is not None:
                t.span(trace, segment, "Initialization", "Internal", res, "awsxray", *inv.init)
            handler = t.span(trace, segment, "Invocation", "Internal", res, "awsxray", inv.start, inv.end)
            t.span(trace, segment, "Overhead", "Internal", res, "awsxray", inv.end, inv.done)
            flush_parent = segment
        else:
            execution = "faas.execution" if self.old else "faas.invocation_id"
            attrs: dict[str, Any] = {"faas.trigger": "http", "cloud.account.id": "482913370551",
                                     execution: self._request_id()}
            if s["coldstart"] == "attribute":
                attrs["faas.coldstart"] = inv.init is not None
            handler = t.span(trace, parent, FUNCTION, "Server", res, LAMBDA_SCOPE, inv.start, inv.end, attrs,
                             "Error" if failed else "Unset")
            flush_parent = handler
        for stage in inv.stages:
            self.stage(trace, handler, res, stage)
        if inv.flush is not None and math.isfinite(inv.flush.end):  # lost if the environment never thawed
            t.span(trace, flush_parent, LOCAL_NAMES["flush"], "Internal", res, "score_handler",
                   inv.flush.start, inv.flush.end, {"metrics.count": 12})

    def _request_id(self) -> str:
        h = f"{self.ids.getrandbits(128):032x}"
        return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"

    def stage(self, trace: int, parent: int, res: int, st: Stage) -> None:
        t, s = self.table, self.s
        scope = "awsxray" if self.xray else BOTOCORE
        if st.key in ("validate", "features", "serialize"):
            attrs: dict[str, Any] = {"score.items": st.attrs["items"]}
            if st.key == "validate":
                attrs["score.request_bytes"] = st.attrs["bytes"]
            if st.key == "features":
                attrs["score.explain"] = st.attrs["explain"]
            events = []
            if s["gc_events"]:
                events = [(ts, "python.gc", {"gc.generation": ea["gen"], "gc.pause_ms": ea["pause_ms"]})
                          for ts, _, ea in st.events]
            t.span(trace, parent, LOCAL_NAMES[st.key], "Internal", res, "score_handler", st.start, st.end,
                   attrs, events=events)
        elif st.key == "dynamodb":
            self.dynamodb(trace, parent, res, st, scope)
        elif st.key == "sagemaker":
            self.sagemaker(trace, parent, res, st, scope)
        else:
            kinesis = s["sink"] == "kinesis"
            service, op = ("Kinesis", "PutRecord") if kinesis else ("SQS", "SendMessage")
            attrs = self._aws(service, op, 200)
            if not kinesis:
                attrs.update({"messaging.system": "aws_sqs" if self.old else "aws.sqs",
                              "messaging.destination.name": "fraud-scores"})
            kind = "Producer" if not kinesis and not self.xray else "Client"
            call = t.span(trace, parent, name_of(s, "sink"), kind, res, scope, st.start, st.end, attrs,
                          peer=service.lower())
            self.attempts(trace, call, res, st, f"{service.lower()}.eu-west-1.amazonaws.com", service.lower())

    def _aws(self, service: str, op: str, status: int) -> dict[str, Any]:
        if self.xray:
            return {"aws.operation": op, "aws.service": service, "http.status_code": status,
                    "aws.region": "eu-west-1"}
        return {"rpc.system": "aws-api", "rpc.service": service, "rpc.method": op,
                "cloud.region": "eu-west-1", **self.http("POST", status)}

    def dynamodb(self, trace: int, parent: int, res: int, st: Stage, scope: str) -> None:
        t, s = self.table, self.s
        error = st.attrs.get("error")
        attrs = self._aws("DynamoDB", "BatchGetItem", 400 if error else 200)
        retries = st.attrs["retries"]
        if self.xray:
            attrs.update({"aws.table_name": TABLE, "aws.retries": retries})
        else:
            attrs.update({"aws.dynamodb.table_names": TABLE, "retry_attempts": retries})
        message = f"{error}: The level of configured provisioned throughput for the table was exceeded"
        call = t.span(trace, parent, name_of(s, "dynamodb"), "Client", res, scope, st.start, st.end, attrs,
                      "Error" if error else "Unset", message if error else "", peer="dynamodb")
        self.attempts(trace, call, res, st, "dynamodb.eu-west-1.amazonaws.com", "dynamodb")

    def attempts(self, trace: int, call: int, res: int, st: Stage, host: str, peer: str) -> None:
        """With urllib3 instrumented too, each HTTP attempt of an SDK call is its own CLIENT span."""
        if not self.s["attempt_spans"]:
            return
        scope = "opentelemetry.instrumentation.urllib3"
        for a, e, code in st.calls:
            self.table.span(trace, call, "HTTP POST", "Client", res, scope, a, e,
                            self.http("POST", code, url=f"https://{host}/", peer=host),
                            "Error" if code >= 400 else "Unset", peer=peer)

    def sagemaker(self, trace: int, parent: int, res: int, st: Stage, scope: str) -> None:
        t, s = self.table, self.s
        attrs = {**self._aws("SageMaker Runtime", "InvokeEndpoint", 200), "sagemaker.endpoint_name": ENDPOINT}
        if not self.xray:
            attrs.update({"sagemaker.invoked_variant": st.attrs["variant"],
                          **self.http("POST", None, body=st.attrs["bytes"])})
        call = t.span(trace, parent, name_of(s, "sagemaker"), "Client", res, scope, st.start, st.end, attrs,
                      peer="sagemaker-runtime")
        self.attempts(trace, call, res, st, "runtime.sagemaker.eu-west-1.amazonaws.com", "sagemaker-runtime")
        if s["model_traced"] and st.model is not None:
            k, variant, got, reply, parse, done = st.model
            server = t.span(trace, call, "POST /invocations", "Server", self.models[k],
                            "opentelemetry.instrumentation.flask", got, reply,
                            {**self.http("POST", 200, route="/invocations"), "sagemaker.variant": variant})
            t.span(trace, server, "xgboost.predict", "Internal", self.models[k], "inference", parse, done,
                   {"model.rows": st.attrs["bytes"] // 2800})


def emit(table: TraceTable, run: Run, s: dict[str, Any], seed: int) -> TraceTable:
    writer = Writer(table, run, s, seed)
    for req in run.requests:
        writer.request(req)
    return table
