"""`tailscope pipeline sweep`: a hardware comparison, one saturated run per setup, and its table.

  tailscope pipeline sweep --devices cuda --dtypes fp32,bf16 --executors eager,cuda-graphs \\
      --batch-policies 1:0,32:5 --concurrency 64 --load-processes 4 --tracing-mode light \\
      --price-per-hour 3.9 --out-dir runs/ [--db tailscope.duckdb] [--json]

Each setup (device × dtype × executor × batch policy; executors default to every one the device has,
those it cannot run are set aside with the reason) runs the steady service at saturation: a closed
loop of --concurrency clients (32 unless --concurrency or --rps is given) for --duration seconds. Its
traces go to OUT_DIR/<label>.jsonl (with --db, also into that store as run <label>); then a table:
throughput, client p50/p99, and the cost per 1,000 inferences at --price-per-hour. A setup whose load
generator kept its cores busy is marked: its throughput is the load generator's, add --load-processes.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path

SATURATION_CLIENTS = 32
EXECUTOR_FLAGS = ("eager", "torchscript", "compile", "cuda_graphs")  # `run`'s flags; a sweep has --executors
LOAD_BOUND_SHARE = 0.9  # load generator cores busy per process at which the throughput is its own


def add_sweep_arguments(sweep: argparse.ArgumentParser) -> None:
    sweep.add_argument("--devices", default="cpu", help="comma-separated, e.g. cpu,cuda")
    sweep.add_argument("--dtypes", default="fp32", help="comma-separated, e.g. fp32,bf16,int8")
    sweep.add_argument(
        "--executors",
        help="comma-separated from eager, torchscript, compile, cuda-graphs (default: every one the device "
        "has; those it cannot run are listed with the reason)",
    )
    sweep.add_argument(
        "--batch-policies",
        default="1:0,8:5",
        help="comma-separated max_batch:max_wait_ms pairs (default 1:0,8:5)",
    )
    sweep.add_argument(
        "--price-per-hour",
        metavar="USD",
        help="hourly price of the hardware, for the cost per 1,000 inferences: one price, or per device "
        "(cpu=0.17,cuda=3.90); recorded in each run's resource attributes",
    )
    sweep.add_argument("--out-dir", type=Path, required=True)
    sweep.add_argument("--db", type=Path, help="also load each run into this store, labelled")
    sweep.add_argument("--json", action="store_true", help="print the results as JSON instead of a table")


def _money(value: float | None, digits: int) -> str:
    return "" if value is None else f"{value:.{digits}f}"


def load_generator_cores(summary: dict) -> float | None:
    """Cores the load generator kept busy during the run (its CPU per request × requests/s)."""
    per_request = summary.get("loadgen_cpu_ms_per_request")
    if per_request is None or not summary.get("throughput_rps"):
        return None
    return per_request * summary["throughput_rps"] / 1000.0


def with_costs(summaries: list[dict], load_processes: int) -> list[dict]:
    """Each summary plus `ran` (it served requests), cost_per_1k (USD, from its price and
    throughput) and load_bound (the load generator's cores were busy enough that the throughput is
    the load generator's)."""
    from tailscope.pricing import cost_per_1k

    rows = []
    for summary in summaries:
        row = dict(summary)
        row["ran"] = not row.get("failed") and not row.get("skipped")
        price, throughput = row.get("price_per_hour"), row.get("throughput_rps")
        row["cost_per_1k"] = cost_per_1k(price, throughput) if row["ran"] else None
        cores = load_generator_cores(row) if row["ran"] else None
        row["load_generator_cores"] = None if cores is None else round(cores, 2)
        row["load_bound"] = cores is not None and cores >= LOAD_BOUND_SHARE * load_processes
        rows.append(row)
    return rows


def _note(row: dict) -> str:
    if row.get("skipped"):
        return f"set aside: {row['skipped']}"
    if row.get("failed"):
        return f"failed: {row['failed']}"
    notes = [f"{row['errors']} errors"] if row.get("errors") else []
    if row.get("load_bound"):
        notes.append(f"load generator bound ({row['load_generator_cores']:.2f} cores): add --load-processes")
    return "; ".join(notes)


def sweep_table(rows: list[dict]) -> str:
    """The comparison as a text table (rows from `with_costs`), fastest first; set-aside and failed
    setups last."""
    ran = sorted((r for r in rows if r["ran"]), key=lambda r: -(r.get("throughput_rps") or 0.0))
    header = (
        f"{'setup':<34} {'executor':<11} {'dtype':<5} {'batch':>6} {'req/s':>9} {'p50 ms':>8} "
        f"{'p99 ms':>8} {'USD/h':>7} {'USD/1k inf':>11}  note"
    )
    lines = [header, "-" * len(header)]
    for r in [*ran, *(r for r in rows if not r["ran"])]:
        figures = (
            f"{r['throughput_rps']:>9.1f} {r['p50_ms']:>8.2f} {r['p99_ms']:>8.2f}"
            if r["ran"]
            else " " * 27
        )
        money = f"{_money(r.get('price_per_hour'), 2):>7} {_money(r.get('cost_per_1k'), 5):>11}"
        setup = f"{r['label']:<34} {r['executor']:<11} {r['dtype']:<5} {r['batch_policy']:>6}"
        lines.append(f"{setup} {figures} {money}  {_note(r)}".rstrip())
    return "\n".join(lines)


def run_sweep(args: argparse.Namespace, options: Callable[..., object], print_summary: Callable) -> int:
    from reference_pipeline.sweep import cell_facts, parse_batch_policies, parse_prices, plan, sweep

    flags = [f"--{name.replace('_', '-')}" for name in EXECUTOR_FLAGS if getattr(args, name, False)]
    if flags:
        raise ValueError(f"sweep: {', '.join(flags)}: a sweep's executors are chosen with --executors")
    policies = parse_batch_policies(args.batch_policies)
    devices = [d.strip() for d in args.devices.split(",") if d.strip()]
    dtypes = [d.strip() for d in args.dtypes.split(",") if d.strip()]
    executors = [e.strip() for e in args.executors.split(",") if e.strip()] if args.executors else None
    prices = parse_prices(args.price_per_hour, devices)
    cells, skipped = plan(devices, dtypes, executors, policies)
    progress = sys.stderr if args.json else sys.stdout
    for cell, reason in skipped:
        print(f"{cell.label}: set aside, {reason}", file=progress)

    def done(summary: dict) -> None:
        if summary.get("failed"):
            print(f"{summary['label']}: failed:\n{summary['detail']}", file=sys.stderr)
            return
        print_summary(summary, file=progress)
        if args.db is not None:
            from ingest.loader import load_paths

            loaded = load_paths([summary["out"]], args.db, summary["label"])
            errors = [f.error for f in loaded.files if f.error]
            print(
                f"  loaded into {args.db} as run {summary['label']!r}: {loaded.traces} traces"
                + (f" (errors: {errors})" if errors else ""),
                file=progress,
            )

    summaries = sweep(options(args), cells, args.out_dir, prices, on_done=done)
    summaries += [
        {**cell_facts(cell, prices.get(cell.device)), "skipped": reason} for cell, reason in skipped
    ]
    rows = with_costs(summaries, args.load_processes)
    (args.out_dir / "sweep.json").write_text(json.dumps(rows, indent=2))
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        print()
        print(sweep_table(rows))
    if not cells:
        print("tailscope pipeline sweep: every setup was set aside; nothing ran", file=sys.stderr)
        return 1
    failed = [r["label"] for r in rows if not r.get("skipped") and not _served(r)]
    if failed:
        print(f"tailscope pipeline sweep: failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


def _served(row: dict) -> bool:
    return row["ran"] and bool(row.get("requests")) and row.get("errors", 0) < row["requests"]
