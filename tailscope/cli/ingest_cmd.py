"""Load trace exports (files or folders) into the store.

Formats are detected from content: OTLP JSON (document, JSON lines, arrays), OTLP protobuf (raw or
length-prefixed), Jaeger UI JSON, Zipkin v2 JSON, the OpenTelemetry SDK console exporter's JSON (Ray
Serve), Triton's trace file and TorchServe's metrics log; gzip or zstd compressed or not. Each file is one
transaction. Strict by default: a malformed record rejects its whole file (one line on stderr,
exit code 2, store unchanged for that file); --skip-bad loads the good records and reports the rest.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

PROGRESS_MIN_BYTES = 16 << 20
EXIT_OK = 0
EXIT_BAD_INPUT = 2


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("paths", nargs="+", metavar="PATH", help="trace files or folders (recursive)")
    from tailscope.cli.store_arg import add_store_arguments

    add_store_arguments(parser)
    parser.add_argument("--run", metavar="LABEL", help="run label (default: the first file's name)")
    parser.add_argument(
        "--skip-bad", action="store_true", help="load good records, skip and count malformed ones"
    )
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")


class ProgressBar:
    """bytes read / total and spans/s on stderr: redrawn in place on a terminal, a line every 5 s
    otherwise; silent for inputs under PROGRESS_MIN_BYTES."""

    def __init__(self, stream=None) -> None:
        self.stream = stream if stream is not None else sys.stderr  # looked up now, not at import
        self.tty = self.stream.isatty()
        self.started = time.monotonic()
        self.last = 0.0
        self.drawn = False

    def __call__(self, done: int, total: int, spans: int) -> None:
        if total < PROGRESS_MIN_BYTES:
            return
        now = time.monotonic()
        if now - self.last < (0.25 if self.tty else 5.0) and done < total:
            return
        self.last = now
        elapsed = max(now - self.started, 1e-9)
        share = done / total if total else 1.0
        bar = "#" * int(share * 30)
        text = (
            f"[{bar:<30}] {done / 2**20:,.0f}/{total / 2**20:,.0f} MiB  "
            f"{spans:,} spans  {spans / elapsed:,.0f} spans/s"
        )
        if self.tty:
            self.stream.write("\r" + text)
        else:
            self.stream.write(text + "\n")
        self.stream.flush()
        self.drawn = True

    def close(self) -> None:
        if self.drawn and self.tty:
            self.stream.write("\n")
            self.stream.flush()


def run(args: argparse.Namespace) -> int:
    from ingest.loader import default_run_label, expand_paths, load_paths
    from tailscope.cli.store_arg import open_from

    store = open_from(args, "ingest", writing=True)
    if store is None:
        return EXIT_BAD_INPUT
    files = expand_paths(args.paths)
    label = args.run or default_run_label(args.paths)
    if not args.run and not args.json:
        print(f"run label: {label} (from the file name; choose one with --run)")
    bar = ProgressBar()
    try:
        summary = load_paths(files, store, label, skip_bad=args.skip_bad, progress=bar)
    finally:
        bar.close()
    for failed in summary.failed:
        print(failed.error, file=sys.stderr)
    if not files:
        print("tailscope ingest: no files found under " + " ".join(args.paths), file=sys.stderr)
    if args.json:
        print(json.dumps(summary.as_dict(), indent=2))
    else:
        rate = f"{summary.spans / summary.seconds:,.0f}" if summary.seconds > 0 else "-"
        print(
            f"run {label}: {len(summary.files)} files, {summary.spans:,} spans, {summary.traces:,} traces, "
            f"{summary.rejected:,} rejected, {summary.seconds:.2f} s ({rate} spans/s)"
        )
        duplicates = sum(f.duplicates for f in summary.files)
        if duplicates:
            print(f"  {duplicates:,} spans already in the run (or repeated in a file) were not added again")
        if summary.failed:
            print(f"  {len(summary.failed)} files rejected whole (store unchanged for them)")
        if summary.rejected:
            print(f"  skipped {summary.rejected:,} malformed records:")
            for reason, count in summary.reasons.most_common():
                print(f"    {count:>8,}  {reason}")
    return EXIT_BAD_INPUT if summary.failed or not files else EXIT_OK
