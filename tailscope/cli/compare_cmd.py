"""Compare two runs stage by stage: p50/p99 with 95 % bootstrap intervals, deltas B − A, throughput
and cost per 1,000 inferences from each run's hourly price."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_a", metavar="RUN_A")
    parser.add_argument("run_b", metavar="RUN_B")
    from tailscope.cli.store_arg import add_store_arguments

    add_store_arguments(parser)
    parser.add_argument("--price-a", type=float, metavar="USD/h", help="hourly price of run A's hardware")
    parser.add_argument("--price-b", type=float, metavar="USD/h", help="hourly price of run B's hardware")
    parser.add_argument("--resamples", type=int, default=1000, help="bootstrap resamples (default 1000)")
    parser.add_argument("--seed", type=int, default=0, help="bootstrap seed (default 0)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")


def _ms(value: float | None) -> str:
    return "" if value is None else f"{value:.2f}"


def run(args: argparse.Namespace) -> int:
    from tailscope.analysis import compare
    from tailscope.cli.store_arg import open_from
    from tailscope.cli.waterfall_cmd import check_run

    store = open_from(args, "compare")
    if store is None:
        return 2
    if not (check_run(store, args.run_a) and check_run(store, args.run_b)):
        return 2
    result = compare(
        store,
        args.run_a,
        args.run_b,
        price_a_per_hour=args.price_a,
        price_b_per_hour=args.price_b,
        resamples=args.resamples,
        seed=args.seed,
    )
    if args.json:
        data = asdict(result)
        data["setup"] = result.setup.to_dict(orient="records")
        print(json.dumps(data, indent=2, default=str))
        return 0 if result.stages else 2
    if not result.stages:
        print(f"tailscope: {result.reason}", file=sys.stderr)
        return 2
    for cost in (result.a, result.b):
        throughput = "?" if cost.throughput_rps is None else f"{cost.throughput_rps:.1f} req/s"
        price = "" if cost.cost_per_1k is None else f", ${cost.cost_per_1k:.4f} per 1,000 inferences"
        print(f"{cost.run}: {cost.requests} requests, {throughput}{price}")
    header = (
        f"{'stage':<18} {'q':>5} {'A ms':>9} {'A 95% CI':>19} {'B ms':>9} {'B 95% CI':>19} "
        f"{'B-A ms':>9} {'B-A 95% CI':>21}"
    )
    print(header)
    print("-" * len(header))
    for s in result.stages:
        print(
            f"{s.stage:<18} {'p' + format(s.quantile * 100, 'g'):>5} {_ms(s.a_ms):>9} "
            f"{_ms(s.a_low_ms) + '–' + _ms(s.a_high_ms):>19} {_ms(s.b_ms):>9} "
            f"{_ms(s.b_low_ms) + '–' + _ms(s.b_high_ms):>19} {_ms(s.delta_ms):>9} "
            f"{_ms(s.delta_low_ms) + '–' + _ms(s.delta_high_ms):>21}"
        )
    differing = result.setup[result.setup["differs"]]
    if not differing.empty:
        print("setup differences:")
        for row in differing.itertuples():
            print(f"  {row.key}: {row.a} → {row.b}")
    return 0
