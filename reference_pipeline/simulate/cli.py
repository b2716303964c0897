"""`tailscope pipeline simulate`: write a simulated run of the reference pipeline to a trace file.

  tailscope pipeline simulate --scenario burst --requests 20000 --out burst.jsonl [--db tailscope.duckdb]
  tailscope pipeline simulate --topology gateway --scenario gc-pressure --no-gc-events --out gc.jsonl
  tailscope pipeline simulate --family bff-fanout --scenario timeout-retry --seed 1 --out retry.jsonl

`--topology gateway` renders the same simulated mechanisms as another service's traces (a held-out
family for accuracy checks, see reference_pipeline/simulate/gateway.py).

Imports only the standard library and the simulator's config at module level, so --help stays fast.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from reference_pipeline.simulate.blind import MODULES as BLIND_FAMILIES
from reference_pipeline.simulate.config import FORMATS, HARDWARE, NAMINGS, SCENARIOS, TOPOLOGIES


def _scenario(text: str) -> str:
    """A pipeline scenario (or a+b); a blind family's scenario names are checked once --family is known."""
    parts = text.split("+")
    if 1 <= len(parts) <= 2 and all(p in SCENARIOS for p in parts):
        return text
    from reference_pipeline.simulate.blind import scenarios  # only for a name that is not the pipeline's

    if any(text in scenarios(family) for family in BLIND_FAMILIES):
        return text  # run_simulate checks it against --family
    raise argparse.ArgumentTypeError(f"unknown scenario {text!r}; one of {', '.join(SCENARIOS)}, or a+b")


def add_simulate_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--scenario", type=_scenario, default="steady",
                        help=f"planted cause, one of {', '.join(SCENARIOS)}, or two joined by '+' "
                        "(default steady)")
    parser.add_argument("--requests", type=int, default=4000, help="requests to simulate (default 4000)")
    parser.add_argument("--out", type=Path, required=True,
                        help="trace file to write (.gz / .zst suffix: compressed)")
    parser.add_argument("--seed", type=int, default=0, help="random seed: same seed, same bytes (default 0)")
    parser.add_argument("--rps", type=float, help="mean arrival rate (default: half the capacity)")
    parser.add_argument("--instances", "--workers", dest="workers", type=int, metavar="N",
                        help="server instances (processes), one model worker each; resource attribute "
                        "tailscope.instances (default 3)")
    parser.add_argument("--max-batch", type=int, help="dynamic batcher: largest batch (default 8)")
    parser.add_argument("--max-wait-ms", type=float, help="dynamic batcher: longest wait (default 5)")
    parser.add_argument("--hardware", choices=tuple(HARDWARE), default="cpu-fp32",
                        help="forward-pass cost and device attributes (default cpu-fp32)")
    parser.add_argument("--naming", choices=NAMINGS, default="reference",
                        help="reference: span_model's names; alt: a foreign service's names, no tailscope.*")
    parser.add_argument("--topology", choices=TOPOLOGIES, default="pipeline",
                        help="pipeline: the reference pipeline's span tree; gateway: the same mechanisms "
                        "behind another shape of service (API gateway root, gRPC call to a model server "
                        "whose span holds the work, deeper nesting, no queue or lock span, host + pid "
                        "instances, GC as 'GC pause' events, no tailscope.* attributes; --naming is "
                        "ignored); region, readthrough, queue-worker: three more shapes (see their "
                        "modules in reference_pipeline/simulate/) (default pipeline)")
    parser.add_argument("--family", choices=tuple(BLIND_FAMILIES),
                        help="a blind family of issue 25 instead (reference_pipeline/simulate/blind.py): "
                        "its own scenarios (e.g. edge-gateway: gateway-gc), --seed picks load, instances, GC "
                        "reporting and format; only --scenario, --requests, --seed, --format, --out, --db, "
                        "--run-label and --json apply; prints the planted causes with --json")
    parser.add_argument("--no-gc-events", dest="gc_events", action="store_false",
                        help="do not report GC pauses as span events (timing is all that shows them)")
    parser.add_argument("--format", choices=(*FORMATS, "zipkin"), default=None,
                        help="otlp-json: Collector file-exporter lines (default); jaeger: Jaeger UI JSON; "
                        "zipkin: a Zipkin v2 span array (--family only; a family's default: its seed's)")
    parser.add_argument("--run-label", metavar="LABEL",
                        help="run label: recorded as tailscope.run.label, and used with --db "
                             "(default: the file's name)")
    parser.add_argument("--db", metavar="FILE", help="also load the file into this store")
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")


def _simulate(args: argparse.Namespace) -> dict:
    if args.family:
        from reference_pipeline.simulate.blind import scenarios, write_run

        if args.scenario not in scenarios(args.family):
            raise ValueError(f"unknown {args.family} scenario {args.scenario!r}; one of "
                             f"{', '.join(scenarios(args.family))}")
        return write_run(args.out, args.family, args.scenario, args.requests, args.seed, fmt=args.format)
    for part in args.scenario.split("+"):
        if part not in SCENARIOS:
            raise ValueError(f"unknown scenario {args.scenario!r}; one of {', '.join(SCENARIOS)}, or a+b")
    if args.format == "zipkin":
        raise ValueError("--format zipkin is written for the blind families (--family) only")
    from reference_pipeline.simulate.api import simulate_to_file

    return simulate_to_file(
        args.out, args.scenario, args.requests, args.seed, naming=args.naming, fmt=args.format or "otlp-json",
        run_label=args.run_label, hardware=args.hardware, rps=args.rps, workers=args.workers,
        max_batch=args.max_batch, max_wait_ms=args.max_wait_ms, topology=args.topology,
        gc_events=args.gc_events,
    )


def run_simulate(args: argparse.Namespace) -> int:
    try:
        summary = _simulate(args)
    except ValueError as error:
        print(f"tailscope pipeline simulate: {error}", file=sys.stderr)
        return 2
    if args.db:
        from ingest.loader import default_run_label, load_paths

        label = args.run_label or default_run_label([args.out])
        loaded = load_paths([args.out], args.db, label)
        summary["loaded"] = {"db": str(args.db), "run": label, "traces": loaded.traces,
                             "errors": [f.error for f in loaded.failed]}
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        if args.family:
            causes = ", ".join(c["pattern"] for c in summary["truth"]) or "none (healthy)"
            print(f"{args.family} {summary['scenario']}: {summary['requests']} requests, {summary['spans']} "
                  f"spans ({summary['format']}), planted: {causes} → {summary['out']}")
        else:
            print(f"{summary['scenario']}: {summary['requests']} requests, {summary['spans']} spans in "
                  f"{summary['seconds']} s ({summary['spans_per_second']} spans/s), client p50 "
                  f"{summary['p50_ms']} ms, p99 {summary['p99_ms']} ms → {summary['out']}")
        if "loaded" in summary:
            info = summary["loaded"]
            print(f"  loaded into {info['db']} as run {info['run']!r}: {info['traces']} traces"
                  + (f" (errors: {info['errors']})" if info["errors"] else ""))
    return 1 if summary.get("loaded", {}).get("errors") else 0
