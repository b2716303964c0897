"""`tailscope` entry point: `main(argv) -> int` maps every command's outcome to an exit code.

Each command lives in its own module `tailscope.cli.<module>` exposing
`add_arguments(parser: argparse.ArgumentParser) -> None` and `run(args: argparse.Namespace) -> int`.
Command modules import only the standard library at module level, so `tailscope --help` stays fast
and never pulls in Streamlit or PyTorch.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import signal
import sys
from collections.abc import Sequence

from tailscope.cli import signals

# (command, module, one-line help) in the order `--help` lists them.
COMMANDS: tuple[tuple[str, str, str], ...] = (
    ("ingest", "ingest_cmd", "load trace exports (files or folders) into the store"),
    ("serve", "serve_cmd", "open the dashboard on the store (127.0.0.1)"),
    ("demo", "demo_cmd", "generate demo traces of every scenario, load them, open the dashboard"),
    ("waterfall", "waterfall_cmd", "per-stage latency budget of a percentile band"),
    ("compare", "compare_cmd", "compare two runs stage by stage, with confidence intervals"),
    ("diagnose", "diagnose_cmd", "name the causes of a run's latency tail, with evidence and advice"),
    ("whatif", "whatif_cmd", "each fix's p50/p95/p99, predicted from the run's own trace"),
    ("collect", "collect_cmd", "receive OTLP/HTTP traces (POST /v1/traces) straight into the store"),
    ("select", "select_cmd", "name a selection of a ClickHouse store's spans as a run (time, attributes)"),
    ("pipeline", "pipeline_cmd", "run, sweep or simulate the reference inference pipeline"),
    ("migrate", "migrate_cmd", "convert a store written by an older tailscope, in place"),
)

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_BAD_INPUT = 2
EXIT_BROKEN_PIPE = 128 + signal.SIGPIPE  # 141, what a shell reports for a process ended by SIGPIPE


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tailscope",
        description="Where the latency budget of online ML inference goes, from OpenTelemetry traces.",
    )
    from tailscope import __version__

    parser.add_argument("--version", action="version", version=f"tailscope {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, module_name, summary in COMMANDS:
        try:
            module = importlib.import_module(f"tailscope.cli.{module_name}")
        except ModuleNotFoundError as error:  # a command whose module is not part of this build
            if error.name != f"tailscope.cli.{module_name}":
                raise
            continue
        sub = commands.add_parser(name, help=summary, description=module.__doc__ or summary)
        module.add_arguments(sub)
        sub.set_defaults(_run=module.run)
    return parser


class Outcome:
    """What the last `main` call ended by: a stop signal (`signum`), or None for a plain return."""

    signum: int | None = None


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; its exit code (128 + N when signal N stopped it)."""
    Outcome.signum = None
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args._run(args))
    except Exception as error:  # the store's own errors become a one-line message; others propagate
        from tailscope.store.errors import StoreError, StoreFullError

        if isinstance(error, BrokenPipeError):
            return output_closed()
        if not isinstance(error, StoreError):
            raise
        print(f"tailscope: {error}", file=sys.stderr)
        return EXIT_BAD_INPUT if isinstance(error, StoreFullError) else EXIT_FAILURE
    except KeyboardInterrupt as interrupt:
        Outcome.signum = signals.signal_of(interrupt)
        name = "interrupted" if Outcome.signum == signal.SIGINT else f"stopped by {interrupt}"
        print(f"tailscope: {name}", file=sys.stderr)
        return 128 + Outcome.signum
    finally:
        from tailscope.cli.store_arg import close_opened

        close_opened()


def output_closed() -> int:
    """The reader of our stdout went away (`tailscope … | head`): stop quietly, as `cat` would.

    What is still buffered can go nowhere, so stdout is pointed at /dev/null for the interpreter's
    final flush (which would otherwise print a second BrokenPipeError); the exit code is 141, a
    shell's for a process ended by SIGPIPE."""
    with contextlib.suppress(OSError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    return EXIT_BROKEN_PIPE


def entrypoint() -> None:
    signals.install()
    from tailscope.store.errors import quiet_driver_logs

    quiet_driver_logs()
    try:
        code = main()
    except BrokenPipeError:  # raised outside a command
        code = output_closed()
    except SystemExit:  # argparse's --help, --version and usage errors
        if not stdout_flushed():
            sys.exit(output_closed())
        raise
    if Outcome.signum is None and signals.received() is not None:  # a Stopped a finaliser swallowed
        Outcome.signum = signals.received()
        print(f"tailscope: stopped by {signal.Signals(Outcome.signum).name}", file=sys.stderr)
    if Outcome.signum is not None:
        signals.exit_by_signal(Outcome.signum)
    if not stdout_flushed():
        code = output_closed()
    sys.exit(code)


def stdout_flushed() -> bool:
    """Flush what is buffered for stdout; False when its reader has gone."""
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        return False
    return True
