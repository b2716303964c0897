"""The request path of `POST /v1/predict`, everything but the model: HTTP body, JSON, features,
tokens, postprocessing, the downstream call, the response, and the request's spans.

A request: read and size-check the body (http.receive) → decode and validate JSON (parse_request) →
features from the cache, or from the store on a miss (feature_hydration, feature_store.get) → WordPiece
tokens (tokenize) → the model (`model.infer`: the dynamic batcher in this process, or the model
process over the hand-off; batch.queue_wait, model.forward) → calibration, thresholds and the shared
monitor (postprocess, lock.wait) → the downstream enrichment call (downstream.call, W3C trace context
propagated) → JSON response (serialize_response). Span names and stages come from span_model.

Tracing modes (ServiceConfig.tracing_mode): "spans", a span per stage; "light", one span per request
with the stage times as attributes (tailscope.instrument.light). With sampling on, the response says
whether the request's spans were kept (header sm.SAMPLED_HEADER), so the load generator keeps its
client span exactly when the service kept the rest of the trace.
"""

from __future__ import annotations

import asyncio
import contextvars
import re
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import orjson
from opentelemetry import propagate, trace
from opentelemetry.trace import SpanKind, Status, StatusCode
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from reference_pipeline import span_model as sm
from reference_pipeline.features import (
    FeatureCache,
    RedisFeatureStore,
    RemoteLatency,
    SqliteFeatureStore,
    entity_id,
)
from reference_pipeline.framework_telemetry import record_triton_style
from reference_pipeline.model_spans import record_model_spans
from reference_pipeline.pagecache import drop_page_cache
from reference_pipeline.postprocess import ExplanationLog, Postprocessor, ScoreMonitor
from reference_pipeline.scenarios import ServiceConfig
from reference_pipeline.text import build_tokenizer
from tailscope import instrument as ts
from tailscope.instrument.gc_pauses import GcPauseLog
from tailscope.instrument.sampling import SamplingProcessor

ENTITY_RE = re.compile(r"^[A-Za-z0-9_.:-]{1,64}$")
MAX_TEXT_CHARS = 8000


class BadRequest(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def validate(body: bytes) -> dict:
    try:
        payload = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise BadRequest(400, f"body is not JSON: {exc}") from None
    if not isinstance(payload, dict):
        raise BadRequest(400, "body must be a JSON object")
    entity, text = payload.get("entity_id"), payload.get("text")
    if not isinstance(entity, str) or not ENTITY_RE.match(entity):
        raise BadRequest(400, "entity_id must be a string of 1-64 [A-Za-z0-9_.:-]")
    if not isinstance(text, str) or not text.strip() or len(text) > MAX_TEXT_CHARS:
        raise BadRequest(400, f"text must be a non-empty string of at most {MAX_TEXT_CHARS} characters")
    return {"entity_id": entity, "text": text, "request_id": str(payload.get("request_id", ""))[:64]}


class RequestPath:
    """A front end's state: tokenizer, feature store + cache, postprocessor, downstream client, and
    `model` (LocalModel or handoff.RemoteModel), which the model's answer comes from."""

    def __init__(
        self,
        cfg: ServiceConfig,
        tracer: trace.Tracer,
        gc_log: GcPauseLog,
        workdir: Path,
        model: Any,
        weights: str,
        weights_dir: Path | None,
    ) -> None:
        self.cfg, self.tracer, self.gc_log, self.workdir = cfg, tracer, gc_log, workdir
        self.model, self.weights = model, weights
        self.tokenizer = build_tokenizer(weights_dir)
        store = SqliteFeatureStore(workdir / "features.sqlite", n_entities=cfg.n_entities)
        if not cfg.warm_model:
            drop_page_cache(store.path)
        self.store = RedisFeatureStore(cfg.redis_url, store) if cfg.redis_url else store
        # simulated network round trip of a remote store (cold-cache, key-expiry); see features.py
        remote = cfg.store_rtt_ms > 0 and not cfg.redis_url
        self.store_rtt = RemoteLatency(cfg.store_rtt_ms) if remote else None
        self.cache = FeatureCache(cfg.cache_capacity, cfg.cache_ttl_s, jitter=cfg.cache_jitter)
        self.store_pool = ThreadPoolExecutor(cfg.store_pool, thread_name_prefix="store")
        self.post_pool = ThreadPoolExecutor(cfg.post_threads or cfg.workers, thread_name_prefix="post")
        explanations = (
            ExplanationLog(cfg.gc_live_records, cfg.gc_nodes_per_request)
            if cfg.gc_nodes_per_request
            else None
        )
        self.monitor = ScoreMonitor(workdir / "audit.sqlite", heavy=cfg.heavy_monitor)
        self.post = Postprocessor(self.monitor, explanations)
        if cfg.cache_prefill:
            self.cache.fill(self.store, [entity_id(i) for i in range(cfg.n_entities)])
        self.client: httpx.AsyncClient | None = None
        self.switch = None  # the tracing-overhead benchmark's A/B switch (tracing_switch.TracingSwitch)
        self.sampler: SamplingProcessor | None = None  # set when the provider samples

    def _fetch(self, key: str, network_wait_s: float) -> list[float] | None:
        if network_wait_s:
            time.sleep(network_wait_s)  # the simulated remote store's network round trip, not work
        return self.store.get(key)

    def close(self) -> None:
        self.model.close()
        self.post_pool.shutdown(wait=True)
        self.store_pool.shutdown(wait=True)
        self.monitor.close()

    def span(self, name: str, kind: SpanKind = SpanKind.INTERNAL, current: bool = False, **attrs) -> ts.stage:
        """A stage's span; `current` for a stage whose work makes child spans or propagates context."""
        return ts.stage(sm.STAGE_OF[name], name, attributes=attrs, kind=kind, current=current)

    async def hydrate(self, key: str) -> list[float]:
        with self.span(sm.HYDRATE, current=True, **{"feature.key": key}) as span:
            features = self.cache.get(key)
            span.set_attribute("cache.hit", features is not None)
            if features is None:
                with self.span(sm.STORE_GET, SpanKind.CLIENT, **{"db.system": self.store.db_system}) as get:
                    wait = self.store_rtt.draw() if self.store_rtt else 0.0
                    if wait:
                        get.set_attribute("tailscope.injected_delay_ms", round(wait * 1000, 3))
                    loop = asyncio.get_running_loop()
                    features = await loop.run_in_executor(self.store_pool, self._fetch, key, wait)
                if features is None:
                    raise BadRequest(404, f"unknown entity {key}")
                self.cache.put(key, features)
            return features

    async def predict(self, request: Request) -> Response:
        root_ctx = propagate.extract(request.headers)
        started = time.time_ns()
        with self.tracer.start_as_current_span(
            sm.ROOT_SPAN,
            context=root_ctx,
            kind=SpanKind.SERVER,
            start_time=started,
            attributes=ts.stage_attributes(
                sm.STAGE_OF[sm.ROOT_SPAN],
                attributes={
                    "http.request.method": "POST",
                    "http.route": sm.ROUTE,
                    "url.path": request.url.path,
                },
            ),
        ) as root:
            with ts.request(root, started) as tally:
                try:
                    status, body = 200, await self._handle(request, tally.span)
                except BadRequest as exc:
                    status, body = exc.status, orjson.dumps({"error": str(exc)})
                    root.set_status(Status(StatusCode.ERROR, str(exc)))
                except Exception as exc:
                    status, body = 500, orjson.dumps({"error": "internal error"})
                    root.record_exception(exc)
                    root.set_status(Status(StatusCode.ERROR, type(exc).__name__))
                tally.span.set_attribute("http.response.status_code", status)
            ts.attach_gc_pauses(root, started)  # the pauses no stage span was there to see too
        if self.switch is not None:
            self.switch.completed()
        headers = self._sampled_header(root)
        return Response(body, status_code=status, media_type="application/json", headers=headers)

    def _sampled_header(self, root: trace.Span) -> dict[str, str] | None:
        """With sampling: whether this request's spans were kept (its span has ended: decided), and
        the model process told when the rule kept a request its head draw did not."""
        if self.sampler is None:
            return None
        trace_id = root.get_span_context().trace_id
        kept = self.sampler.decision(trace_id)
        return {sm.SAMPLED_HEADER: "1" if kept else "0"}

    async def _handle(self, request: Request, root: trace.Span) -> bytes:
        """`root`: where the request's attributes go (its span, or light mode's tally of it)."""
        with self.span(sm.RECEIVE) as span:
            declared = int(request.headers.get("content-length") or 0)
            if declared > self.cfg.max_body_bytes:
                raise BadRequest(413, "body too large")
            body = await request.body()
            if len(body) > self.cfg.max_body_bytes:
                raise BadRequest(413, "body too large")
            span.set_attribute("http.request.body.size", len(body))
        with self.span(sm.PARSE):
            req = validate(body)
        root.set_attribute("tailscope.request.id", req["request_id"])
        features = await self.hydrate(req["entity_id"])
        with self.span(sm.TOKENIZE, **{"text.chars": len(req["text"])}) as span:
            ids = self.tokenizer.encode(req["text"]).ids
            span.set_attribute("tokens.count", len(ids))

        result = await self.model.infer(ids, features, root.get_span_context())
        if self.cfg.model_telemetry == "triton":
            record_triton_style(
                self.tracer,
                "classifier",
                req["request_id"],
                result.enqueued_ns,
                result.started_ns,
                result.ended_ns,
                result.marks,
                {"batch.size": result.batch_size},
            )
        elif not self.model.records_model_spans or ts.mode() == "light":
            record_model_spans(self.cfg, root.get_span_context(), result)

        with self.span(sm.POSTPROCESS, current=True):
            loop = asyncio.get_running_loop()
            ctx = contextvars.copy_context()
            outcome = await loop.run_in_executor(
                self.post_pool, ctx.run, self.post.run, req["entity_id"], result.output, features
            )
        outcome["segment"] = await self.enrich(req["entity_id"], outcome["score"])
        with self.span(sm.SERIALIZE):
            return orjson.dumps({"request_id": req["request_id"], **outcome, "model": self.weights})

    async def enrich(self, key: str, score: float) -> str | None:
        if self.client is None or not self.cfg.downstream_url:
            return None
        url = self.cfg.downstream_url.rstrip("/") + sm.DOWNSTREAM_ROUTE
        with self.span(
            sm.DOWNSTREAM,
            SpanKind.CLIENT,
            current=True,
            **{"http.request.method": "POST", "url.full": url, "server.address": httpx.URL(url).host},
        ) as span:
            headers: dict[str, str] = {}
            propagate.inject(headers)
            try:
                response = await self.client.post(
                    url, json={"entity_id": key, "score": score}, headers=headers
                )
            except httpx.HTTPError as exc:
                span.set_status(Status(StatusCode.ERROR, type(exc).__name__))
                return None
            span.set_attribute("http.response.status_code", response.status_code)
            if response.status_code != 200:
                span.set_status(Status(StatusCode.ERROR, f"HTTP {response.status_code}"))
                return None
            return response.json().get("segment")


def build_app(path: RequestPath) -> Starlette:
    """The ASGI app; its lifespan opens the downstream client and the way to the model."""

    @asynccontextmanager
    async def lifespan(app):
        path.client = httpx.AsyncClient(timeout=10.0, limits=httpx.Limits(max_connections=64))
        await path.model.start()
        try:
            yield
        finally:
            await path.client.aclose()

    return Starlette(routes=[Route(sm.ROUTE, path.predict, methods=["POST"])], lifespan=lifespan)
