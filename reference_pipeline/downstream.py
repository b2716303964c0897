"""The downstream enrichment service: `POST /enrich`, its own process, traced as tailscope-downstream.

It assigns a customer segment from a small in-memory table keyed by a hash of the entity id (real,
cheap work). With `--delay heavy-tail` (the slow-downstream scenario) each call also sleeps a
log-normal delay with a Pareto tail. That sleep is a configured delay: it stands in for a dependency
that is slow for reasons outside this system (a remote service under its own load), which is exactly
what the scenario is about. The only other configured delay is the remote feature store's simulated
network round trip on a cache miss (cold-cache and key-expiry, see features.py); every other stage's
time is spent doing its work.

Run: `python -m reference_pipeline.downstream [--delay none|heavy-tail] [--trace-out FILE]`; prints
`LISTENING <port>` when ready, like the service.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import random
from pathlib import Path

import orjson
from opentelemetry import propagate
from opentelemetry.trace import SpanKind
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from reference_pipeline import span_model as sm
from reference_pipeline.serving import bind_free_port, run_until_stopped, serve
from reference_pipeline.tracing import make_provider

SEGMENTS = ("new", "casual", "regular", "loyal", "vip", "dormant", "at-risk", "business")


def heavy_tail_delay_s(rng: random.Random) -> float:
    """Log-normal body (median ~15 ms) plus a Pareto tail on 5 % of calls: p99 of a few hundred ms,
    rare calls up to 1.5 s."""
    base = rng.lognormvariate(-4.2, 0.8)  # exp(-4.2) ≈ 15 ms
    if rng.random() < 0.05:
        base += min(1.5, 0.1 * rng.paretovariate(1.2))
    return base


def build_app(tracer, delay: str, seed: int = 17) -> Starlette:
    rng = random.Random(seed)

    async def enrich(request: Request) -> Response:
        ctx = propagate.extract(request.headers)
        with tracer.start_as_current_span(
            f"POST {sm.DOWNSTREAM_ROUTE}",
            context=ctx,
            kind=SpanKind.SERVER,
            attributes={"http.request.method": "POST", "http.route": sm.DOWNSTREAM_ROUTE},
        ) as span:
            payload = orjson.loads(await request.body())
            digest = hashlib.blake2b(str(payload.get("entity_id", "")).encode(), digest_size=4).digest()
            segment = SEGMENTS[int.from_bytes(digest, "big") % len(SEGMENTS)]
            if delay == "heavy-tail":
                wait = heavy_tail_delay_s(rng)
                span.set_attribute("tailscope.injected_delay_ms", round(wait * 1000, 3))
                await asyncio.sleep(wait)
            span.set_attribute("http.response.status_code", 200)
            return Response(orjson.dumps({"segment": segment}), media_type="application/json")

    return Starlette(routes=[Route(sm.DOWNSTREAM_ROUTE, enrich, methods=["POST"])])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m reference_pipeline.downstream")
    parser.add_argument("--delay", choices=("none", "heavy-tail"), default="none")
    parser.add_argument("--trace-out", type=Path)
    parser.add_argument("--otlp-endpoint")
    parser.add_argument("--scenario", default="steady")
    parser.add_argument(
        "--sample-rate",
        type=float,
        default=1.0,
        help="head sampling by trace id, the front end's draw (a sampled run: without it every call's "
        "span is exported and the calls of requests the front end dropped become requests of their own)",
    )
    args = parser.parse_args(argv)
    provider = make_provider(
        sm.DOWNSTREAM_SERVICE_NAME,
        {"tailscope.scenario": args.scenario},
        args.trace_out,
        args.otlp_endpoint,
        sample_rate=args.sample_rate,
    )
    try:
        serve(build_app(provider.get_tracer("tailscope.reference_pipeline"), args.delay), bind_free_port())
    finally:
        provider.shutdown()
    return 0


if __name__ == "__main__":
    run_until_stopped(main)
