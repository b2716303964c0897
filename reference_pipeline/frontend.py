"""One front-end process of the scaled-out service (reference_pipeline.frontends starts them).

It serves `POST /v1/predict` on the listening socket it inherits (`--listen-fd`), runs everything of
the request path but the model (reference_pipeline.request_path), and reaches the model process
over the socket it inherits as `--model-fd` (reference_pipeline.handoff). PyTorch is not imported
here. It traces to its own file (`--trace-out`), which the model process appends to the run's file
once the front end has exited. When the model process goes away, the front end stops itself.
"""

from __future__ import annotations

import argparse
import gc
import os
import signal
import socket
import tempfile
from pathlib import Path

from opentelemetry import trace

from reference_pipeline.handoff import RemoteModel
from reference_pipeline.request_path import RequestPath, build_app
from reference_pipeline.scenarios import ServiceConfig
from reference_pipeline.serving import run_until_stopped, serve
from reference_pipeline.tracing import request_tracer, sampler_of, traced_provider
from tailscope import instrument as ts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m reference_pipeline.frontend")
    parser.add_argument("--config-json", required=True)
    parser.add_argument("--index", type=int, required=True)
    parser.add_argument("--listen-fd", type=int, required=True)
    parser.add_argument("--model-fd", type=int, required=True)
    parser.add_argument("--weights", required=True)
    parser.add_argument("--weights-dir", type=Path)
    parser.add_argument("--gpu-name")
    parser.add_argument("--torch-version")
    parser.add_argument("--trace-out", type=Path)
    parser.add_argument("--otlp-endpoint")
    args = parser.parse_args(argv)
    cfg = ServiceConfig.from_json(args.config_json)
    gc_log = ts.install()
    listen = socket.socket(fileno=args.listen_fd)
    # the model process gone: stop serving (uvicorn drains and exits on SIGTERM)
    model = RemoteModel(
        socket.socket(fileno=args.model_fd), on_gone=lambda: os.kill(os.getpid(), signal.SIGTERM)
    )
    with tempfile.TemporaryDirectory(prefix=f"tailscope-frontend{args.index}-") as tmp:
        provider = None
        try:
            path = RequestPath(
                cfg, trace.NoOpTracer(), gc_log, Path(tmp), model, args.weights, args.weights_dir
            )
            if cfg.tracing:
                resource = cfg.resource_attributes(args.weights, args.gpu_name, args.torch_version)
                resource["tailscope.frontend.index"] = args.index
                provider = traced_provider(cfg, resource, args, on_late_keep=model.kept_late)
                path.tracer = request_tracer(provider)
                path.sampler = sampler_of(provider)
            if cfg.gc_freeze:
                gc.collect()
                gc.freeze()
            if not cfg.gc_collect:  # no collector at all: gc-pressure's pair without its pauses
                gc.collect()
                gc.disable()
            serve(build_app(path), listen)
            path.close()
        finally:
            ts.uninstall()
            if provider is not None:
                provider.shutdown()
    return 0


if __name__ == "__main__":
    run_until_stopped(main)
