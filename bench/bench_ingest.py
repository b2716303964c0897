"""Ingest benchmark: bare JSON decode vs `tailscope ingest` end to end, OTLP JSON lines and protobuf.

    python bench/bench_ingest.py                    # 1 M spans, JSON lines and length-prefixed protobuf
    python bench/bench_ingest.py --spans 5000000    # ~2 GB of JSON lines: the peak-RSS check

Prints the machine, date, command and every figure; paste its output into bench/RESULTS.md.
Data files are generated once into bench/data/ (gitignored) by bench/gen_otlp.py.

Figures:
- bare decode: every line of the file (already in memory) through orjson.loads and through untyped
  msgspec.json.decode, cyclic GC on (as a plain script runs) and off; the baseline is the fastest.
- ingest: `tailscope ingest FILE --db <fresh> --run bench --json` in a subprocess, wall clock,
  user+system CPU of it and its workers, and the largest process's peak RSS.
- refresh_run: the analysis layer's derived-table rebuild of the whole run, timed on its own
  afterwards (the ingest itself derives inside its transaction).
- peak RSS: of the largest process of the ingest (the loader or a decode worker), measured by a
  small launcher process so that this process's own memory is not counted.
"""

from __future__ import annotations

import argparse
import datetime
import gc
import json
import resource
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from machine_info import machine

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent


def ensure_data(spans: int, proto: bool) -> Path:
    path = HERE / "data" / f"otlp_{spans}.{'pb' if proto else 'jsonl'}"
    if not path.exists():
        command = [sys.executable, str(HERE / "gen_otlp.py"), "--spans", str(spans)] + (
            ["--proto"] if proto else []
        )
        subprocess.run(command, check=True)
    return path


def bare_json_decode(path: Path) -> dict[str, float]:
    import msgspec
    import orjson

    with open(path, "rb") as f:
        lines = f.readlines()
    decoder = msgspec.json.Decoder()
    out: dict[str, float] = {}
    for gc_on in (True, False):
        for name, decode in (("orjson.loads", orjson.loads), ("msgspec.json.decode", decoder.decode)):
            if not gc_on:
                gc.disable()
            started, cpu = time.perf_counter(), time.process_time()
            for line in lines:
                decode(line)
            label = f"{name} (gc {'on' if gc_on else 'off'})"
            out[label] = time.perf_counter() - started
            out[label + " cpu"] = time.process_time() - cpu
            gc.enable()
    return out


def bare_proto_parse(path: Path) -> float:
    from opentelemetry.proto.trace.v1 import trace_pb2

    data = path.read_bytes()
    started = time.perf_counter()
    offset = 0
    while offset < len(data):
        length = int.from_bytes(data[offset : offset + 4], "big")
        trace_pb2.TracesData().ParseFromString(data[offset + 4 : offset + 4 + length])
        offset += 4 + length
    return time.perf_counter() - started


LAUNCHER = """
import resource, subprocess, sys
done = subprocess.run(sys.argv[1:])
print(f"peak_rss_kib={resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss}", file=sys.stderr)
sys.exit(done.returncode)
"""


def ingest(path: Path) -> dict[str, object]:
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "bench.duckdb"
        command = [
            sys.executable,
            "-c",
            "from tailscope.cli.main import entrypoint; entrypoint()",
            "ingest",
            str(path),
            "--db",
            str(db),
            "--run",
            "bench",
            "--json",
        ]
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        started = time.perf_counter()
        # Through a small launcher that reports its children's peak RSS: a child forked straight
        # from this process would count this process's pages (the bare-decode lines, GBs) as its own.
        launched = [sys.executable, "-c", LAUNCHER, *command]
        done = subprocess.run(launched, capture_output=True, text=True, cwd=ROOT, check=False)
        wall = time.perf_counter() - started
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if done.returncode != 0:
            raise SystemExit(f"ingest failed ({done.returncode}): {done.stderr[-2000:]}")
        summary = json.loads(done.stdout)
        peak_kib = int(done.stderr.strip().splitlines()[-1].removeprefix("peak_rss_kib="))
        derive = time_refresh_run(db)
    return {
        "command": shlex.join(["tailscope", *command[3:]]),  # what the subprocess runs
        "wall_s": wall,
        "cpu_s": (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime),
        "peak_rss_mib": peak_kib / 1024,
        "spans": summary["spans"],
        "refresh_run_s": derive,
    }


def time_refresh_run(db: Path) -> float:
    sys.path.insert(0, str(ROOT))
    from tailscope import sql
    from tailscope.store.duckdb.connection import connect_writer
    from tailscope.store.duckdb.derive import refresh_run

    with connect_writer(db) as conn:
        conn.begin()
        conn.execute(sql.load("derive_state_forget"), ["bench"])  # so the whole run is derived again
        started = time.perf_counter()
        refresh_run(conn, "bench")
        seconds = time.perf_counter() - started
        conn.rollback()
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--spans", type=int, default=1_000_000)
    parser.add_argument("--no-proto", action="store_true", help="skip the protobuf figures")
    args = parser.parse_args()
    print(f"machine: {machine()}")
    print(f"date:    {datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M UTC}")
    print(f"command: {shlex.join([sys.executable, *sys.argv])}")

    path = ensure_data(args.spans, proto=False)
    print(f"\nOTLP JSON lines: {path.name}, {path.stat().st_size / 2**20:,.0f} MiB, {args.spans:,} spans")
    bare = bare_json_decode(path)
    for name, seconds in bare.items():
        if not name.endswith(" cpu"):
            cpu = bare[name + " cpu"]
            print(
                f"  bare decode {name:<28} {seconds:7.2f} s  {args.spans / seconds:>10,.0f} spans/s  "
                f"(CPU {cpu:.2f} s)"
            )
    fastest = min(("orjson.loads (gc on)", "msgspec.json.decode (gc on)"), key=bare.__getitem__)
    baseline, baseline_cpu = bare[fastest], bare[fastest + " cpu"]
    result = ingest(path)
    print(f"  ingest: {result['command']}")
    wall, cpu, rss = result["wall_s"], result["cpu_s"], result["peak_rss_mib"]
    rate = result["spans"] / wall
    print(
        f"  ingest end to end {wall:7.2f} s  {rate:>10,.0f} spans/s  = {wall / baseline:.2f}x the bare decode"
    )
    print(f"  (baseline {baseline:.2f} s: {fastest}, the faster decoder with gc on)")
    print(
        f"  ingest CPU (all processes) {cpu:.1f} s = {cpu / baseline_cpu:.2f}x the baseline's CPU "
        f"({baseline_cpu:.2f} s); peak RSS of the largest process {rss:,.0f} MiB"
    )
    print(f"  of which refresh_run (derived tables, analysis layer): {result['refresh_run_s']:.2f} s")

    if not args.no_proto:
        path = ensure_data(args.spans, proto=True)
        print(f"\nOTLP protobuf, length-prefixed: {path.name}, {path.stat().st_size / 2**20:,.0f} MiB")
        parse = bare_proto_parse(path)
        print(f"  bare TracesData.ParseFromString {parse:7.2f} s  {args.spans / parse:>10,.0f} spans/s")
        result = ingest(path)
        wall, cpu, rss = result["wall_s"], result["cpu_s"], result["peak_rss_mib"]
        print(f"  ingest end to end {wall:7.2f} s  {result['spans'] / wall:>10,.0f} spans/s")
        print(
            f"  ingest CPU {cpu:.1f} s; peak RSS {rss:,.0f} MiB; refresh_run {result['refresh_run_s']:.2f} s"
        )


if __name__ == "__main__":
    main()
