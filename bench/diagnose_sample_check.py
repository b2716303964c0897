"""Does a sampled diagnosis name what the full read names? On a store built by bench_diagnose.py.

    .venv/bin/python bench/diagnose_sample_check.py STORE [--run bench] [--max-spans 150000]
        [--reference-spans 0 (the full read; N: a larger sample, where the full read would not fit)]

Diagnoses the run twice, prints the findings at >= 0.5 of each (pattern, confidence, share), the
sample's stated p99 interval against the reference's p99, CPU and peak RSS; exit 1 when the top
findings differ or a finding at >= 0.5 of the sample is not one of the reference's.
"""

from __future__ import annotations

import argparse
import resource
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tailscope.analysis.diagnosis import diagnose  # noqa: E402
from tailscope.analysis.diagnosis.sample import DEFAULT_MAX_SPANS  # noqa: E402
from tailscope.store.duckdb.store import DuckDBStore as Store  # noqa: E402


def _named(result) -> list[tuple[str, float, float | None]]:
    return [
        (f.pattern, round(f.confidence, 2), None if f.share is None else round(f.share, 3))
        for f in result.findings
        if f.confidence >= 0.5
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("store", type=Path)
    parser.add_argument("--run", default="bench")
    parser.add_argument("--max-spans", type=int, default=DEFAULT_MAX_SPANS)
    parser.add_argument("--reference-spans", type=int, default=0)
    args = parser.parse_args(argv)
    results = {}
    for label, limit in (("sample", args.max_spans), ("reference", args.reference_spans)):
        started = time.process_time()
        result = diagnose(Store(args.store), args.run, max_spans=limit)
        cpu = time.process_time() - started
        results[label] = result
        read = result.sampling.get("spans_read", result.spans) if result.sampling else result.spans
        peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(
            f"{label} (max_spans {limit:,}): {read:,} spans read, CPU {cpu:.2f} s, peak RSS "
            f"{peak_mb:,.0f} MB; p99 {result.tail['p99_ms']} ms"
            + (f" (95 % over windows {result.sampling['p99_ms_95ci']})" if result.sampling else "")
            + f"; named {_named(result)}",
            flush=True,
        )
    sample, reference = results["sample"], results["reference"]
    same_top = bool(sample.findings and reference.findings) and (
        sample.findings[0].pattern == reference.findings[0].pattern
    )
    extra = {p for p, _, _ in _named(sample)} - {p for p, _, _ in _named(reference)} - {"compute_bound"}
    print(f"same top finding: {same_top}; named only in the sample: {sorted(extra) or 'none'}")
    return 0 if same_top and not extra else 1


if __name__ == "__main__":
    sys.exit(main())
