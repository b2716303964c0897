"""A reader that goes away (`tailscope … | head`) ends a command quietly, with no traceback.

The reader's end of a real pipe is closed before the command writes, so its first write fails with
EPIPE as it does once `head -c 100` has read enough: deterministic, whatever the output's size."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

simulate_api = pytest.importorskip("reference_pipeline.simulate.api")

CLI = [sys.executable, "-c", "from tailscope.cli.main import entrypoint; entrypoint()"]
EXIT_BROKEN_PIPE = 141


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("pipe")
    db_path = folder / "s.duckdb"
    for run, scenario in (("a", "gc-pressure"), ("b", "steady")):
        trace_file = folder / f"{run}.jsonl"
        simulate_api.simulate_to_file(trace_file, scenario, 400, 5)
        done = subprocess.run([*CLI, "ingest", str(trace_file), "--db", str(db_path), "--run", run],
                              capture_output=True, text=True, timeout=120)  # fmt: skip
        assert done.returncode == 0, done.stderr
    return db_path


def into_closed_pipe(args: list[str]) -> subprocess.CompletedProcess[str]:
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone before the first byte is written
    try:
        return subprocess.run([*CLI, *args], stdout=write_end, stderr=subprocess.PIPE, text=True, timeout=120)
    finally:
        os.close(write_end)


COMMANDS = {
    "waterfall-json": ["waterfall", "--run", "a", "--json"],
    "waterfall-text": ["waterfall", "--run", "a"],
    "diagnose-json": ["diagnose", "--run", "a", "--json"],
    "diagnose-text": ["diagnose", "--run", "a"],
    "compare-json": ["compare", "a", "b", "--json", "--resamples", "100"],
    "compare-text": ["compare", "a", "b", "--resamples", "100"],
}


@pytest.mark.parametrize("args", COMMANDS.values(), ids=COMMANDS.keys())
def test_a_closed_pipe_ends_the_command_quietly(db: Path, args: list[str]) -> None:
    done = into_closed_pipe([*args, "--db", str(db)])
    assert done.returncode == EXIT_BROKEN_PIPE, done.stderr
    assert done.stderr == ""


@pytest.mark.parametrize("args", [["--help"], ["waterfall", "--help"], ["--version"]], ids=" ".join)
def test_help_into_a_closed_pipe(args: list[str]) -> None:
    done = into_closed_pipe(args)  # argparse itself ignores a failed write of its help: status 0
    assert done.returncode in (0, EXIT_BROKEN_PIPE), done.stderr
    assert done.stderr == ""


def test_head_reads_the_start_of_the_report(db: Path) -> None:
    """What a user types: the bytes `head` asked for arrive, and nothing else is printed."""
    command = " ".join([*CLI[:2], f'"{CLI[2]}"', "waterfall", "--run", "a", "--json", "--db", str(db)])
    done = subprocess.run(["bash", "-c", f"set -o pipefail; {command} | head -c 100"],
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert len(done.stdout) == 100 and done.stdout.startswith("{")
    assert "Traceback" not in done.stderr and "BrokenPipe" not in done.stderr
    assert done.returncode in (0, EXIT_BROKEN_PIPE)
