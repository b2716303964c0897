"""The inference service: `POST /v1/predict` on Starlette + uvicorn, every stage its own span (or,
in light mode, one span per request carrying the stage times; see reference_pipeline.request_path).

Run as a process: `python -m reference_pipeline.service --config-json JSON [--trace-out FILE]
[--otlp-endpoint URL]`. It binds 127.0.0.1 on a free port, prints `LISTENING <port>` once it is ready
(model built and, unless the scenario says otherwise, warmed; under `lazy_load`, the cold-start
scenario, as soon as the socket is bound, and the first batch builds and loads the model), serves
until SIGTERM/SIGINT, then drains the batcher and flushes its spans.

Two layouts (ServiceConfig.frontends): 0, one process doing everything (`Pipeline`: the request path
of reference_pipeline.request_path over the model host of reference_pipeline.model_host); N >= 1,
this process is the model process and N front-end processes serve HTTP and everything around the
model, handing token ids and the trace context over (reference_pipeline.frontends).
"""

from __future__ import annotations

import argparse
import gc
import tempfile
from pathlib import Path

import torch
from opentelemetry import trace

from reference_pipeline.model_host import LocalModel, ModelHost
from reference_pipeline.request_path import BadRequest, RequestPath, build_app, validate
from reference_pipeline.scenarios import ServiceConfig
from reference_pipeline.serving import bind_free_port, run_until_stopped, serve
from reference_pipeline.tracing import request_tracer, sampler_of, traced_provider
from reference_pipeline.tracing_switch import TracingSwitch
from tailscope import instrument as ts
from tailscope.instrument.gc_pauses import GcPauseLog

__all__ = ["BadRequest", "Pipeline", "build_app", "main", "validate"]


class Pipeline(RequestPath):
    """The one-process service: the request path over a model host in the same process."""

    def __init__(self, cfg: ServiceConfig, tracer: trace.Tracer, gc_log: GcPauseLog, workdir: Path) -> None:
        self.host = ModelHost(cfg, workdir)
        super().__init__(
            cfg, tracer, gc_log, workdir, LocalModel(self.host), self.host.weights, self.host.weights_dir
        )

    def model_capacity_rps(self) -> float:
        return self.host.capacity_rps()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m reference_pipeline.service")
    parser.add_argument("--config-json", default="{}")
    parser.add_argument("--trace-out", type=Path)
    parser.add_argument("--otlp-endpoint")
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args(argv)
    cfg = ServiceConfig.from_json(args.config_json)
    gc_log = ts.install()
    gpu = (
        torch.cuda.get_device_name() if cfg.device.startswith("cuda") and torch.cuda.is_available() else None
    )
    if cfg.frontends > 0:
        from reference_pipeline.frontends import run_model_process

        return run_model_process(cfg, args, gc_log, gpu)
    with tempfile.TemporaryDirectory(prefix="tailscope-service-") as tmp:
        provider = None
        try:
            # the resource names the weights, known once the model is built: build, then trace
            pipeline = Pipeline(cfg, trace.NoOpTracer(), gc_log, Path(tmp))
            if cfg.tracing:  # off only to measure what tracing costs (bench_pipeline.py)
                resource = cfg.resource_attributes(pipeline.weights, gpu, torch.__version__)
                provider = traced_provider(cfg, resource, args)
                pipeline.tracer = request_tracer(provider)
                pipeline.sampler = sampler_of(provider)
                if cfg.tracing_ab_report:
                    pipeline.switch = TracingSwitch(pipeline, pipeline.tracer, provider.force_flush, provider)
                    pipeline.switch.install()
            if cfg.gc_freeze:  # what a tuned service does once ready; gc-pressure plants the opposite
                gc.collect()
                gc.freeze()
            if not cfg.gc_collect:  # no collector at all: gc-pressure's pair without its pauses
                gc.collect()
                gc.disable()
            capacity = pipeline.model_capacity_rps() if cfg.announce_capacity else 0.0
            announce = f"capacity_rps={capacity:.1f}" if capacity else ""
            serve(build_app(pipeline), bind_free_port(port=args.port), announce)
            pipeline.close()
            if pipeline.switch is not None:
                pipeline.switch.report(Path(cfg.tracing_ab_report))
        finally:
            ts.uninstall()
            if provider is not None:
                provider.shutdown()
    return 0


if __name__ == "__main__":
    run_until_stopped(main)
