"""The README is part of the product: keep its commands true."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tailscope.cli.main import COMMANDS, build_parser

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")


def test_ci_runs_the_readme_test_command() -> None:
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert "./test.sh" in README
    assert re.search(r"^\./test\.sh\b", ci, re.MULTILINE), ".ci/run must call README's test command"


def test_readme_has_exactly_two_setup_commands() -> None:
    quickstart = README.split("## Quickstart", 1)[1].split("\n## ", 1)[0]
    first_block = quickstart.split("```bash", 1)[1].split("```", 1)[0]
    commands = [line for line in first_block.splitlines() if line.strip() and not line.startswith("#")]
    assert len(commands) == 2
    assert "tailscope demo" in commands[0]
    assert commands[1].strip() == "./test.sh"


def test_every_command_is_documented_and_has_help() -> None:
    parser = build_parser()
    subparsers = next(a for a in parser._actions if a.dest == "command")
    for name, _, _ in COMMANDS:
        assert f"tailscope {name}" in README, f"README does not document `tailscope {name}`"
        assert name in subparsers.choices, f"`tailscope {name}` is not wired into the CLI"
        assert subparsers.choices[name].format_help().strip()


def test_store_errors_become_one_line_messages(monkeypatch, capsys) -> None:
    from tailscope.cli import main as cli_main
    from tailscope.store.errors import StoreBusyError

    def busy(args) -> int:
        raise StoreBusyError("x.duckdb: still locked by another tailscope process after 60 s")

    parser = cli_main.build_parser()
    monkeypatch.setattr(cli_main, "build_parser", lambda: parser)
    parser.set_defaults(_run=busy)
    for action in parser._actions:
        if action.dest == "command":
            for sub in action.choices.values():
                sub.set_defaults(_run=busy)
    assert cli_main.main(["waterfall"]) == cli_main.EXIT_FAILURE
    assert capsys.readouterr().err.strip() == (
        "tailscope: x.duckdb: still locked by another tailscope process after 60 s"
    )



def test_packaging_metadata_has_no_deprecation_warnings() -> None:
    """The licence is an SPDX expression with its file shipped: setuptools warns on nothing."""
    import warnings

    config = pytest.importorskip("setuptools.config.pyprojecttoml")
    from setuptools.dist import Distribution

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        dist = config.apply_configuration(Distribution(), ROOT / "pyproject.toml")
    assert [str(w.message).splitlines()[0] for w in caught] == []
    assert dist.metadata.license_expression == "Apache-2.0"
    assert (ROOT / "LICENSE").read_text().lstrip().startswith("Apache License")
