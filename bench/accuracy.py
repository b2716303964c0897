"""Diagnosis accuracy on every planted scenario of the simulator: scenario x seed x naming (x format).

    .venv/bin/python bench/accuracy.py [--requests 3000] [--seeds 5] [--jaeger] [--write]
        [--topologies pipeline,gateway,region,readthrough,queue-worker,<blind families> | blind | all]
        [--pairs] [--external DIR]

`region`, `readthrough` and `queue-worker` are three more held-out families, and `--pairs` adds the
two-cause runs; with either (or several topologies) a summary follows: top-finding accuracy per
family, two-cause recall, false alarms at >= 0.5 and a reliability table over every run (see
bench/accuracy_runs.py).

The blind families of issue 25 (reference_pipeline/simulate/blind.py: edge-gateway, bff-fanout,
pool-retry, throttled-embedder, event-enricher and the untouched kafka-scorer, recsys-ranker and
ads-auction; `--topologies blind` for all eight) run every scenario x seed through a file in the seed's format
(Zipkin v2, Jaeger or OTLP) and the real loader, scored against their truth (per cause: pattern,
accept, side);
`--external DIR` scores a directory of trace files with a truth.json the same way. With either,
or several topologies, the per-family table and the leave-one-family-out reliability table of
bench/blind_runs.py follow.

`--topologies` picks the span trees: `pipeline` (default) is the reference pipeline's, in both
namings; `gateway` is the held-out family (reference_pipeline/simulate/gateway.py): the same planted
mechanisms behind a two-tier service of another shape (API gateway root, gRPC call to a model server,
deeper nesting, no queue or lock span, host + pid instances, GC reported as `GC pause` events or not
at all). Gateway runs always go through a trace file and the real loader: even seeds OTLP/JSON lines,
odd seeds Jaeger JSON; seeds 0, 1 (mod 4) report GC events, seeds 2, 3 do not; the gateway's own work
per request is 0.12 / 8 / 25 ms (seed mod 3), so the model server's call covers from ~97 % down to
about half of the gateway's span.

Each seed also varies the load (0.4 / 0.5 / 0.65 of capacity) and the number of server processes
(2 / 3 / 4), so the table covers several rates and concurrencies. Spans go from `simulate_columns`
straight into an in-memory store (the `--jaeger` rows instead go through a Jaeger JSON file and the
real loader); the diagnosis then reads them like any run. The top finding must be the planted
cause, and steady must raise nothing above 0.5 but compute_bound. With --write the tables replace the
"Diagnosis accuracy" part of bench/RESULTS.md.

The calibration table groups every finding of every run by confidence and counts how often a
finding in that band is the planted cause (steady's compute_bound is left out: it is allowed there).
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import time
from collections import defaultdict
from datetime import UTC, datetime
from pathlib import Path

import duckdb

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.accuracy_runs import CAUSE, FAMILIES, SIDE, family_rows, pair_rows, summary  # noqa: E402
from bench.blind_runs import Scored, blind_rows, external_rows, family_tables, from_row, misses  # noqa: E402
from reference_pipeline.simulate.api import simulate_columns, simulate_to_file  # noqa: E402
from reference_pipeline.simulate.blind import MODULES as BLIND  # noqa: E402
from reference_pipeline.simulate.blind import UNTOUCHED  # noqa: E402
from reference_pipeline.simulate.config import SCENARIOS  # noqa: E402
from tailscope.analysis.diagnosis import diagnose_frame  # noqa: E402
from tailscope.analysis.diagnosis.load import load_frame  # noqa: E402
from tailscope.store.duckdb.connection import ensure_schema  # noqa: E402
from tailscope.store.duckdb.reader import DuckDBReader  # noqa: E402

PLANTED = {
    "steady": None,
    "burst": "queueing",
    "gc-pressure": "gc_pause",
    "lock-contention": "lock_contention",
    "cold-cache": "cache_miss",
    "key-expiry": "cache_miss",
    "slow-downstream": "slow_dependency",
    "cold-start": "cold_start",
    "network-jitter": "network",
}
LOADS = (0.4, 0.5, 0.65)
WORKERS = (2, 3, 4)
BANDS = ((0.0, 0.2), (0.2, 0.5), (0.5, 0.8), (0.8, 1.01))
BEGIN = "<!-- diagnosis-accuracy:begin -->"
END = "<!-- diagnosis-accuracy:end -->"
HELD_OUT_BEGIN = "<!-- diagnosis-heldout:begin -->"
HELD_OUT_END = "<!-- diagnosis-heldout:end -->"
OPEN = [name for name in BLIND if name not in UNTOUCHED]  # `blind` and `all`: held-out ones only by name
SUMMARY_BEGIN = "<!-- diagnosis-families:begin -->"
SUMMARY_END = "<!-- diagnosis-families:end -->"


def options(seed: int) -> dict:
    return {"load": LOADS[seed % 3], "workers": WORKERS[seed % 3]}


def diagnose_columns(scenario: str, requests: int, seed: int, naming: str):
    conn = duckdb.connect()
    ensure_schema(conn)
    for batch in simulate_columns(scenario, requests, seed, naming=naming, **options(seed)):
        conn.register("acc_batch", batch.to_arrow())
        conn.execute("INSERT INTO otel_traces SELECT *, 'run' FROM acc_batch").fetchall()
        conn.unregister("acc_batch")
    return diagnose_frame(load_frame(DuckDBReader(conn), "run"))


def diagnose_jaeger(scenario: str, requests: int, seed: int, naming: str):
    from ingest.loader import load_paths
    from tailscope.analysis.diagnosis import diagnose
    from tailscope.store.duckdb.store import DuckDBStore as Store

    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "run.json"
        simulate_to_file(out, scenario, requests, seed, naming=naming, fmt="jaeger", **options(seed))
        db = Path(tmp) / "store.duckdb"
        load_paths([out], db, "run")
        return diagnose(Store(db), "run")


GATEWAY_MS = ((0.12, 0.4), (8.0, 0.2), (25.0, 0.1))  # the gateway's own work: median ms, sigma


def gateway_setup(seed: int) -> tuple[str, bool, tuple[float, float]]:
    """Format, GC reporting and gateway work of a held-out (gateway) run: they vary with the seed."""
    return ("otlp" if seed % 2 == 0 else "jaeger"), seed % 4 < 2, GATEWAY_MS[seed % 3]


def diagnose_gateway(scenario: str, requests: int, seed: int):
    from ingest.loader import load_paths
    from tailscope.analysis.diagnosis import diagnose
    from tailscope.store.duckdb.store import DuckDBStore as Store

    fmt, gc_events, gateway_ms = gateway_setup(seed)
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / ("run.jsonl" if fmt == "otlp" else "run.json")
        simulate_to_file(out, scenario, requests, seed, fmt="otlp-json" if fmt == "otlp" else "jaeger",
                         topology="gateway", gc_events=gc_events, gateway_ms=gateway_ms, **options(seed))
        db = Path(tmp) / "store.duckdb"
        load_paths([out], db, "run")
        return diagnose(Store(db), "run")


def verdict(scenario: str, findings) -> bool:
    planted = PLANTED[scenario]
    if planted is None:
        return all(f.pattern == "compute_bound" or f.confidence <= 0.5 for f in findings)
    return bool(findings) and findings[0].pattern == planted


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--namings", default="reference,alt")
    parser.add_argument("--scenarios", default=",".join(s for s in SCENARIOS if s in PLANTED))
    parser.add_argument(
        "--jaeger", action="store_true", help="also one seed per scenario through Jaeger JSON"
    )
    parser.add_argument("--topologies", default="pipeline",
                        help="comma-separated: pipeline, gateway, region, readthrough, queue-worker, the "
                        f"blind families ({', '.join(BLIND)}; `blind`: all of them but the held-out ones in "
                        "blind.UNTOUCHED, which run only when named), or all")
    parser.add_argument("--external", action="append", default=[], type=Path, metavar="DIR",
                        help="also score a directory of trace files with a truth.json (as "
                        "/work/shared/families/scoring_api.py OUT writes), through the loader and diagnose")
    parser.add_argument("--pairs", action="store_true",
                        help="also the two-cause runs (accuracy_runs.PAIRS) in every topology picked")
    parser.add_argument("--write", action="store_true", help="write the tables into bench/RESULTS.md")
    parser.add_argument("--cache", type=Path, default=os.environ.get("TAILSCOPE_BENCH_CACHE") or None,
                        metavar="DIR", help="keep the blind families' loaded stores in DIR and reuse them "
                        "while the simulator, loaders and store are unchanged (bench/run_cache.py; "
                        "default: $TAILSCOPE_BENCH_CACHE, else none)")
    args = parser.parse_args(argv)
    topologies = args.topologies.split(",")
    if topologies == ["all"]:
        topologies = ["pipeline", "gateway", *FAMILIES, *OPEN]
    if "blind" in topologies:
        topologies = [t for t in topologies if t != "blind"] + [b for b in OPEN if b not in topologies]
    unknown = set(topologies) - {"pipeline", "gateway", *FAMILIES, *BLIND}
    if unknown:
        parser.error(f"unknown topologies: {', '.join(sorted(unknown))}")
    ok = True
    single: list = []
    if "pipeline" in topologies:
        rows = pipeline_rows(args)
        text = report(rows, args)
        print(text)
        if args.write:
            write(text)
        ok &= all(r[5] for r in rows)
        single += rows
    if "gateway" in topologies:
        rows = gateway_rows(args)
        text = report(rows, args, held_out=True)
        print(text)
        if args.write:
            write(text, HELD_OUT_BEGIN, HELD_OUT_END)
        ok &= all(r[5] for r in rows)
        single += [(r[0], "gateway", *r[2:]) for r in rows]
    families = [t for t in topologies if t in FAMILIES]
    if families:
        rows = family_rows(families, args.requests, args.seeds, options, _line)
        ok &= all(r[5] for r in rows)
        single += rows
    blind = blind_rows([t for t in topologies if t in BLIND], args.requests, args.seeds, _line, args.cache)
    external = [r for directory in args.external for r in external_rows(directory, _line)]
    pairs = []
    if args.pairs:
        def in_memory(scenario: str, requests: int, seed: int):
            return diagnose_columns(scenario, requests, seed, "alt")

        pairs = pair_rows(topologies, args.requests, args.seeds, options, in_memory, _line)
    old_families = [t for t in topologies if t not in BLIND]
    if families or args.pairs or len(old_families) > 1:
        command = (
            f"bench/accuracy.py --topologies {','.join(topologies)} --requests {args.requests} "
            f"--seeds {args.seeds} --namings {args.namings}{' --jaeger' if args.jaeger else ''}"
            f"{' --pairs' if args.pairs else ''}"
        )
        head = f"`{command}`, {datetime.now(UTC):%Y-%m-%d}, {platform.machine()}."
        text = f"{SUMMARY_BEGIN}\n\n{head}\n\n{summary(single, pairs)}\n\n{SUMMARY_END}"
        print(text)
        if args.write:
            write(text, SUMMARY_BEGIN, SUMMARY_END)
    scored = [from_row(r, _causes) for r in single + [p[:7] for p in pairs]] + blind + external
    if blind or external or len(topologies) > 1:
        print(f"\nPer family (issue 25), --requests {args.requests} --seeds {args.seeds}:\n")
        print(family_tables(scored))
        print("\nRuns with a wrong top finding or a false alarm:\n")
        print(misses(scored))
    ok &= all(r.top_ok() for r in blind + external)
    return 0 if ok else 1


def _causes(scenario: str) -> list[dict]:
    """The truth of a scenario of the project's own families (accuracy_runs.CAUSE and SIDE)."""
    return [{"pattern": CAUSE[s], "accept": [], "side": sorted(SIDE.get(s, ()))}
            for s in scenario.split("+") if s in CAUSE]


__all__ = ["Scored", "main"]


def gateway_rows(args) -> list:
    rows = []
    for scenario in args.scenarios.split(","):
        for seed in range(args.seeds):
            started = time.perf_counter()
            result = diagnose_gateway(scenario, args.requests, seed)
            fmt, gc_events, gateway_ms = gateway_setup(seed)
            label = f"gw {gateway_ms[0]:g} ms, " + ("GC events" if gc_events else "no GC events")
            ok = verdict(scenario, result.findings)
            rows.append((scenario, label, fmt, seed, result.findings, ok, time.perf_counter() - started))
            print(_line(rows[-1]), flush=True)
    return rows


def pipeline_rows(args) -> list:
    rows = []  # (scenario, naming, format, seed, findings, ok, seconds)
    for scenario in args.scenarios.split(","):
        for naming in args.namings.split(","):
            for seed in range(args.seeds):
                started = time.perf_counter()
                result = diagnose_columns(scenario, args.requests, seed, naming)
                rows.append(
                    (
                        scenario,
                        naming,
                        "otlp",
                        seed,
                        result.findings,
                        verdict(scenario, result.findings),
                        time.perf_counter() - started,
                    )
                )
                print(_line(rows[-1]), flush=True)
        if args.jaeger:
            result = diagnose_jaeger(scenario, args.requests, 100, "alt")
            rows.append(
                (scenario, "alt", "jaeger", 100, result.findings, verdict(scenario, result.findings), 0.0)
            )
            print(_line(rows[-1]), flush=True)
    return rows


def _top(findings) -> str:
    return f"{findings[0].pattern} {findings[0].confidence:.2f}" if findings else "(none)"


def _line(row) -> str:
    scenario, naming, fmt, seed, findings, ok, seconds = row
    rest = ", ".join(f"{f.pattern} {f.confidence:.2f}" for f in findings[1:3])
    verdict_text = "ok " if ok else "BAD"
    head = f"{scenario:16s} {naming:9s} {fmt:6s} seed {seed:3d}"
    return f"{head}: {verdict_text} {_top(findings)}  ({rest}) {seconds:.1f} s"


def report(rows, args, held_out: bool = False) -> str:
    by_cell = defaultdict(list)
    for row in rows:
        by_cell[(row[0], "gateway", "otlp, jaeger") if held_out else (row[0], row[1], row[2])].append(row)
    command = (
        f"bench/accuracy.py --topologies gateway --requests {args.requests} --seeds {args.seeds}"
        if held_out
        else f"bench/accuracy.py --requests {args.requests} --seeds {args.seeds}"
        f"{' --jaeger' if args.jaeger else ''}"
    )
    lines = [
        HELD_OUT_BEGIN if held_out else BEGIN,
        "",
        f"`{command}`, {datetime.now(UTC):%Y-%m-%d}, {platform.machine()}, "
        f"Python {platform.python_version()}. Seeds vary load {'/'.join(map(str, LOADS))} of capacity and "
        f"{'/'.join(map(str, WORKERS))} server processes. A cell lists each seed's top finding and "
        "confidence.",
        "",
    ]
    if held_out:
        variants = {r[3]: f"{r[2]}, {r[1]}" for r in rows}
        lines += [
            "Held-out seeds (format, gateway's own work, GC reporting): "
            + "; ".join(f"s{seed}: {text}" for seed, text in sorted(variants.items())) + ".",
            "",
        ]
    lines += [
        f"| scenario | planted cause | {'topology' if held_out else 'naming'} | format | correct | "
        "top finding per seed |",
        "|---|---|---|---|---|---|",
    ]
    for (scenario, naming, fmt), cell in by_cell.items():
        good = sum(r[5] for r in cell)
        tops = "; ".join((f"s{r[3]} " if held_out else "") + _top(r[4]) for r in cell)
        if PLANTED[scenario] is None:
            loud = [
                f"{f.pattern} {f.confidence:.2f}" for r in cell for f in r[4] if f.pattern != "compute_bound"
            ]
            tops += f" (others: {', '.join(loud) or 'none'})"
        lines.append(
            f"| {scenario} | {PLANTED[scenario] or '(none: no alarm > 0.5)'} | {naming} | {fmt} | "
            f"{good}/{len(cell)} | {tops} |"
        )
    total = sum(r[5] for r in rows)
    lines += [
        "",
        f"**{total}/{len(rows)} runs diagnosed correctly.**",
        "",
        f"Findings of where the rest of a material tail goes (`unexplained_tail`, below 0.5 by design): "
        f"{sum(f.pattern == 'unexplained_tail' for r in rows for f in r[4])} over {len(rows)} runs.",
        "",
        "Calibration: every finding of every run, by confidence band (steady's compute_bound and the "
        "unexplained_tail accounting left out).",
        "",
        "| confidence | findings | the planted cause | share |",
        "|---|---|---|---|",
    ]
    for lo, hi in BANDS:
        hits = n = 0
        for scenario, _naming, _fmt, _seed, findings, _ok, _s in rows:
            for f in findings:
                if PLANTED[scenario] is None and f.pattern == "compute_bound":
                    continue
                if f.pattern == "unexplained_tail":  # where the rest of the tail goes: not a cause
                    continue
                if lo <= f.confidence < hi:
                    n += 1
                    hits += f.pattern == PLANTED[scenario]
        share = f"{hits / n:.0%}" if n else "-"
        lines.append(f"| {lo:.1f}–{min(hi, 1.0):.1f} | {n} | {hits} | {share} |")
    lines += ["", HELD_OUT_END if held_out else END]
    return "\n".join(lines)


def write(text: str, begin: str = BEGIN, end: str = END) -> None:
    path = ROOT / "bench" / "RESULTS.md"
    body = path.read_text(encoding="utf-8")
    if begin in body and end in body:
        head, rest = body.split(begin, 1)
        body = head + text + rest.split(end, 1)[1]
    else:
        marker = "## Diagnosis\n"
        head, rest = body.split(marker, 1) if marker in body else (body + "\n", "")
        body = head + marker + "\n### Diagnosis accuracy\n\n" + text + "\n" + rest
    path.write_text(body, encoding="utf-8")


if __name__ == "__main__":
    sys.exit(main())
