"""Per-stage latency budget of a percentile band: mean exclusive ms of the requests in the band,
each stage's share of the band's excess over the median band, and exact per-stage percentiles
(which, unlike the band means, do not add up)."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from tailscope.cli.store_arg import add_store_arguments

    add_store_arguments(parser)
    parser.add_argument("--run", help="run label (default: the store's only run)")
    parser.add_argument(
        "--band",
        default="p99",
        choices=["p50", "p90", "p99", "p99.9"],
        help="percentile band: p50=[p45,p55], p90=[p90,p99), p99=[p99,p99.9), p99.9=[p99.9,max]",
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")


def check_run(store, run: str) -> bool:
    """False (after a helpful message) when the run has no requests in the store."""
    from tailscope.analysis import list_runs

    runs = list_runs(store)
    if run in runs:
        return True
    print(
        f"tailscope: unknown run {run!r}; runs in {store.name}: {', '.join(runs) or 'none'}",
        file=sys.stderr,
    )
    return False


def run(args: argparse.Namespace) -> int:
    from tailscope.analysis import Filter, waterfall
    from tailscope.cli.store_arg import open_from

    store = open_from(args, "waterfall")
    if store is None:
        return 2
    if args.run is not None and not check_run(store, args.run):
        return 2
    result = waterfall(store, Filter(run=args.run), args.band)
    if args.json:
        print(json.dumps(asdict(result), indent=2, default=str))
        return 0 if result.stages else 2
    if not result.stages:
        print(f"tailscope: {result.reason}", file=sys.stderr)
        return 2
    print(
        f"band {result.band}: {result.requests_in_band} of {result.requests_total} requests, "
        f"{result.band_low_ms:.2f}–{result.band_high_ms:.2f} ms, mean {result.band_mean_ms:.2f} ms "
        f"(median band mean {result.median_band_mean_ms:.2f} ms)"
    )
    header = f"{'stage':<18} {'mean ms':>9} {'tail %':>7} {'p50':>9} {'p95':>9} {'p99':>9} {'p99.9':>9}"
    print(header)
    print("-" * len(header))
    for bar in result.stages:
        share = "" if bar.tail_excess_share is None else f"{bar.tail_excess_share * 100:.1f}"
        print(
            f"{bar.stage:<18} {bar.mean_ms:9.2f} {share:>7} {bar.p50_ms:9.2f} {bar.p95_ms:9.2f} "
            f"{bar.p99_ms:9.2f} {bar.p999_ms:9.2f}"
        )
    print(f"{'total':<18} {result.band_mean_ms:9.2f}")
    print(result.note)
    if result.reason:
        print(f"note: {result.reason}")
    return 0
