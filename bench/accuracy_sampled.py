"""What head sampling costs the diagnosis, with and without its weights: every planted scenario of the
simulator, each run also sampled the way tailscope.instrument.sampling samples (reference_pipeline.
sample_file: 1 in 1/rate requests by trace id, every request slower than the rule kept, weight 1/rate
or 1), diagnosed three ways: the whole run, the sampled run with its weights honoured, and the sampled
run read as if every kept request were one request (the weights dropped: what tailscope did before).

    .venv/bin/python bench/accuracy_sampled.py [--requests 3000] [--seeds 3] [--rate 0.25]
        [--keep-quantile 0.95] [--scenarios a,b]

The slow rule's threshold is the whole run's `--keep-quantile` of request latency (a service would set
it from its SLO). A run is right when its top finding is the planted cause (steady: nothing above 0.5
but compute_bound: bench/accuracy.py's verdict). Also prints, per way, the median relative error of
p50 and p99 (the views' overview) against the whole run's. Prints markdown for bench/RESULTS.md.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import orjson

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.accuracy import PLANTED, options, verdict  # noqa: E402
from bench.machine_info import machine  # noqa: E402
from ingest.loader import load_paths  # noqa: E402
from reference_pipeline.sample_file import sample_file  # noqa: E402
from reference_pipeline.simulate.api import simulate_to_file  # noqa: E402
from tailscope.analysis import Filter, overview  # noqa: E402
from tailscope.analysis.diagnosis import diagnose_frame  # noqa: E402
from tailscope.analysis.diagnosis.load import load_frame  # noqa: E402
from tailscope.store.duckdb.statements import filtered  # noqa: E402
from tailscope.store.duckdb.store import DuckDBStore  # noqa: E402

WAYS = ("whole run", "sampled, weighted", "sampled, weights dropped")


def root_latencies_ms(path: Path) -> np.ndarray:
    roots = []
    for line in path.read_bytes().splitlines():
        for resource in orjson.loads(line)["resourceSpans"]:
            for scope in resource["scopeSpans"]:
                roots += [
                    int(s["endTimeUnixNano"]) - int(s["startTimeUnixNano"])
                    for s in scope["spans"]
                    if not s.get("parentSpanId")
                ]
    return np.array(roots, dtype=np.float64) / 1e6


def unweighted_overview(store: DuckDBStore, run: str) -> tuple[float, float]:
    """p50 and p99 (ms) of the kept requests, each counted once (the unweighted statement)."""
    with store.reading() as conn:
        text, params = filtered("overview", Filter(run=run))
        row = conn.conn.execute(text, params).fetchone()
    return row[7][0] / 1e6, row[7][2] / 1e6


def one(scenario: str, requests: int, seed: int, rate: float, keep_q: float) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        full = Path(tmp) / "full.json"
        simulate_to_file(full, scenario, requests, seed, **options(seed))
        slow_ms = float(np.quantile(root_latencies_ms(full), keep_q))
        sampled = Path(tmp) / "sampled.json"
        counts = sample_file(full, sampled, rate, keep_slower_than_ms=slow_ms)
        db = Path(tmp) / "store.duckdb"
        load_paths([full], db, "full")
        load_paths([sampled], db, "sampled")
        store = DuckDBStore(db)
        out: dict = {"kept": counts["traces"], "by_rule": counts["by_rule"], "slow_ms": slow_ms}
        with store.reading() as conn:  # the detectors read span attributes while it is open
            frames = {"whole run": load_frame(conn, "full"), "sampled, weighted": load_frame(conn, "sampled")}
            dropped = load_frame(conn, "sampled")
            dropped.requests.weight = None
            frames["sampled, weights dropped"] = dropped
            for way, frame in frames.items():
                findings = diagnose_frame(frame, seed=0).findings
                out[way] = (verdict(scenario, findings), findings[0].pattern if findings else None)
        summaries = {run: overview(store, Filter(run=run)).runs[0] for run in ("full", "sampled")}
        p50, p99 = summaries["full"].p50_ms, summaries["full"].p99_ms
        out["err"] = {
            "whole run": (0.0, 0.0),
            "sampled, weighted": (
                summaries["sampled"].p50_ms / p50 - 1,
                summaries["sampled"].p99_ms / p99 - 1,
            ),
            "sampled, weights dropped": tuple(
                v / w - 1 for v, w in zip(unweighted_overview(store, "sampled"), (p50, p99), strict=True)
            ),
        }
        return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--rate", type=float, default=0.25)
    parser.add_argument("--keep-quantile", type=float, default=0.95)
    parser.add_argument("--scenarios", default=",".join(PLANTED))
    args = parser.parse_args()
    started = time.perf_counter()
    rows, right = [], {way: 0 for way in WAYS}
    errors: dict[str, list[tuple[float, float]]] = {way: [] for way in WAYS}
    scenarios = args.scenarios.split(",")
    for scenario in scenarios:
        for seed in range(args.seeds):
            r = one(scenario, args.requests, seed, args.rate, args.keep_quantile)
            cells = []
            for way in WAYS:
                ok, top = r[way]
                right[way] += ok
                errors[way].append(r["err"][way])
                cells.append(("✓ " if ok else "✗ ") + str(top))
            rows.append(
                f"| {scenario} | {seed} | {r['kept']} ({r['by_rule']} by rule) | " + " | ".join(cells) + " |"
            )
            print(rows[-1], flush=True)
    n = len(scenarios) * args.seeds
    print(
        f"\n{machine()}; {args.requests} requests per run, rate {args.rate}, slow rule at the run's "
        f"p{args.keep_quantile * 100:g}; {time.perf_counter() - started:.0f} s\n"
    )
    print("| scenario | seed | requests kept | " + " | ".join(WAYS) + " |")
    print("|---|---|---|" + "---|" * len(WAYS))
    print("\n".join(rows))
    print("| **right** | | | " + " | ".join(f"**{right[w]}/{n}**" for w in WAYS) + " |")
    print("\n| way | median abs. error of p50 vs the whole run | of p99 | largest p99 error |")
    print("|---|---|---|---|")
    for way in WAYS[1:]:
        e50 = statistics.median(abs(e[0]) for e in errors[way])
        e99 = statistics.median(abs(e[1]) for e in errors[way])
        worst = max(abs(e[1]) for e in errors[way])
        print(f"| {way} | {e50:.1%} | {e99:.1%} | {worst:.1%} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
