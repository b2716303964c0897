"""bench_pipeline.py's frontends-ab section: do 2 front ends on 2 cores serve more than 1 (issue 28)?

  python bench/bench_pipeline.py frontends-ab --layers 0 --duration 10 --warm 3 --repeats 6 --concurrency 32

Each repeat starts the service once per layout (1 front end + the model process, 2 front ends + the
model process; `--layouts 0,1,2` adds the one-process service), in alternating order (A B, then B A),
so drift in the shared machine's load falls on both layouts alike. Tracing off, batch 8 / 5 ms, one
intra-op thread. The load is bench/raw_load.py, a closed loop of pre-built keep-alive requests that
costs the client tens of µs per request (the pipeline's httpx load generator costs 3-4 ms, more than
the service, and would set the throughput itself). Booked over the measured window only: completed
requests/s, client p50/p99, the service's CPU per request (front ends + model process, from /proc),
the client's CPU per request, and the 1-minute load average at the window's end. Per repeat: the
ratio of the 2-front-end throughput to the 1-front-end one; the verdict is their median and how many
repeats 2 front ends won.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from bench.pipeline_modes import base_config, busiest_cores, busiest_s, cpu_split_s, layers_text

RAW_LOAD = Path(__file__).with_name("raw_load.py")


def measure_layout(args, frontends: int, seed: int) -> dict:
    """Start the service with `frontends` front ends, saturate it with raw_load, book the window."""
    return measure_raw(args, base_config(args, tracing=False, frontends=frontends), seed)


def measure_raw(args, cfg, seed: int) -> dict:
    """Start the service (`cfg`: ServiceConfig), saturate it with raw_load (args.concurrency
    connections, args.warm s, then args.duration s booked), and book the window: raw_load's figures
    plus the service's CPU per request (front ends, model process) and its cores busy."""
    from reference_pipeline.runner import Child

    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        service = ["reference_pipeline.service", "--config-json", cfg.to_json()]
        child = Child("service", [*service, "--trace-out", str(tmp / "t.jsonl")], tmp / "service.log")
        try:
            port = child.wait_ready(600)
            command = [
                sys.executable, str(RAW_LOAD), "--port", str(port), "--concurrency", str(args.concurrency),
                "--warm", str(args.warm), "--duration", str(args.duration), "--seed", str(seed),
                "--rate", str(getattr(args, "rps", 0.0) or 0.0),
            ]  # fmt: skip
            load = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
            if load.stdout.readline().strip() != "GO":
                raise SystemExit(f"raw_load did not start (exit {load.wait()})")
            before, threads_before = cpu_split_s(child.proc.pid), busiest_s(child.proc.pid)
            result = json.loads(load.stdout.readline())
            after, threads_after = cpu_split_s(child.proc.pid), busiest_s(child.proc.pid)
            load.wait()
        finally:
            code = child.stop(grace_s=60)
        if code not in (0, -15):
            raise SystemExit(f"service exited with {code}:\n{child.tail()}")
    completed = max(result["completed"], 1)
    model_s, front_s = after[0] - before[0], after[1] - before[1]  # the model process, its front ends
    result["service_cpu_ms_per_req"] = 1000 * (model_s + front_s) / completed
    result["front_cpu_ms_per_req"] = 1000 * front_s / completed
    result["model_cpu_ms_per_req"] = 1000 * model_s / completed
    result["service_cores"] = (model_s + front_s) / result["wall_s"]
    result["client_cpu_us_per_req"] = 1e6 * result["cpu_s"] / completed
    result["client_cores"] = result["cpu_s"] / result["wall_s"]
    result["load"] = os.getloadavg()[0]
    result["model_thread_cores"], result["front_max_cores"] = busiest_cores(
        threads_before, threads_after, result["wall_s"]
    )
    return result


def layout_name(frontends: int) -> str:
    if frontends == 0:
        return "one process"
    return f"{frontends} front end{'s' * (frontends > 1)} + model process"


def bench_frontends_ab(args, machine: str) -> None:
    layouts = [int(n) for n in args.layouts.split(",")]
    print(
        f"front ends A/B (raw closed loop, {args.concurrency} connections, {args.duration:g} s booked after "
        f"{args.warm:g} s warm-up, tracing off, {layers_text(args)}, batch 8/5 ms, layouts alternating) — "
        f"{machine}\n"
    )
    print(
        "| repeat | layout | completed req/s | client p50 ms | client p99 ms | service CPU ms/req (front "
        "ends + model process) | service cores busy | client CPU µs/req | load (1 min) |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    rps: dict[int, list[float]] = {n: [] for n in layouts}
    for repeat in range(args.repeats):
        order = layouts if repeat % 2 == 0 else layouts[::-1]
        for frontends in order:
            r = measure_layout(args, frontends, seed=repeat + 1)
            rps[frontends].append(r["throughput_rps"])
            print(
                f"| {repeat + 1} | {layout_name(frontends)} | {r['throughput_rps']} | {r['p50_ms']} | "
                f"{r['p99_ms']} | {r['service_cpu_ms_per_req']:.3f} ({r['front_cpu_ms_per_req']:.3f} + "
                f"{r['model_cpu_ms_per_req']:.3f}) | {r['service_cores']:.2f} | "
                f"{r['client_cpu_us_per_req']:.0f} | {r['load']:.1f} |",
                flush=True,
            )
    if 1 in rps and 2 in rps:
        ratios = [two / one for one, two in zip(rps[1], rps[2], strict=True) if one]
        wins = sum(two > one for one, two in zip(rps[1], rps[2], strict=True))
        print(
            f"\n2 front ends / 1 front end, per repeat: {', '.join(f'{r:.2f}' for r in ratios)}; median "
            f"{statistics.median(ratios):.2f}×; 2 front ends served more in {wins} of {len(ratios)} repeats"
        )
    for n in layouts:
        print(f"{layout_name(n)}: median {statistics.median(rps[n]):.1f} req/s ({len(rps[n])} runs)")
    print(f"load average after: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")


def add_arguments(parser) -> None:
    parser.add_argument("--layouts", default="1,2", help="frontends-ab: front-end counts (0: one process)")


SECTIONS = {"frontends-ab": bench_frontends_ab}
