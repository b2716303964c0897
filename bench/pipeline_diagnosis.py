"""Real reference-pipeline runs of every planted scenario, diagnosed end to end.

    .venv/bin/python bench/pipeline_diagnosis.py [--duration 20] [--rps 8] [--scenarios a,b]
        [--tracing-mode spans|light] [--sample-rate R] [--keep-slower-than-ms MS] [--frontends N]
        [--keep DIR]

For each scenario: `tailscope pipeline run --scenario S --device cpu --duration D --rps R`, then
`tailscope ingest` into one store and `tailscope diagnose --json`. A run is right when its top finding
is the planted cause (steady: no finding above 0.5 but compute_bound, which the forward pass may
fairly be). At 8 req/s about one request is in flight, where timing alone is weakest: gc_pause and
lock_contention then rest on the instrumentation (`python.gc` events, `lock.wait` spans from
tailscope.instrument). Prints a markdown table for bench/RESULTS.md. The tracing options are passed to
`tailscope pipeline run`: what each tracing mode loses for the diagnosis.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.accuracy import PLANTED
from bench.machine_info import machine

CLI = [sys.executable, "-c", "from tailscope.cli.main import entrypoint; entrypoint()"]
REAL = [s for s in PLANTED if s != "network-jitter"]  # the pipeline plants no network fault


def tailscope(*args: str) -> str:
    done = subprocess.run([*CLI, *args], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"tailscope {' '.join(args[:3])} failed ({done.returncode}): {done.stderr[-2000:]}")
    return done.stdout


def verdict(scenario: str, findings: list[dict]) -> str:
    planted = PLANTED[scenario]
    if planted is None:
        alarms = [f for f in findings if f["confidence"] > 0.5 and f["pattern"] != "compute_bound"]
        return "no false alarm" if not alarms else f"false alarm: {alarms[0]['pattern']}"
    top = findings[0]["pattern"] if findings else None
    return "planted cause" if top == planted else f"missed (top {top})"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--duration", type=float, default=20.0)
    parser.add_argument("--rps", type=float, default=8.0)
    parser.add_argument("--scenarios", default=",".join(REAL))
    parser.add_argument("--tracing-mode", default="spans", choices=("spans", "light"))
    parser.add_argument("--sample-rate", type=float, default=1.0)
    parser.add_argument("--keep-slower-than-ms", type=float)
    parser.add_argument("--frontends", default="auto", help="as `tailscope pipeline run --frontends`")
    parser.add_argument("--keep", type=Path, metavar="DIR", help="keep the trace files and the store there")
    args = parser.parse_args()
    tracing = ["--tracing-mode", args.tracing_mode, "--sample-rate", str(args.sample_rate)]
    tracing += ["--frontends", args.frontends]
    if args.keep_slower_than_ms is not None:
        tracing += ["--keep-slower-than-ms", str(args.keep_slower_than_ms)]
    print(f"machine: {machine()}")
    print(f"date:    {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    print(f"command: python {' '.join(sys.argv)}")
    print(f"tracing: {' '.join(tracing)}\n")
    print("| run | requests | top findings | verdict |\n|---|---|---|---|")
    right = 0
    scenarios = args.scenarios.split(",")
    with tempfile.TemporaryDirectory() as scratch:
        tmp = args.keep or scratch
        Path(tmp).mkdir(parents=True, exist_ok=True)
        db = str(Path(tmp) / "runs.duckdb")
        for scenario in scenarios:
            out = str(Path(tmp) / f"{scenario}.jsonl")
            tailscope("pipeline", "run", "--scenario", scenario, "--device", "cpu", "--duration",
                      str(args.duration), "--rps", str(args.rps), "--out", out, *tracing)  # fmt: skip
            tailscope("ingest", out, "--db", db, "--run", scenario)
            report = json.loads(tailscope("diagnose", "--db", db, "--run", scenario, "--json"))
            findings = report["findings"]
            tops = ", ".join(f"{f['pattern']} {f['confidence']:.2f}" for f in findings[:3]) or "none"
            said = verdict(scenario, findings)
            right += said in ("planted cause", "no false alarm")
            print(f"| {scenario} | {report['requests']} | {tops} | {said} |", flush=True)
    print(f"\n{right}/{len(scenarios)} right")


if __name__ == "__main__":
    main()
