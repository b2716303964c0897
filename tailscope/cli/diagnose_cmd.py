"""Name the causes of a run's latency tail, with the evidence behind each and what to change.

Every finding has a pattern (one of tailscope.vocabulary.PATTERNS: gc_pause, cpu_throttling,
lock_contention, queueing, cache_miss, cold_start, slow_dependency, timeout_retry, large_payload,
network, compute_bound, unexplained_tail), a confidence in 0..1, the stage and span it is about, the
statistic and numbers behind it, and advice. Findings come most confident first. Exit code 0 whatever
is found; 2 when the run is not in the store (the available runs are listed).
"""

from __future__ import annotations

import argparse
import json
import textwrap

# the default of `--max-spans` (tailscope.analysis.diagnosis.sample.DEFAULT_MAX_SPANS; no numpy import here)
DEFAULT_MAX_SPANS = 150_000
EXIT_OK = 0
EXIT_BAD_INPUT = 2


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from tailscope.cli.store_arg import add_store_arguments

    add_store_arguments(parser)
    parser.add_argument("--run", metavar="LABEL", help="run label (default: the store's only run)")
    parser.add_argument("--json", action="store_true", help='print {"run", "requests", "findings"} as JSON')
    parser.add_argument(
        "--max-spans",
        type=int,
        default=DEFAULT_MAX_SPANS,
        metavar="N",
        help="a run of more spans is diagnosed from the requests of a few time windows spread over it, "
        f"about N spans in all; the sampling error is reported (default {DEFAULT_MAX_SPANS:,}; "
        "0: read the whole run)",
    )


POPULATION_WORDS = {
    "request": "requests",
    "stream": "streamed requests, from the end of their input to the final result (a stream's length is "
    "its input's, not latency)",
}


def render_text(result: dict) -> str:
    """The readable report of `Diagnosis.to_dict()`."""
    read = " read (a sample, below)" if result.get("sampling") else ""
    populations = result.get("populations") or []
    units = " units of work" if any(p["unit"] == "consumer" for p in populations) else " requests"
    lines = [f"run {result['run']}: {result['requests']}{units}{read}"]
    for pop in populations:  # asynchronous work, a client's requests and the service's own, or streams
        what = POPULATION_WORDS.get(pop["unit"], "consumer units (publish to end of processing)")
        ptail = pop.get("tail") or {}
        lines.append(
            f"  {pop['units']} {what} of {pop['entry_point']}"
            + (f": p50 {ptail['p50_ms']:.1f} ms, p99 {ptail['p99_ms']:.1f} ms" if ptail else "")
        )
    if result.get("reason"):
        lines.append(f"  note: {result['reason']}")
    tail = result.get("tail")
    if tail and tail["excess_ms"] > 0:
        lines.append(
            ("  tail (of the top finding's units)" if populations else "  tail")
            + f": p50 {tail['p50_ms']:.1f} ms, p99 {tail['p99_ms']:.1f} ms; requests from "
            f"p{tail['tail_from_quantile'] * 100:g} on take {tail['excess_ms']:.1f} ms more than the middle "
            f"half (the tail excess), {tail['named_share']:.0%} of it named below"
            + (f", {tail['unexplained_share']:.0%} located" if tail["unexplained_share"] else "")
            + "."
        )
    sampling = result.get("sampling")
    if sampling:
        lines.append(
            f"  sampled: {sampling['spans_read']:,} of {sampling['spans_in_run']:,} spans, the requests "
            f"starting in {sampling['windows']} windows of {sampling['window_s']:g} s spread over the run "
            f"({sampling['time_fraction']:.1%} of its time); sampling error (95 %, over windows): p99 "
            + _interval(sampling.get("p99_ms_95ci"))
            + ", tail excess "
            + _interval(sampling.get("excess_ms_95ci"))
            + f" ({sampling.get('excess_relative_error', 0):.0%} relative). `--max-spans 0` reads it whole."
        )
    findings = result["findings"]
    if not findings:
        lines.append("  no cause of a latency tail found")
    for i, fd in enumerate(findings, 1):
        where = ", ".join(
            x for x in (fd.get("stage"), fd.get("span_name") and f"span '{fd['span_name']}'") if x
        )
        lines.append("")
        share = "" if fd.get("share") is None else f"  {fd['share']:.0%} of the tail excess"
        where = f"  ({where})" if where else ""
        lines.append(f"{i}. {fd['pattern']}  confidence {fd['confidence']:.2f}{share}{where}")
        for label, text in (("evidence", fd["evidence"].get("summary", "")), ("advice", fd["advice"])):
            wrapped = textwrap.wrap(
                text, width=96, initial_indent=f"   {label}: ", subsequent_indent=" " * (5 + len(label))
            )
            lines.extend(wrapped)
    for pattern, error in (result.get("errors") or {}).items():
        lines.append(f"  ({pattern} detector failed: {error})")
    return "\n".join(lines)


def _interval(bounds: list[float] | None) -> str:
    return f"{bounds[0]:.1f}-{bounds[1]:.1f} ms" if bounds else "n/a"


def run(args: argparse.Namespace) -> int:
    from tailscope.analysis.diagnosis import UnknownRunError, diagnose
    from tailscope.cli.store_arg import open_from, print_unknown_run

    store = open_from(args, "diagnose")
    if store is None:
        return EXIT_BAD_INPUT
    try:
        diagnosis = diagnose(store, args.run, max_spans=args.max_spans)
    except UnknownRunError as error:
        print_unknown_run("diagnose", store, error)
        return EXIT_BAD_INPUT
    result = diagnosis.to_dict(with_chart=False)
    if args.json:
        print(json.dumps(result, indent=2, default=_jsonable))
    else:
        print(render_text(result))
    return EXIT_OK


def _jsonable(value):
    try:
        return value.item()  # numpy scalars
    except AttributeError:
        return str(value)
