"""`tailscope serve`: the Streamlit command line it builds, its argument checks, and a clean stop."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from browser_support import free_port, wait_healthy

from tailscope.cli import serve_cmd
from tailscope.cli.main import build_parser, main


def test_streamlit_command_is_local_headless_and_quiet(tmp_path: Path) -> None:
    db = tmp_path / "x.duckdb"
    command = serve_cmd.streamlit_command(db, "127.0.0.1", 8765)
    assert command[:4] == [sys.executable, "-m", "streamlit", "run"]
    assert command[4].endswith(os.path.join("app", "main.py"))
    options = dict(
        zip(command[5 : command.index("--") : 2], command[6 : command.index("--") : 2], strict=True)
    )
    assert options["--server.address"] == "127.0.0.1"
    assert options["--server.port"] == "8765"
    assert options["--server.headless"] == "true"
    assert options["--browser.gatherUsageStats"] == "false"
    assert command[command.index("--") + 1 :] == ["--db", str(db)]


def test_defaults_bind_to_this_machine_only() -> None:
    args = build_parser().parse_args(["serve"])
    assert (args.host, args.port, args.db) == ("127.0.0.1", 8501, None)


def test_db_path_comes_from_the_flag_then_the_environment(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("TAILSCOPE_DB", str(tmp_path / "env.duckdb"))
    assert serve_cmd.resolve_db(None) == (tmp_path / "env.duckdb").resolve()
    assert serve_cmd.resolve_db(str(tmp_path / "flag.duckdb")) == (tmp_path / "flag.duckdb").resolve()


def test_bad_port_is_refused(capsys) -> None:
    assert main(["serve", "--port", "70000"]) == 2
    assert "not a port number" in capsys.readouterr().err


def test_db_in_a_missing_folder_is_refused(tmp_path: Path, capsys) -> None:
    assert main(["serve", "--db", str(tmp_path / "nowhere" / "x.duckdb")]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_serve_answers_then_stops_cleanly_on_ctrl_c(tmp_path: Path) -> None:
    port = free_port()
    process = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "from tailscope.cli.main import entrypoint; entrypoint()",
            "serve",
            "--db",
            str(tmp_path / "s.duckdb"),
            "--port",
            str(port),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
        # as a foreground process in a terminal: a suite started in the background (CI runners, `&`)
        # hands its children SIGINT ignored, and Python then keeps it ignored
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        wait_healthy(f"http://127.0.0.1:{port}", process)
    finally:
        os.killpg(process.pid, signal.SIGINT)
        out, err = process.communicate(timeout=30)
    assert process.returncode == -signal.SIGINT, err.decode()  # ended by the signal, as expected
    assert f"http://127.0.0.1:{port}" in out.decode()
    assert "dashboard stopped" in err.decode()
