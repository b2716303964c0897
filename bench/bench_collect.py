"""Load `tailscope collect` over loopback with several real OpenTelemetry SDK exporters.

Each exporter is its own process: a TracerProvider whose BatchSpanProcessor sends protobuf through
the SDK's OTLPSpanExporter (which retries 429/503, honouring Retry-After) to a `tailscope collect`
on a free 127.0.0.1 port. Every exporter creates traces (a server root and three children, a few
attributes each) at a fixed rate for `--seconds`, then flushes. Reported: spans created and stored
(they must be equal), sustained spans/s stored, the collector's peak RSS, the HTTP answers the
exporters got (429/503 included), and the collector's own summary line. Bounded: the load stops by
itself after --seconds plus the time to drain.

    python bench/bench_collect.py                         # 60 s, 4 exporters x 2,000 spans/s
    python bench/bench_collect.py --seconds 30 --exporters 6 --rate 3000 --queue-requests 8
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from collector_process import start_collector
from machine_info import machine

ROOT = Path(__file__).resolve().parent.parent


def exporter(index: int, url: str, seconds: float, rate: int, results: mp.Queue) -> None:
    """One exporter process: create `rate` spans/s for `seconds`, flush, report what happened."""
    import requests
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExportResult

    statuses: Counter[int] = Counter()
    outcomes: Counter[str] = Counter()
    session = requests.Session()
    session.hooks["response"].append(lambda response, *a, **k: statuses.update([response.status_code]))

    class Counting(OTLPSpanExporter):
        def export(self, spans):  # type: ignore[no-untyped-def]
            result = super().export(spans)
            outcomes["ok" if result is SpanExportResult.SUCCESS else "failed"] += 1
            return result

    provider = TracerProvider(
        resource=Resource.create({"service.name": f"bench-{index}", "host.name": "bench"})
    )
    provider.add_span_processor(
        BatchSpanProcessor(
            Counting(endpoint=url, timeout=30, session=session),
            max_queue_size=1_000_000,
            max_export_batch_size=512,
            schedule_delay_millis=100,
        )
    )
    tracer = provider.get_tracer("bench.collect")
    created = 0
    started = time.monotonic()
    while (elapsed := time.monotonic() - started) < seconds:
        target = int(elapsed * rate)
        while created < target:
            with tracer.start_as_current_span("POST /predict", attributes={"http.route": "/predict"}):
                for stage in ("tokenize", "model.forward", "serialize"):
                    with tracer.start_as_current_span(stage, attributes={"batch.size": 8, "stage": stage}):
                        pass
            created += 4
        time.sleep(0.002)
    produced = time.monotonic() - started
    flushed = provider.force_flush(300_000)
    provider.shutdown()
    results.put(
        {
            "index": index,
            "created": created,
            "produce_seconds": produced,
            "drain_seconds": time.monotonic() - started - produced,
            "flushed": flushed,
            "statuses": dict(statuses),
            "exports": dict(outcomes),
        }
    )


def peak_rss(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seconds", type=float, default=60.0, help="how long the exporters produce")
    parser.add_argument("--exporters", type=int, default=4, help="concurrent exporter processes")
    parser.add_argument("--rate", type=int, default=2000, help="spans/s each exporter creates")
    parser.add_argument("--queue-requests", type=int, default=16, help="collect --queue-requests")
    parser.add_argument("--flush-interval-ms", type=int, default=200, help="collect --flush-interval-ms")
    parser.add_argument("--ack", choices=("queued", "committed"), default="queued", help="collect --ack")
    parser.add_argument("--db", help="store file (default: a temporary one)")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    args = parser.parse_args()

    tmp = tempfile.TemporaryDirectory(prefix="bench-collect-")
    db_path = Path(args.db) if args.db else Path(tmp.name) / "store.duckdb"
    collector, bench_url, lines = start_collector(
        db_path, "bench",
        "--queue-requests", str(args.queue_requests), "--flush-interval-ms", str(args.flush_interval_ms),
        "--stats-interval", "5", "--ack", args.ack, echo=True,
    )  # fmt: skip
    url = [bench_url]
    if not url[0]:
        collector.kill()
        print("collect did not start", file=sys.stderr)
        return 1

    context = mp.get_context("spawn")
    results: mp.Queue = context.Queue()
    started = time.monotonic()
    workers = [
        context.Process(target=exporter, args=(i, url[0], args.seconds, args.rate, results))
        for i in range(args.exporters)
    ]
    for worker in workers:
        worker.start()
    reports = [results.get(timeout=args.seconds + 600) for _ in workers]
    for worker in workers:
        worker.join(30)
    wall = time.monotonic() - started
    rss = peak_rss(collector.pid)
    collector.terminate()
    code = collector.wait(120)
    time.sleep(0.2)

    import duckdb

    with duckdb.connect(str(db_path), read_only=True) as conn:
        stored = conn.execute("SELECT count(*) FROM otel_traces WHERE RunLabel = 'bench'").fetchone()[0]
    statuses: Counter[str] = Counter()
    failed = 0
    for report in reports:
        statuses.update({str(k): v for k, v in report["statuses"].items()})
        failed += report["exports"].get("failed", 0)
    created = sum(r["created"] for r in reports)
    summary = {
        "machine": machine(),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "command": " ".join(["python", "bench/bench_collect.py", *sys.argv[1:]]),
        "ack": args.ack,
        "queue_requests": args.queue_requests,
        "exporters": args.exporters,
        "rate_per_exporter": args.rate,
        "seconds": args.seconds,
        "spans_created": created,
        "spans_stored": stored,
        "equal": created == stored,
        "wall_seconds": round(wall, 1),
        "stored_per_second": round(stored / wall),
        "max_drain_seconds": round(max(r["drain_seconds"] for r in reports), 1),
        "http_statuses": dict(statuses),
        "throttled_429_503": statuses.get("429", 0) + statuses.get("503", 0),
        "failed_exports": failed,
        "collector_peak_rss_mib": round(rss / 2**20),
        "collector_exit": code,
        "collector_summary": next((x for x in reversed(lines) if "stopped" in x), ""),
    }
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        for key, value in summary.items():
            print(f"{key:>24}: {value}")
    return 0 if created == stored and code == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
