"""What each fix is worth: the run's p50/p95/p99 after each fix, predicted from its own trace.

For every cause the diagnosis names (GC pauses, cache misses, lock waits, queueing, a slow dependency,
the network, cold starts, calls cut by a deadline and retried, large payloads, CPU throttling) and
for levers that always apply (the model's forward x k, more replicas),
every request of the run is re-timed with the cause removed, through its critical path, and the queue
before the model is replayed where the fix changes it. A what-if is a model built from the run's own
timings: it cannot know what a fix changes elsewhere (arrivals, load on other services). A run with
asynchronous work (queue consumers) is evaluated on the population of units the diagnosis reports
(`--entry` picks another), a batch consumer's per message. Exit code 0; 2 when the run is not in the
store or `--entry` names no population of it.
"""

from __future__ import annotations

import argparse
import json
import sys

EXIT_OK = 0
EXIT_BAD_INPUT = 2


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from tailscope.cli.store_arg import add_store_arguments

    add_store_arguments(parser)
    parser.add_argument("--run", metavar="LABEL", help="run label (default: the store's only run)")
    parser.add_argument(
        "--vs", metavar="LABEL", help="also the forward speed-up measured in another run (int8, a GPU)"
    )
    parser.add_argument("--k", type=float, default=0.5, help="forward x k lever (default 0.5)")
    parser.add_argument("--replicas", type=int, default=1, help="how many more replicas (default 1)")
    parser.add_argument(
        "--deadline-ms", type=float, help="deadline of the dependency lever (default: the call's p95)"
    )
    parser.add_argument(
        "--hedge-ms", type=float, help="hedge delay of a retried call's lever (default: the call's p95)"
    )
    parser.add_argument("--slo-ms", type=float, help="p99 target: each fix is checked against it")
    parser.add_argument(
        "--entry",
        metavar="ENTRY",
        help="a run with asynchronous work: the population of units to evaluate, by its entry point "
        "(default: the one the diagnosis reports, its top finding's)",
    )
    parser.add_argument("--json", action="store_true", help="print the result as JSON (for deploy gates)")


def _change(value: float) -> str:
    return f"{value * 100:+.0f} %"


def render_text(result: dict) -> str:
    """The readable table of `WhatIf.to_dict()`."""
    m = result["measured"]
    slo = result.get("slo_ms")
    what = "requests"
    if result.get("entry_point"):
        kind = "consumer units" if result.get("unit") == "consumer" else "requests"
        what = f"{kind} of {result['entry_point']}"
    lines = [
        f"run {result['run']}: {result['requests']} {what}, {result['latency']} latency; "
        f"as measured p50 {m['p50_ms']:.1f} ms, p95 {m['p95_ms']:.1f} ms, p99 {m['p99_ms']:.1f} ms"
        + (f"; target p99 {slo:g} ms" if slo else "")
    ]
    if result.get("reason"):
        lines.append(f"  note: {result['reason']}")
        return "\n".join(lines)
    rows = [("fix", "kind", "p50 ms", "p95 ms", "p99 ms", "p99 vs run", "SLO" if slo else "")]
    for o in result["outcomes"]:
        ok = "" if o["meets_slo"] is None else ("meets" if o["meets_slo"] else "misses")
        rows.append(
            (
                o["label"],
                o["kind"],
                f"{o['p50_ms']:.1f}",
                f"{o['p95_ms']:.1f}",
                f"{o['p99_ms']:.1f}",
                _change(o["p99_change"]),
                ok,
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        lines.append(
            "  "
            + "  ".join(
                c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True))
            ).rstrip()
        )
    check = result.get("model_check")
    if check:
        lines.append(
            f"  the queue model replaying the run unchanged gives p99 {check['p99_ms']:.1f} ms "
            f"({_change(check['p99_change'])} against the measured p99)"
        )
    lines.append(
        "  A what-if is a model built from this run's own timings: it cannot know what a fix changes "
        "elsewhere (arrivals, load on other services)."
    )
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    from tailscope.analysis.diagnosis import UnknownRunError
    from tailscope.analysis.whatif import whatif
    from tailscope.cli.store_arg import open_from, print_unknown_run

    if args.replicas < 1 or args.k <= 0 or (args.hedge_ms is not None and args.hedge_ms <= 0):
        print("tailscope whatif: --replicas must be >= 1, --k and --hedge-ms > 0", file=sys.stderr)
        return EXIT_BAD_INPUT
    store = open_from(args, "whatif")
    if store is None:
        return EXIT_BAD_INPUT
    try:
        result = whatif(
            store,
            args.run,
            other_run=args.vs,
            k=args.k,
            extra_replicas=args.replicas,
            deadline_ms=args.deadline_ms,
            hedge_ms=args.hedge_ms,
            slo_ms=args.slo_ms,
            entry=args.entry,
        )
    except UnknownRunError as error:
        print_unknown_run("whatif", store, error)
        return EXIT_BAD_INPUT
    except ValueError as error:  # --entry names no population of the run
        print(f"tailscope whatif: {error}", file=sys.stderr)
        return EXIT_BAD_INPUT
    out = result.to_dict()
    print(json.dumps(out, indent=2) if args.json else render_text(out))
    return EXIT_OK
