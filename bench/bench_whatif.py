"""What-if accuracy: each planted cause run as a pair (with the cause, without it, same seed); the p99
the what-if predicts for "fix the cause" on the faulty run against the p99 measured on the run without it.

    python bench/bench_whatif.py sim [--requests 4000] [--seeds 1] [--families all]
    python bench/bench_whatif.py blind [--requests 4000] [--families a,b]  # blind families (issue 25),
                                                                        # the held-out one never
    python bench/bench_whatif.py pipeline [--duration 15] [--rps 20]     # the real service, CPU
    python bench/bench_whatif.py timing [--requests 77000]                # what-if of a 1 M-span run

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
import contextlib
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tailscope.analysis.diagnosis import diagnose_frame  # noqa: E402
from tailscope.analysis.whatif import evaluate, measured_speedup  # noqa: E402
from tailscope.analysis.whatif.retime import request_latency  # noqa: E402

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


# the readers of the runs loaded so far: kept open while their frames are used, since the diagnosis
# and the payload lever read span attributes from the store (closed per family: OPEN.close())
OPEN = contextlib.ExitStack()


def frame_of(path: Path, run: str = "run"):
    from ingest.loader import load_paths
    from tailscope.analysis.diagnosis.load import load_frame
    from tailscope.analysis.source import reading
    from tailscope.store.engine import open_store

    db = path.with_suffix(".duckdb")
    loaded = load_paths([path], db, run)
    if loaded.failed:
        raise SystemExit(f"bench_whatif: {path}: {loaded.failed[0].error}")
    conn = OPEN.enter_context(reading(open_store(str(db))))
    return load_frame(conn, run)


def simulated(tmp: Path, label: str, scenario: str, seed: int, requests: int, **options):
    from reference_pipeline.simulate.api import simulate_to_file

    out = tmp / f"{label}.jsonl"
    simulate_to_file(out, scenario, requests, seed, **options)
    return frame_of(out)


def measured(frame) -> tuple[float, float]:
    client = bool((frame.requests.client_span >= 0).mean() >= 0.5)
    lat = request_latency(frame, frame.dur, client)
    p50, p99 = np.percentile(lat, [50, 99]) / 1e6
    return float(p50), float(p99)


def predicted(
    frame, lever: str, other=None, truth: list[dict] | None = None
) -> tuple[float, float, str, float]:
    """(p50, p99, the fix evaluated or 'no lever', seconds) for the faulty run. `truth`: planted causes
    the diagnosis did not name are added as findings (pattern, span, service, instances: no more than
    the truth says), to measure the lever where it is applied."""
    diagnosis = diagnose_frame(frame)
    if diagnosis.errors:
        print(f"  (diagnosis errors: {diagnosis.errors})", flush=True)
    findings = [fd.to_dict(with_chart=True) for fd in diagnosis.findings]
    named = {fd["pattern"] for fd in findings}
    for cause in truth or []:
        if cause["pattern"] not in named:
            stats = {"service": cause.get("service"), "instances": cause.get("instances") or []}
            if cause["pattern"] == "large_payload":
                stats.update(_size_attribute(frame, cause.get("span")))
            findings.append({"pattern": cause["pattern"], "confidence": 1.0, "span_name": cause.get("span"),
                             "evidence": {"stats": stats}})
    speedup = measured_speedup(frame, other) if other is not None else None
    started = time.perf_counter()
    result = evaluate(frame, findings, speedup=speedup, speedup_from="other")
    seconds = time.perf_counter() - started
    hits = [o for o in result.outcomes if o.key.startswith(lever)]
    if not hits:
        return result.measured.p50_ms, result.measured.p99_ms, "no lever", seconds
    best = min(hits, key=lambda o: o.p99_ms)
    return best.p50_ms, best.p99_ms, best.key, seconds


def _size_attribute(frame, name: str | None) -> dict:
    """For a payload cause the diagnosis missed: the numeric attribute of the truth's span that
    follows its duration best (Spearman), a byte size first (the truth says a payload), as the finding
    would name it (empty where none)."""
    from tailscope.analysis.diagnosis.attributes import numeric_attributes
    from tailscope.analysis.diagnosis.stats import spearman

    if name not in frame.names:
        return {}
    code = frame.names.index(name)
    best = None
    for key, (idx, values) in numeric_attributes(frame, code, 50).items():
        rho = spearman(values, frame.dur[idx].astype(np.float64))
        rank = (any(w in key.lower() for w in ("size", "bytes", "length")), rho)
        if np.isfinite(rho) and rho > 0 and (best is None or rank > best[0]):
            best = (rank, key)
    return {"size_attribute": best[1], "size_on": "span"} if best else {}


def pair_row(family: str, cause: str, faulty, fixed, lever: str, planted: list[dict] | None = None) -> dict:
    before = measured(faulty)
    truth = measured(fixed)
    guess = predicted(faulty, lever, other=fixed if lever == "forward_as" else None, truth=planted)
    return {
        "family": family,
        "cause": cause,
        "lever": guess[2],
        "faulty_p50": before[0],
        "faulty_p99": before[1],
        "pred_p50": guess[0],
        "meas_p50": truth[0],
        "pred_p99": guess[1],
        "meas_p99": truth[1],
        "error": abs(guess[1] - truth[1]) / truth[1],
        "p50_error": abs(guess[0] - truth[0]) / truth[0],
        "material": before[1] > 1.1 * truth[1] or before[1] < 0.9 * truth[1],
        "seconds": guess[3],
    }


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
                    print(_line(rows[-1]), flush=True)
                if family == "pipeline":
                    for label, sa, oa, sb, ob, lever in SIM_EXTRA:
                        rows.append(pair_row(family, label, run(sa, oa), run(sb, ob), lever))
                        print(_line(rows[-1]), flush=True)
                OPEN.close()
    return rows


# the fix for each planted pattern of the blind families (bench/blind_runs.py)
PATTERN_LEVER = {
    # the run without the cause has the callee at its healthy speed (its slowness is what the deadline
    # cut): the callee fixed; `no_timeouts` (the deadline's attempts gone, the callee as slow) beside it
    "timeout_retry": "callee_p50",
    "large_payload": "payload_p50",
    "cpu_throttling": "no_throttling",
    "gc_pause": "no_gc_stalls",
    "queueing": "queue_as_calm",
    "slow_dependency": "dependency_p50",
    "lock_contention": "no_lock_wait",
    "cache_miss": "cache_hits",
    "cold_start": "prewarmed",
    "network": "network_p50",
}


ALSO = {"timeout_retry": ("no_timeouts", "hedged")}  # the pattern's other levers, listed beside it


def blind_families() -> list[str]:
    """The blind families to run by default: every one but the held-out families (never run here)."""
    from reference_pipeline.simulate import blind

    return [name for name in blind.available() if name not in blind.UNTOUCHED]


def blind_rows(families: list[str], requests: int, seed: int) -> tuple[list[dict], list[dict], list[str]]:
    """Each blind family's one-cause scenarios against its healthy run, same seed: end to end (the
    fix for what the diagnosis names), and with the lever applied (a planted cause the diagnosis
    missed added as a finding from the truth)."""
    from reference_pipeline.simulate import blind

    rows, applied, unscored = [], [], []
    for name in families:
        if name in blind.UNTOUCHED:
            raise SystemExit(f"bench_whatif: {name} is a held-out blind family: not run here")
        with tempfile.TemporaryDirectory() as tmp:
            t = Path(tmp)

            def run(scenario: str, t=t, name=name):
                out = t / f"{scenario}{blind.SUFFIX[blind.run_format(name, seed)]}"
                blind.write_run(out, name, scenario, requests, seed)
                return frame_of(out)

            healthy = None
            for scenario in blind.scenarios(name)[1:]:
                planted = blind.truth(name, scenario, seed)
                patterns = [c["pattern"] for c in planted]
                if len(patterns) != 1 or patterns[0] not in PATTERN_LEVER:
                    unscored.append(f"{name} {scenario} ({'+'.join(patterns)})")
                    continue
                healthy = healthy if healthy is not None else run("healthy")
                faulty = run(scenario)
                rows.append(pair_row(name, scenario, faulty, healthy, PATTERN_LEVER[patterns[0]]))
                print(_line(rows[-1]), flush=True)
                applied.append(pair_row(name, scenario, faulty, healthy, PATTERN_LEVER[patterns[0]], planted))
                print("  applied: " + _line(applied[-1]), flush=True)
                for extra in ALSO.get(patterns[0], ()):
                    applied.append(pair_row(name, f"{scenario} [{extra}]", faulty, healthy, extra, planted))
                    print("  applied: " + _line(applied[-1]), flush=True)
            OPEN.close()
    return rows, applied, unscored


PIPELINE_PAIRS = (
    # label, (scenario, extra args) with the cause, (scenario, extra args) without it, lever
    ("cold vs warm cache", ("cold-cache", []), ("steady", []), "cache_hits"),
    # the same allocation work with the start-up heap frozen: the long full collections gone, the
    # work kept (the what-if removes stalls, not work; against `steady` it also removed the work)
    ("GC pauses vs frozen heap", ("gc-pressure", []), ("gc-pressure", ["--gc-freeze", "on"]), "no_gc_stalls"),
    ("1 vs 2 model workers", ("steady", ["--workers", "1"]), ("steady", ["--workers", "2"]), "replicas+1"),
    ("fp32 vs int8", ("steady", ["--dtype", "fp32"]), ("steady", ["--dtype", "int8"]), "forward_as"),
)


def pipeline_run(tmp: Path, label: str, scenario: str, extra: list[str], duration: float, rps: float):
    out = tmp / f"{label}.jsonl"
    cmd = [
        sys.executable,
        "-c",
        "from tailscope.cli.main import entrypoint; entrypoint()",
        "pipeline",
        "run",
        "--scenario",
        scenario,
        "--device",
        "cpu",
        "--duration",
        str(duration),
        "--rps",
        str(rps),
        "--out",
        str(out),
        *extra,
    ]
    subprocess.run(cmd, check=True, cwd=ROOT, stdout=subprocess.DEVNULL)
    return frame_of(out)


def pipeline_rows(duration: float, rps: float) -> list[dict]:
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        t = Path(tmp)
        for i, (label, (sa, ea), (sb, eb), lever) in enumerate(PIPELINE_PAIRS):
            faulty = pipeline_run(t, f"a{i}", sa, ea, duration, rps)
            fixed = pipeline_run(t, f"b{i}", sb, eb, duration, rps)
            rows.append(pair_row("reference pipeline", label, faulty, fixed, lever))
            print(_line(rows[-1]), flush=True)
    return rows


def _line(r: dict) -> str:
    flag = "" if r["material"] else "  (cause not material)"
    return (
        f"{r['family']:18s} {r['cause']:20s} {r['lever']:34s} faulty p99 {r['faulty_p99']:8.1f}  "
        f"p50 {r['pred_p50']:7.1f}/{r['meas_p50']:7.1f}  p99 {r['pred_p99']:8.1f}/{r['meas_p99']:8.1f}  "
        f"error {r['error']:6.1%}{flag}"
    )


def table(rows: list[dict]) -> str:
    out = [
        "| family | cause removed | lever | faulty p50 / p99 | predicted p50 / measured "
        "| predicted p99 / measured | p99 error |",
        "|---|---|---|---:|---:|---:|---:|",
    ]
    for r in rows:
        mark = "" if r["material"] else " (not material)"
        out.append(
            f"| {r['family']} | {r['cause']}{mark} | `{r['lever']}` | "
            f"{r['faulty_p50']:.1f} / {r['faulty_p99']:.1f} | "
            f"{r['pred_p50']:.1f} / {r['meas_p50']:.1f} | {r['pred_p99']:.1f} / {r['meas_p99']:.1f} | "
            f"{r['error']:.1%} |"
        )
    errors = [r["error"] for r in rows]
    material = [r["error"] for r in rows if r["material"]]
    out.append("")
    out.append(
        f"{len(rows)} pairs: median p99 error {statistics.median(errors):.1%}, largest {max(errors):.1%}, "
        f"over 25 %: {sum(e > 0.25 for e in errors)}; material causes only ({len(material)}): median "
        f"{statistics.median(material) if material else 0:.1%}, largest {max(material, default=0):.1%}."
    )
    return "\n".join(out)


def timing(requests: int, repeats: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        started = time.perf_counter()
        frame = simulated(Path(tmp), "big", "gc-pressure", 0, requests)
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
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    if args.what == "timing":
        timing(args.requests or 77_000, args.repeats)
        return 0
    if args.what == "blind":
        families = blind_families() if args.families == "all" else args.families.split(",")
        rows, applied, unscored = blind_rows(families, args.requests or 4000, 0)
        print("\nend to end (the fix for what the diagnosis names):")
        print(table(rows))
        print("\nthe lever applied (a planted cause the diagnosis missed given as a finding from the truth):")
        print(table(applied))
        print("not scored (two causes, or a mechanism with no lever): " + "; ".join(unscored))
        return 0
    if args.what == "sim":
        families = list(FAMILIES) if args.families == "all" else args.families.split(",")
        rows = sim_rows(families, args.requests or 4000, args.seeds)
    else:
        rows = pipeline_rows(args.duration, args.rps)
    print()
    print(table(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
