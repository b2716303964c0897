"""Flood `tailscope collect` with protobuf requests as fast as it accepts them, and watch the rate hold.

Several sender processes each post ExportTraceServiceRequest bodies of `--spans-per-request` spans
over loopback, back to back, retrying the same body after Retry-After when answered 429/503. Every
body is a template request made unique (fresh trace ids, times moved forward as a live service's
would be), so nothing is deduplicated away. Reported: spans accepted per second in each minute (or
each quarter of a short run), the collector's RSS sampled every second, and after SIGTERM whether
every acknowledged span is stored. Bounded: senders stop after --seconds.

    python bench/bench_collect_flood.py --seconds 600                 # the issue's 10-minute figure
    python bench/bench_collect_flood.py --seconds 60 --ack committed
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import signal
import sys
import tempfile
import time
from pathlib import Path

from collector_process import start_collector
from machine_info import machine

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def bodies(sender: int, spans: int):  # type: ignore[no-untyped-def]
    """Endless unique request bodies: one template, new trace ids and later times each time."""
    from bench.gen_otlp import requests, to_proto

    template = to_proto(next(requests(spans, spans, seed=sender)))
    all_spans = [s for rs in template.resource_spans for ss in rs.scope_spans for s in ss.spans]
    first = min(s.start_time_unix_nano for s in all_spans)
    extent = max(s.end_time_unix_nano for s in all_spans) - first + 1_000_000
    number = 0
    while True:
        number += 1
        shift = number * extent
        salt = sender.to_bytes(2, "big") + number.to_bytes(6, "big")
        for span in all_spans:
            span.trace_id = salt + span.trace_id[8:]
            span.start_time_unix_nano = first + shift + (span.start_time_unix_nano - first) % extent
            span.end_time_unix_nano = first + shift + (span.end_time_unix_nano - first) % extent
        yield template.SerializeToString(), len(all_spans)


def sender(index: int, url: str, seconds: float, spans: int, results: mp.Queue) -> None:
    import httpx

    accepted: list[tuple[float, int]] = []
    statuses: dict[str, int] = {}
    stop = time.monotonic() + seconds
    made = bodies(index, spans)
    with httpx.Client(timeout=120) as client:
        body, count = next(made)
        while time.monotonic() < stop:
            response = client.post(url, content=body, headers={"Content-Type": "application/x-protobuf"})
            statuses[str(response.status_code)] = statuses.get(str(response.status_code), 0) + 1
            if response.status_code == 200:
                accepted.append((time.time(), count))
                body, count = next(made)
            elif response.status_code in (429, 503):
                time.sleep(float(response.headers.get("Retry-After", "1")))
            else:
                raise SystemExit(f"sender {index}: HTTP {response.status_code}: {response.text[:200]}")
    results.put({"accepted": accepted, "statuses": statuses})


def rss_of(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def windows(accepted: list[tuple[float, int]], start: float, seconds: float) -> list[tuple[str, float]]:
    """Accepted spans/s per minute, or per quarter of a run shorter than 4 minutes."""
    width = 60.0 if seconds >= 240 else seconds / 4
    out = []
    for i in range(int(seconds // width)):
        low, high = start + i * width, start + (i + 1) * width
        spans = sum(n for t, n in accepted if low <= t < high)
        out.append((f"{i * width:.0f}-{(i + 1) * width:.0f} s", spans / width))
    return out


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--senders", type=int, default=4)
    parser.add_argument("--spans-per-request", type=int, default=2000)
    parser.add_argument("--ack", choices=("queued", "committed"), default="queued")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    tmp = tempfile.TemporaryDirectory(prefix="bench-flood-")
    db_path = Path(tmp.name) / "store.duckdb"
    collector, url, lines = start_collector(db_path, "flood", "--ack", args.ack)
    if not url:
        collector.kill()
        print("collect did not start:\n" + "\n".join(lines), file=sys.stderr)
        return 1
    context = mp.get_context("spawn")
    results: mp.Queue = context.Queue()
    procs = [
        context.Process(target=sender, args=(i, url, args.seconds, args.spans_per_request, results))
        for i in range(args.senders)
    ]
    start = time.time()
    for proc in procs:
        proc.start()
    rss: list[int] = []
    while any(p.is_alive() for p in procs) and results.qsize() < len(procs):
        rss.append(rss_of(collector.pid))
        time.sleep(1.0)
    reports = [results.get(timeout=300) for _ in procs]
    for proc in procs:
        proc.join(30)
    collector.send_signal(signal.SIGTERM)
    code = collector.wait(300)
    import duckdb

    with duckdb.connect(str(db_path), read_only=True) as conn:
        stored = conn.execute("SELECT count(*) FROM otel_traces").fetchone()[0]
    accepted = [a for r in reports for a in r["accepted"]]
    acknowledged = sum(n for _, n in accepted)
    per_window = windows(accepted, start, args.seconds)
    summary = {
        "machine": machine(),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "command": " ".join(["python", "bench/bench_collect_flood.py", *sys.argv[1:]]),
        "accepted_spans_per_s": round(acknowledged / args.seconds),
        "per_window_spans_per_s": {name: round(rate) for name, rate in per_window},
        "last_over_first": round(per_window[-1][1] / per_window[0][1], 2) if per_window[0][1] else None,
        "collector_rss_max_mib": round(max(rss, default=0) / 2**20),
        "acknowledged_spans": acknowledged,
        "stored_spans": stored,
        "all_acknowledged_stored": stored >= acknowledged,
        "collector_exit": code,
        "http_statuses": {k: sum(r["statuses"].get(k, 0) for r in reports) for k in ("200", "429", "503")},
    }
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        for key, value in summary.items():
            print(f"{key:>24}: {value}")
    return 0 if stored >= acknowledged and code == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
