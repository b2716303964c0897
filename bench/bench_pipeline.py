"""Reference pipeline figures for bench/RESULTS.md.

  python bench/bench_pipeline.py forward   [--device cpu] [--seq 64] [--threads N] [--executors E,E]
  python bench/bench_pipeline.py batching  [--duration 10] [--concurrency 32]
  python bench/bench_pipeline.py tracing   [--duration 10] [--concurrency 32] [--repeats 5]
  python bench/bench_pipeline.py tracing-ab [--duration 60] [--concurrency 32] [--period 4] [--repeats 2]
  python bench/bench_pipeline.py spans     [--requests 3000]
  python bench/bench_pipeline.py modes     [--layers 1] [--duration 10] [--warm 3] [--repeats 3]
  python bench/bench_pipeline.py tracing-ab --tracing-mode light [--layers 1]
  python bench/bench_pipeline.py waterfall [--rps 8] [--duration 15] [--repeats 3] [--layers 1]
  python bench/bench_pipeline.py both      [--rps 8] [--duration 15] [--repeats 2] [--layers 1]
  python bench/bench_pipeline.py frontends [--layers 0] [--duration 10] [--repeats 2]
  python bench/bench_pipeline.py handoff   [--requests 5000]
  python bench/bench_pipeline.py model-side [--frontends 4] [--requests 20000] [--policies 1:0,32:5]
  python bench/bench_pipeline.py frontends-ab [--layers 0] [--duration 10] [--repeats 6] [--layouts 1,2]
  python bench/bench_pipeline.py saturation --device cuda --dtype bf16 --executor cuda-graphs
      [--frontends auto] [--policies 1:0,8:2,32:5] [--concurrency 256] [--ab-repeats 2]

forward: model.forward p50/p99 (ms) per executor (torchscript, eager), batch size (1, 8, 32) and
  dtype (fp32, bf16, int8) at a fixed sequence length, timed around ModelRunner.run (collation,
  forward, copy back), after warm-up. The CPU column is the calling thread's CPU time: with one
  intra-op thread (--threads 1) that is the compute itself, which stays meaningful on a machine
  shared with other work.
batching: the whole service (steady scenario, no downstream) saturated by a closed loop of
  --concurrency clients (each sends its next request when the last answers; --rps N instead: open-loop
  Poisson load, which must exceed capacity), with max batch 1 and with dynamic batching (8 requests,
  5 ms): completed requests per second. The closed loop is the throughput measure: an open loop above
  capacity grows a backlog of connections whose client work, on the same 2 cores, takes CPU from the
  server and makes its throughput swing by ±10 % from run to run.
tracing: the same saturated service with the OTel SDK exporting every span to a file, and with a
  no-op tracer; the overhead is the relative loss of throughput (and the service's CPU per request).
  Runs alternate to spread drift.
tracing-ab: one saturated service process whose tracer is swapped between the OTel SDK and a no-op
  tracer every --period seconds (reference_pipeline.tracing_switch); throughput and CPU per request
  are booked per mode inside the process, so the run-to-run variance of separate processes cancels.
spans: CPU per request of the tracing alone (a steady request's stages, no service around them), in
  each tracing mode. modes, waterfall, frontends, handoff, frontends-ab: issue 28's figures
  (bench/pipeline_modes.py, bench/pipeline_frontends.py); saturation: the GPU figures with the
  scaled-out front end, batch 1 against the best policy and light tracing's cost
  (bench/pipeline_saturation.py).
Each section prints a Markdown table and the machine it ran on.
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import pipeline_both, pipeline_frontends, pipeline_model_side, pipeline_modes, pipeline_saturation
from bench.machine_info import cpu_seconds


def machine(threads: str | None = None) -> str:
    import torch

    device = torch.cuda.get_device_name() if torch.cuda.is_available() else "no GPU"
    threads = threads or f"{torch.get_num_threads()} intra-op threads"
    load = f", load average {os.getloadavg()[0]:.1f}" if hasattr(os, "getloadavg") else ""
    return (
        f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
        f"torch {torch.__version__} ({threads}), {device}{load}"
    )


SERVICE_THREADS = "service: intra-op threads = half the cores"


def bench_forward(args) -> None:
    import torch

    from reference_pipeline.model import N_FEATURES, ModelRunner, build_classifier

    if args.threads:
        torch.set_num_threads(args.threads)
    print(f"model.forward, sequence length {args.seq}, device {args.device} — {machine()}\n")
    print("| executor | dtype | batch | p50 ms | p99 ms | ms per request (p50) | CPU ms (p50) | iterations |")
    print("|---|---|---|---|---|---|---|---|")
    cells = [(e, d) for e in args.executors.split(",") for d in args.dtypes.split(",")]
    for executor, dtype in cells:
        runner = ModelRunner(
            build_classifier(layers=args.layers)[0],
            device=args.device,
            dtype=dtype,
            max_batch=32,
            script=executor == "torchscript",
            cuda_graphs=executor == "cuda-graphs",
            compile=executor == "compile",
        )
        for batch in (1, 8, 32):
            ids = [[2, *range(1000, 1000 + args.seq - 2), 3]] * batch
            features = [[0.1] * N_FEATURES] * batch
            for _ in range(3):
                runner.run(ids, features)
            times, cpu = [], []
            started = time.perf_counter()
            while len(times) < 200 and (len(times) < 10 or time.perf_counter() - started < args.budget):
                t0, c0 = time.perf_counter(), time.thread_time()
                runner.run(ids, features)
                times.append((time.perf_counter() - t0) * 1000)
                cpu.append((time.thread_time() - c0) * 1000)
            times.sort()
            p50, p99 = statistics.median(times), times[min(len(times) - 1, int(0.99 * len(times)))]
            print(
                f"| {executor} | {dtype} | {batch} | {p50:.1f} | {p99:.1f} | {p50 / batch:.2f} | "
                f"{statistics.median(cpu):.1f} | {len(times)} |",
                flush=True,
            )


def _steady_run(args, **options) -> dict:
    """One saturated steady run without the downstream, under the load the arguments describe."""
    from reference_pipeline.runner import RunOptions, run_pipeline

    with tempfile.TemporaryDirectory() as tmp:
        return run_pipeline(
            RunOptions(
                scenario="steady",
                device=args.device,
                dtype=args.dtype,
                duration_s=args.duration,
                rps=args.rps or 60.0,
                concurrency=0 if args.rps else args.concurrency,
                downstream=False,
                eager=args.eager,
                cuda_graphs=args.cuda_graphs,
                workers=args.workers,
                load_processes=args.load_processes,
                out=Path(tmp) / "t.jsonl",
                tracing_mode=args.tracing_mode,
                sample_rate=args.sample_rate,
                keep_slower_than_ms=args.keep_slower_than_ms,
                model_layers=args.layers,
                **options,
            )
        )


def _saturated(max_batch: int, max_wait_ms: float, tracing: bool, args) -> dict:
    """One saturated run; adds the service processes' CPU ms per completed request (`cpu_ms_per_req`),
    read from the reaped children's rusage (the only children: the downstream is off), and the load
    generator's own CPU: ms per request and the cores it kept busy (`client_core_share`; near 1.0 per
    load process, the load generator, not the service, sets the throughput: add --load-processes)."""
    children_before = cpu_seconds(resource.RUSAGE_CHILDREN)
    summary = _steady_run(args, max_batch=max_batch, max_wait_ms=max_wait_ms, tracing=tracing)
    completed = max(summary["requests"] - summary["errors"], 1)
    client_s = summary["loadgen_cpu_ms_per_request"] * summary["requests"] / 1000
    # reaped children: the service, and the load generator's processes when it has several
    service_s = cpu_seconds(resource.RUSAGE_CHILDREN) - children_before
    if args.load_processes > 1:
        service_s -= client_s
    summary["cpu_ms_per_req"] = round(1000 * service_s / completed, 2)
    summary["client_cpu_ms_per_req"] = round(1000 * client_s / completed, 2)
    summary["client_core_share"] = round(
        summary["client_cpu_ms_per_req"] * summary["throughput_rps"] / 1000, 2
    )
    return summary


def _load_text(args) -> str:
    if args.rps:
        return f"open loop, {args.rps:g} req/s offered for {args.duration:g} s"
    return f"closed loop, {args.concurrency} clients for {args.duration:g} s"


def bench_batching(args) -> None:
    print(
        f"service throughput at saturation ({_load_text(args)}, "
        f"steady, no downstream) — {machine(SERVICE_THREADS)}\n"
    )
    print(
        "| policy | completed req/s | client p50 ms | client p99 ms | service CPU ms/req | "
        "load generator CPU ms/req (cores busy) |"
    )
    print("|---|---|---|---|---|---|")
    for max_batch, wait in ((1, 0.0), (8, 5.0)):
        summary = _saturated(max_batch, wait, True, args)
        print(
            f"| max batch {max_batch}, wait {wait:g} ms | {summary['throughput_rps']} | "
            f"{summary['p50_ms']} | {summary['p99_ms']} | {summary['cpu_ms_per_req']} | "
            f"{summary['client_cpu_ms_per_req']} ({summary['client_core_share']:.2f}) |",
            flush=True,
        )


def bench_tracing(args) -> None:
    print(
        f"tracing overhead at saturation ({_load_text(args)}, batch 8/5 ms, "
        f"steady, no downstream) — {machine(SERVICE_THREADS)}\n"
    )
    rps: dict[bool, list[float]] = {True: [], False: []}
    cpu: dict[bool, list[float]] = {True: [], False: []}
    for _ in range(args.repeats):
        for tracing in (False, True):
            summary = _saturated(8, 5.0, tracing, args)
            rps[tracing].append(summary["throughput_rps"])
            cpu[tracing].append(summary["cpu_ms_per_req"])
            print(
                f"  tracing={tracing}: {rps[tracing][-1]} req/s, {cpu[tracing][-1]} CPU ms/request",
                flush=True,
            )
    print(
        "\n| tracer | completed req/s (median) | service CPU ms per request (median) | runs (req/s; CPU ms) |"
    )
    print("|---|---|---|---|")
    for tracing, name in ((False, "no-op"), (True, "OTel SDK → OTLP/JSON file")):
        print(
            f"| {name} | {statistics.median(rps[tracing])} | {statistics.median(cpu[tracing])} | "
            f"{rps[tracing]}; {cpu[tracing]} |"
        )
    off, on = statistics.median(rps[False]), statistics.median(rps[True])
    cpu_off, cpu_on = statistics.median(cpu[False]), statistics.median(cpu[True])
    print(
        f"\noverhead of the medians: {100 * (off - on) / off:.1f} % of throughput, "
        f"{100 * (cpu_on - cpu_off) / cpu_off:.1f} % service CPU per request"
    )
    # each traced run against the no-op run just before it: robust to the machine drifting between
    # pairs (on the shared VM a no-op run's throughput moves by ±15 % from one run to the next)
    pairs = [100 * (a - b) / a for a, b in zip(rps[False], rps[True], strict=True)]
    cpu_pairs = [100 * (b - a) / a for a, b in zip(cpu[False], cpu[True], strict=True)]
    print(
        f"paired (median of {len(pairs)} adjacent pairs): {statistics.median(pairs):.1f} % of throughput "
        f"{[round(x, 1) for x in pairs]}, {statistics.median(cpu_pairs):.1f} % service CPU per request "
        f"{[round(x, 1) for x in cpu_pairs]}"
    )


def window_overheads(windows: list[dict]) -> list[float]:
    """Each interior window against the mean of its two neighbours (which are of the other mode): the
    % of throughput tracing cost there. A drift in the service's speed over the run (it keeps getting
    faster for tens of seconds after warm-up) cancels when it is linear over three windows, which it
    would not if each traced window were compared with the no-op window after it."""
    rates = [w["requests"] / w["seconds"] for w in windows]
    out = []
    for i in range(1, len(windows) - 1):
        around = (rates[i - 1] + rates[i + 1]) / 2
        traced, no_op = (rates[i], around) if windows[i]["mode"] == "traced" else (around, rates[i])
        out.append(100 * (no_op - traced) / no_op)
    return out


def window_cpu_overheads(windows: list[dict]) -> list[float]:
    """As window_overheads, for the service's CPU per request: the % more a traced window spent per
    request than the mean of its two no-op neighbours (or a no-op window less than its traced ones)."""
    cpu = [w["cpu_seconds"] / max(w["requests"], 1) for w in windows]
    out = []
    for i in range(1, len(windows) - 1):
        around = (cpu[i - 1] + cpu[i + 1]) / 2
        traced, no_op = (cpu[i], around) if windows[i]["mode"] == "traced" else (around, cpu[i])
        out.append(100 * (traced - no_op) / no_op)
    return out


def print_windows(windows: list[dict]) -> None:
    print("\n| window | mode | req/s | CPU ms/request | GC ms gen 0/1/2 | flush ms | stolen s |")
    print("|---|---|---|---|---|---|---|")
    for i, w in enumerate(windows, 1):
        gc_ms = "/".join(f"{1000 * g:.0f}" for g in w["gc_seconds"])
        print(
            f"| {i} | {w['mode']} | {w['requests'] / w['seconds']:.1f} | "
            f"{1000 * w['cpu_seconds'] / max(w['requests'], 1):.2f} | {gc_ms} | "
            f"{1000 * w['flush_seconds']:.0f} | {w['stolen_seconds']} |"
        )
    print()


def bench_tracing_ab(args) -> None:
    print(
        f"tracing overhead inside one process ({_load_text(args)}, tracer swapped every "
        f"{args.period:g} s, batch 8/5 ms, steady, no downstream, tracing mode {args.tracing_mode}, "
        f"sample rate {args.sample_rate:g}, keep slower than {args.keep_slower_than_ms} ms, "
        f"{6 if args.layers is None else args.layers}-layer model) — {machine(SERVICE_THREADS)}\n"
    )
    print("| run | mode | windows | seconds | requests | req/s | CPU ms per request |")
    print("|---|---|---|---|---|---|---|")
    overheads, cpu_overheads, window_costs, window_cpu, stolen = [], [], [], [], []
    for run in range(1, args.repeats + 1):
        books = _steady_run(args, tracing_ab_period_s=args.period)["tracing_ab"]
        rate, cpu = {}, {}
        for mode in ("no-op", "traced"):
            b = books[mode]
            rate[mode] = b["requests"] / b["seconds"]
            cpu[mode] = 1000 * b["cpu_seconds"] / max(b["requests"], 1)
            print(
                f"| {run} | {mode} | {b['windows']} | {b['seconds']:.1f} | {b['requests']} | "
                f"{rate[mode]:.2f} | {cpu[mode]:.2f} |",
                flush=True,
            )
        overheads.append(100 * (rate["no-op"] - rate["traced"]) / rate["no-op"])
        cpu_overheads.append(100 * (cpu["traced"] - cpu["no-op"]) / cpu["no-op"])
        window_costs += window_overheads(books["windows"])
        window_cpu += window_cpu_overheads(books["windows"])
        if args.windows:
            print_windows(books["windows"])
        stolen += [w["stolen_seconds"] for w in books["windows"] if w["stolen_seconds"] is not None]
    print(
        f"\noverhead per run: {[round(x, 1) for x in overheads]} % of throughput "
        f"(mean {statistics.mean(overheads):.1f} %), {[round(x, 1) for x in cpu_overheads]} % service CPU "
        f"per request (mean {statistics.mean(cpu_overheads):.1f} %)"
    )
    if window_costs:
        print(
            f"each window against its neighbours: median {statistics.median(window_costs):.1f} %, "
            f"mean {statistics.mean(window_costs):.1f} % of throughput over {len(window_costs)} windows"
        )
    if window_cpu:
        print(
            f"each window's CPU per request against its neighbours: median "
            f"{statistics.median(window_cpu):.1f} %, mean {statistics.mean(window_cpu):.1f} % over "
            f"{len(window_cpu)} windows"
        )
    if stolen:
        print(
            f"CPU stolen by the hypervisor per window: median {statistics.median(stolen):.2f} s, "
            f"max {max(stolen):.2f} s"
        )


MORE_SECTIONS = {
    **pipeline_modes.SECTIONS,
    **pipeline_both.SECTIONS,
    **pipeline_frontends.SECTIONS,
    **pipeline_saturation.SECTIONS,
    **pipeline_model_side.SECTIONS,
}


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "section",
        choices=("forward", "batching", "tracing", "tracing-ab", *MORE_SECTIONS),
    )
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtypes", default="fp32,bf16,int8", help="forward: dtypes to time")
    parser.add_argument("--dtype", default="fp32", help="batching, tracing: the service's dtype")
    parser.add_argument(
        "--executors", default="torchscript,eager", help="forward: eager, torchscript, compile, cuda-graphs"
    )
    parser.add_argument(
        "--eager", action="store_true", help="batching, tracing: the service's forward op by op"
    )
    parser.add_argument(
        "--cuda-graphs", action="store_true", help="batching, tracing: the service replays CUDA graphs"
    )
    parser.add_argument("--workers", type=int, default=1, help="batching, tracing: model worker threads")
    parser.add_argument(
        "--load-processes", type=int, default=1, help="batching, tracing: load generator processes"
    )
    parser.add_argument("--seq", type=int, default=64)
    parser.add_argument("--threads", type=int, default=0)
    parser.add_argument("--budget", type=float, default=3.0, help="seconds per forward cell (min 10 runs)")
    parser.add_argument("--duration", type=float, default=10.0)
    parser.add_argument(
        "--rps", type=float, default=0.0, help="open-loop load instead (keep it above capacity)"
    )
    parser.add_argument("--concurrency", type=int, default=32, help="closed-loop clients (default 32)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--period", type=float, default=4.0, help="tracing-ab: seconds per mode window")
    parser.add_argument("--windows", action="store_true", help="tracing-ab: print every window too")
    parser.add_argument("--requests", type=int, default=3000, help="spans, handoff: requests")
    parser.add_argument("--layers", type=int, help="encoder layers, 0 and up (default: MiniLM's 6)")
    parser.add_argument(
        "--tracing-mode", default="spans", choices=("spans", "light"), help="the traced runs' tracing mode"
    )
    parser.add_argument("--sample-rate", type=float, default=1.0, help="the traced runs' head sampling")
    parser.add_argument("--keep-slower-than-ms", type=float, help="with sampling: always keep these")
    parser.add_argument("--warm", type=float, default=3.0, help="modes, frontends: warm-up seconds")
    for module in (pipeline_frontends, pipeline_saturation):
        module.add_arguments(parser)
    args = parser.parse_args()
    sections = {
        "forward": bench_forward,
        "batching": bench_batching,
        "tracing": bench_tracing,
        "tracing-ab": bench_tracing_ab,
    }
    if args.section in sections:
        sections[args.section](args)
    else:
        MORE_SECTIONS[args.section](args, machine(SERVICE_THREADS))
    return 0


if __name__ == "__main__":
    sys.exit(main())
