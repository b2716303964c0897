"""A blind family's scenarios against its steady run: the p50 / p99 of the request roots (a trace's root
span that is not a CONSUMER: a linked consumer's own trace is not a request) at N requests per seed,
and the time to generate each run (wall and CPU). Only the simulator runs: no diagnosis.

    python bench/blind_family_p99.py django-celery --seeds 0,1,2 --requests 2000
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from reference_pipeline.simulate import blind


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("family")
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--requests", type=int, default=2000)
    args = parser.parse_args()
    module = blind.family(args.family)
    print("| seed | scenario | p50 ms | p99 ms | p99 / steady | spans | wall s | CPU s |")
    print("|---:|---|---:|---:|---:|---:|---:|---:|")
    for seed in (int(s) for s in args.seeds.split(",")):
        base = None
        for scenario in module.SCENARIOS:
            wall, cpu = time.perf_counter(), time.process_time()
            table = module.generate(scenario, args.requests, seed)
            wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
            roots = np.array([r[7] - r[6] for r in table.rows if r[1] == -1 and r[3] != "Consumer"]) / 1e6
            p50, p99 = np.percentile(roots, [50, 99])
            base = p99 if base is None else base
            print(f"| {seed} | {scenario} | {p50:.1f} | {p99:.1f} | {p99 / base:.2f} | {len(table.rows)} | "
                  f"{wall:.2f} | {cpu:.2f} |")


if __name__ == "__main__":
    main()
