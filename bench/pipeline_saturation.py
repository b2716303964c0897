"""bench_pipeline.py's saturation section: issue 28's GPU figures with the scaled-out front end.

  python bench/bench_pipeline.py saturation --device cuda --dtype bf16 --executor cuda-graphs \\
      --frontends auto --policies 1:0,8:2,32:5 --concurrency 256 --duration 8 --warm 2 --ab-repeats 2

1. Saturated throughput per batch policy, tracing off: the service with --frontends front ends
   (auto: the cores but two, one for the model process and one for the load) before one model
   process, driven by bench/raw_load.py (pre-built keep-alive requests, tens of µs of client CPU per
   request, so neither the client nor its spans set the ceiling). Dynamic batching's gain is the best
   policy's throughput over batch 1's.
2. Light-mode tracing at saturation, at the best policy: runs with tracing off and in light mode,
   alternating (off, light, light, off, ...), --ab-repeats pairs; the throughput lost and the CPU per
   request added, per pair and their median.
With --rps R the load is paced at R requests/s (bench/raw_load.py --rate) instead of a closed loop:
below the capacity of both modes, the off/light pairs then compare CPU per request at one
throughput, which a saturated run on a shared machine cannot (its throughput, and with it the CPU
per request, is the scheduler's share).
Each row also gives the service's CPU per request (front ends + model process), its cores busy and
the client's, so a ceiling can be told apart: front ends (their cores), the model process (one core),
the GPU, or the client (one core).
"""

from __future__ import annotations

import os
import statistics

from bench.pipeline_frontends import measure_raw
from bench.pipeline_modes import base_config, layers_text

EXECUTOR_FLAGS = {
    "eager": dict(eager=True),
    "torchscript": dict(torchscript=True),
    "compile": dict(compile=True),
    "cuda-graphs": dict(cuda_graphs=True),
}


def frontend_count(text: str) -> int:
    """--frontends for this section: a count, or auto (the cores but two, at least 1)."""
    return max(1, (os.cpu_count() or 2) - 2) if text == "auto" else int(text)


def _policies(text: str) -> list[tuple[int, float]]:
    from reference_pipeline.sweep import parse_batch_policies

    return parse_batch_policies(text)


def _config(args, max_batch: int, max_wait_ms: float, tracing: str):
    traced = dict(tracing=False) if tracing == "off" else dict(tracing_mode=tracing)
    return base_config(
        args,
        device=args.device,
        dtype=args.dtype,
        max_batch=max_batch,
        max_wait_ms=max_wait_ms,
        frontends=frontend_count(args.frontends),
        workers=args.workers,
        **EXECUTOR_FLAGS[args.executor],
        **traced,
    )


def _row(label: str, tracing: str, r: dict) -> str:
    return (
        f"| {label} | {tracing} | {r['throughput_rps']} | {r['p50_ms']} | {r['p99_ms']} | "
        f"{r['service_cpu_ms_per_req']:.3f} ({r['front_cpu_ms_per_req']:.3f} + "
        f"{r['model_cpu_ms_per_req']:.3f}) | "
        f"{r['service_cores']:.2f} | {r['model_thread_cores']:.2f} | {r['front_max_cores']:.2f} | "
        f"{r['client_cores']:.2f} | {r['load']:.1f} |"
    )


HEADER = (
    "| batch policy | tracing | completed req/s | client p50 ms | client p99 ms | service CPU ms/req "
    "(front ends + model process) | service cores busy | model process's busiest thread, cores | "
    "busiest front end, cores | client cores busy | load (1 min) |\n"
    "|---|---|---|---|---|---|---|---|---|---|---|"
)


def bench_saturation(args, machine: str) -> None:
    policies = _policies(args.policies)
    frontends = frontend_count(args.frontends)
    print(
        f"saturation ({args.device}, {args.dtype}, {args.executor}, {frontends} front ends + model "
        f"process, raw closed loop of {args.concurrency} connections, {args.duration:g} s booked after "
        f"{args.warm:g} s, "
        f"steady, no downstream, {layers_text(args)}) — {machine}\n"
    )
    print(HEADER)
    off: dict[tuple[int, float], float] = {}
    for seed, (max_batch, wait) in enumerate(policies, start=1):
        r = measure_raw(args, _config(args, max_batch, wait, "off"), seed)
        off[(max_batch, wait)] = r["throughput_rps"]
        print(_row(f"{max_batch} / {wait:g} ms", "off", r), flush=True)
    best = max(off, key=off.get)
    if one := off.get((1, 0.0)):
        print(
            f"\ndynamic batching at saturation: best policy {best[0]} / {best[1]:g} ms, {off[best]:.1f} "
            f"req/s against {one:.1f} at batch 1: **{off[best] / one:.2f}×**"
        )
    if args.ab_repeats <= 0:
        return
    print(f"\nlight-mode tracing at saturation, policy {best[0]} / {best[1]:g} ms, alternating\n")
    print(HEADER)
    lost, added = [], []
    for repeat in range(args.ab_repeats):
        pair = {}
        for tracing in ("off", "light") if repeat % 2 == 0 else ("light", "off"):
            pair[tracing] = r = measure_raw(args, _config(args, *best, tracing), 100 + repeat)
            print(_row(f"{best[0]} / {best[1]:g} ms (pair {repeat + 1})", tracing, r), flush=True)
        lost.append(100 * (1 - pair["light"]["throughput_rps"] / pair["off"]["throughput_rps"]))
        added.append(
            100 * (pair["light"]["service_cpu_ms_per_req"] / pair["off"]["service_cpu_ms_per_req"] - 1)
        )
    print(
        f"\nlight mode vs off, per pair: throughput lost {', '.join(f'{x:+.1f} %' for x in lost)} "
        f"(median **{statistics.median(lost):+.1f} %**); service CPU per request added "
        f"{', '.join(f'{x:+.1f} %' for x in added)} (median **{statistics.median(added):+.1f} %**)"
    )
    print(f"load average after: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")


def add_arguments(parser) -> None:
    executors = tuple(EXECUTOR_FLAGS)
    parser.add_argument("--executor", default="torchscript", choices=executors, help="saturation: executor")
    parser.add_argument("--frontends", default="auto", help="saturation: front ends (auto: cores but two)")
    parser.add_argument("--policies", default="1:0,8:2,32:5", help="saturation: max_batch:max_wait_ms list")
    parser.add_argument("--ab-repeats", type=int, default=2, help="saturation: off/light pairs at the best")


SECTIONS = {"saturation": bench_saturation}
