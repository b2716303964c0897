"""What-if accuracy: each planted cause run as a pair (with the cause, without it, same seed); the p99
the what-if predicts for "fix the cause" on the faulty run against the p99 measured on the run without it.

    python bench/bench_whatif.py sim [--requests 4000] [--seeds 1] [--families all]
    python bench/bench_whatif.py blind [--requests 4000] [--families a,b] [--seeds 1]  # blind families,
                                                                        # the held-out ones never
    python bench/bench_whatif.py pipeline [--duration 15] [--rps 20] [--repeats 2]  # the real service
    python bench/bench_whatif.py timing [--requests 77000] [--sampled]    # what-if of a 1 M-span run

sim: every planted cause of the simulator in every trace family (pipeline, gateway, region,
readthrough, queue-worker; network-jitter is left out where the caller is not traced, as in
bench/accuracy_runs.py),
plus capacity and hardware pairs at a fixed arrival rate (3 vs 4 instances; forward x 0.5; fp32 vs int8
with the speed-up measured from the int8 run). pipeline: the reference pipeline's CPU scenarios as
pairs (cold vs warm cache, GC pressure vs none, one model worker vs two, fp32 vs int8). Where the
diagnosis names no cause a fix could answer, the prediction is the faulty run as it was ("no lever").
Error = |predicted p99 - measured p99| / measured p99 of the run without the cause.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.whatif_common import OPEN, frame_of, line, pair_row, simulated, source_key, table  # noqa: E402
from bench.whatif_pipeline import pipeline_report  # noqa: E402
from tailscope.analysis.diagnosis import diagnose_frame  # noqa: E402
from tailscope.analysis.whatif import evaluate  # noqa: E402

FAMILIES = ("pipeline", "gateway", "region", "readthrough", "queue-worker")
# cause -> (scenario without it, its options, the lever that removes it)
SIM_CAUSES = {
    "gc-pressure": ("steady", {}, "no_gc_stalls"),
    "lock-contention": ("steady", {}, "no_lock_wait"),
    "cold-cache": ("steady", {}, "cache_hits"),
    "key-expiry": ("key-expiry", {"cache_ttl_s": 1e9}, "cache_hits"),
    "slow-downstream": ("steady", {}, "dependency_p50"),
    "cold-start": ("cold-start", {"warm_start": True, "cache_prefill": True}, "prewarmed"),
    "network-jitter": ("steady", {}, "network_p50"),
    "burst": ("steady", {}, "queue_as_calm"),
}
# causes a family's traces cannot show (as in bench/accuracy_runs.py: the caller is not traced), so
# the diagnosis names nothing a fix could answer
UNSEEN = {"readthrough": ("network-jitter",), "queue-worker": ("network-jitter",)}
# (label, faulty scenario, options, fixed scenario, options, lever), pipeline family, fixed arrival rate
SIM_EXTRA = (
    ("3 -> 4 instances", "steady", {"rps": 700}, "steady", {"rps": 700, "workers": 4}, "replicas+1"),
    (
        "forward x 0.5",
        "steady",
        {"rps": 400},
        "steady",
        {"rps": 400, "forward_base_ms": 5.0, "forward_per_item_ms": 1.25},
        "forward_x0.5",
    ),
    ("fp32 -> int8", "steady", {"rps": 400}, "steady", {"rps": 400, "hardware": "cpu-int8"}, "forward_as"),
)


def sim_rows(families: list[str], requests: int, seeds: int) -> list[dict]:
    rows = []
    for seed in range(seeds):
        for family in families:
            with tempfile.TemporaryDirectory() as tmp:
                t = Path(tmp)
                topo = {"topology": family}
                cache: dict[tuple, object] = {}

                def run(scenario: str, options: dict, t=t, topo=topo, cache=cache, seed=seed):
                    key = (scenario, tuple(sorted(options.items())))
                    if key not in cache:
                        cache[key] = simulated(
                            t, f"r{len(cache)}", scenario, seed, requests, **topo, **options
                        )
                    return cache[key]

                for cause, (without, options, lever) in SIM_CAUSES.items():
                    if cause in UNSEEN.get(family, ()):
                        continue
                    rows.append(pair_row(family, cause, run(cause, {}), run(without, options), lever))
                    print(line(rows[-1]), flush=True)
                if family == "pipeline":
                    for label, sa, oa, sb, ob, lever in SIM_EXTRA:
                        rows.append(pair_row(family, label, run(sa, oa), run(sb, ob), lever))
                        print(line(rows[-1]), flush=True)
                OPEN.close()
    return rows


# the fix for each planted pattern of the blind families (bench/blind_runs.py)
PATTERN_LEVER = {
    # the run without the cause has the callee at its healthy speed (its slowness is what the deadline
    # cut): the callee fixed; `no_timeouts` (the deadline's attempts gone, the callee as slow) beside it
    "timeout_retry": "callee_p50|no_refusals",  # (refused with a Retry-After: the sleeps gone)
    "large_payload": "payload_",  # payload_p50 (its size at the median) or payload_batched (N+1)
    "cpu_throttling": "no_throttling|host_as_peers",  # no quota period seen: the slow host as its peers
    "gc_pause": "no_gc_stalls",
    # the queue as in calm stretches (a burst met with capacity), or, where the batcher's window is
    # what the requests wait for (a max queue delay the traffic never fills a batch in), no window, or,
    # where a call blocks the worker (a synchronous call in an async handler), the call non-blocking.
    # A lock lever at the truth's own span answers it too: a queue at a bounded pool's checkout is a
    # wait for a connection, which ARCHITECTURE's vocabulary of waits names lock_contention (the
    # families' truths predate it); at another span (the route of a burst at a worker pool: a wait
    # for a worker, queueing) it does not
    "queueing": "queue_as_calm|queue_no_window|queue_unblocked|no_lock_wait@",
    # the dependency at its p50, or where it is slow in episodes (its p50 then a slow one), as between them
    "slow_dependency": "dependency_p50|dependency_as_calm",
    "lock_contention": "no_lock_wait",
    "cache_miss": "cache_hits",
    "cold_start": "prewarmed",
    "network": "network_",  # network_p50 (the wire at its median) or network_connects_reused
}


ALSO = {"timeout_retry": ("no_timeouts", "hedged")}  # the pattern's other levers, listed beside it


def blind_families() -> list[str]:
    """The blind families to run by default: every one but the held-out families (never run here)."""
    from reference_pipeline.simulate import blind

    return [name for name in blind.available() if name not in blind.UNTOUCHED]


def blind_rows(families: list[str], requests: int, seed: int, same_arrivals: bool = True,
               cache: Path | None = None) -> tuple[list[dict], list[dict], list[str]]:
    """Each blind family's one-cause scenarios against its healthy run, same seed: end to end (the
    fix for what the diagnosis names), and with the lever applied (a planted cause the diagnosis
    missed added as a finding from the truth). `cache`: runs written and loaded there, reused while
    the simulator, loader and store code is the same (whatif_common.source_key)."""
    from reference_pipeline.simulate import blind

    rows, applied, unscored = [], [], []
    for name in families:
        if name in blind.UNTOUCHED:
            raise SystemExit(f"bench_whatif: {name} is a held-out blind family: not run here")
        with tempfile.TemporaryDirectory() as tmp:
            t = Path(tmp) if cache is None else cache / source_key() / f"{name}-s{seed}-r{requests}"
            t.mkdir(parents=True, exist_ok=True)

            def run(scenario: str, t=t, name=name, **opts):
                tag = "".join(f"@{value}" for value in opts.values())  # one file (and store) per run
                out = t / f"{scenario}{tag}{blind.SUFFIX[blind.run_format(name, seed)]}"
                if cache is None or not out.with_suffix(".loaded").exists():
                    blind.write_run(out, name, scenario, requests, seed, **opts)
                return frame_of(out, reuse=cache is not None)

            healthy = None
            base = blind.scenarios(name)[0]  # the family's run with nothing planted
            # a family that sets its arrival rate from the work a request takes (load as a share of
            # capacity) gives a slower cause fewer arrivals; a fix keeps the arrivals, so the run
            # without the cause is written at the faulty run's rate
            rate_of = getattr(blind.family(name), "RATE_OF", None) if same_arrivals else None
            for scenario in blind.scenarios(name)[1:]:
                planted = blind.truth(name, scenario, seed)
                patterns = [c["pattern"] for c in planted]
                if not patterns or any(p not in PATTERN_LEVER for p in patterns):
                    unscored.append(f"{name} {scenario} ({'+'.join(patterns)})")
                    continue
                # two causes: both fixes at once
                levers = tuple(PATTERN_LEVER[p] for p in patterns)
                lever = levers[0] if len(levers) == 1 else levers
                if rate_of:
                    healthy = run(base, **{rate_of: scenario})
                healthy = healthy if healthy is not None else run(base)
                faulty = run(scenario)
                label = name if seed == 0 else f"{name} s{seed}"
                spans = tuple(c["span"] for c in planted if c.get("span"))  # measured where they act
                rows.append(pair_row(label, scenario, faulty, healthy, lever, spans=spans))
                print(line(rows[-1]), flush=True)
                applied.append(pair_row(label, scenario, faulty, healthy, lever, planted, spans))
                print("  applied: " + line(applied[-1]), flush=True)
                for extra in ALSO.get(patterns[0], ()) if len(patterns) == 1 else ():
                    applied.append(pair_row(label, f"{scenario} [{extra}]", faulty, healthy, extra, planted,
                                            spans))
                    print("  applied: " + line(applied[-1]), flush=True)
            OPEN.close()
    return rows, applied, unscored


def timing(requests: int, repeats: int, whole: bool = True) -> None:
    """The what-if of the gc-pressure run of `requests` requests (77,000: 1,001,000 spans), every span
    of it (`whole`; else the loader's sample of a large run, as the dashboard reads it)."""
    with tempfile.TemporaryDirectory() as tmp:
        started = time.perf_counter()
        frame = simulated(Path(tmp), "big", "gc-pressure", 0, requests, whole=whole)
        print(
            f"{len(frame):,} spans, {len(frame.requests):,} requests (simulated + loaded in "
            f"{time.perf_counter() - started:.0f} s)"
        )
        findings = [fd.to_dict(with_chart=True) for fd in diagnose_frame(frame).findings]
        times, cpu = [], []
        for _ in range(repeats):
            started, started_cpu = time.perf_counter(), time.process_time()
            result = evaluate(frame, findings)
            times.append(time.perf_counter() - started)
            cpu.append(time.process_time() - started_cpu)
        print(
            f"what-if ({len(result.outcomes)} fixes + the model check): wall best {min(times):.2f} s, "
            f"median {statistics.median(times):.2f} s; CPU time best {min(cpu):.2f} s, median "
            f"{statistics.median(cpu):.2f} s ({repeats} runs; on a shared machine the CPU time is what one "
            "idle core would take)"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("what", choices=("sim", "blind", "pipeline", "timing"))
    parser.add_argument("--requests", type=int, default=None)
    parser.add_argument("--seeds", type=int, default=1)
    parser.add_argument("--families", default="all")
    parser.add_argument("--duration", type=float, default=15.0)
    parser.add_argument("--rps", type=float, default=20.0)
    parser.add_argument("--repeats", type=int, default=3, help="timing: what-if repeats; pipeline: runs")
    parser.add_argument("--keep", type=Path, help="pipeline: keep runs here (reused)")
    parser.add_argument("--cache", type=Path,
                        help="blind: write and load the runs here, reused while the simulator, loader "
                             "and store code is unchanged")
    parser.add_argument("--pairs", default="all", help="pipeline: the pairs to run, by label, ';'-separated")
    parser.add_argument("--device", default="cpu", help="pipeline: cpu or cuda[:N] (every run on it)")
    parser.add_argument("--own-rate", action="store_true",
                        help="blind: each family's healthy run at its own arrival rate, not the faulty run's")
    parser.add_argument("--sampled", action="store_true",
                        help="timing: the loader's sample of the large run, not every span of it")
    args = parser.parse_args(argv)
    if args.what == "timing":
        timing(args.requests or 77_000, args.repeats, whole=not args.sampled)
        return 0
    if args.what == "blind":
        families = blind_families() if args.families == "all" else args.families.split(",")
        rows, applied, unscored = [], [], []
        for seed in range(args.seeds):  # seed 1: other formats and settings (a consumer per message)
            r, a, u = blind_rows(families, args.requests or 4000, seed, same_arrivals=not args.own_rate,
                                 cache=args.cache)
            rows, applied, unscored = rows + r, applied + a, unscored + [f"{x} seed {seed}" for x in u]
        print("\nend to end (the fix for what the diagnosis names):")
        print(table(rows))
        print("\nthe lever applied (a planted cause the diagnosis missed given as a finding from the truth):")
        print(table(applied))
        print("not scored (two causes, or a mechanism with no lever): " + "; ".join(unscored))
        return 0
    if args.what == "pipeline":
        pairs = None if args.pairs == "all" else args.pairs.split(";")
        pipeline_report(args.duration, args.rps, args.repeats, pairs, args.keep, args.device)
        return 0
    families = list(FAMILIES) if args.families == "all" else args.families.split(",")
    rows = sim_rows(families, args.requests or 4000, args.seeds)
    print()
    print(table(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
