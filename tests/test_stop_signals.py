"""Every command that starts children stops them on SIGTERM, SIGINT and SIGHUP, then ends by that signal.

The signal goes to the tailscope process alone, as systemd, `docker stop`, `timeout` or a supervisor
send it (Ctrl-C in a terminal reaches the whole process group; tests/test_serve_cmd.py covers that).
Afterwards no descendant may be left and the port must be free again.
"""

from __future__ import annotations

import importlib.util
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from browser_support import free_port, wait_healthy
from receiver_support import REPO_ROOT, Collector, proto_request, spans_of

from tailscope.store.duckdb.connection import connect_reader

ENTRY = [sys.executable, "-c", "from tailscope.cli.main import entrypoint; entrypoint()"]
SIGNALS = [signal.SIGTERM, signal.SIGINT, signal.SIGHUP]


def descendants(pid: int) -> set[int]:
    """Every live process below `pid` (from /proc: each process's parent)."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if fields[0] != "Z":
                parents[int(entry.name)] = int(fields[1])
    found: set[int] = set()
    frontier = {pid}
    while frontier:
        frontier = {child for child, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


def alive(pids: set[int]) -> set[int]:
    left = set()
    for pid in pids:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z":
            left.add(pid)
    return left


def start(*args: str, tmpdir: Path | None = None) -> subprocess.Popen[str]:
    env = dict(os.environ, **({"TMPDIR": str(tmpdir)} if tmpdir else {}))
    return subprocess.Popen(
        [*ENTRY, *args],
        cwd=REPO_ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # its own group: only what the test sends reaches it
        # as a foreground process would have it (a backgrounded suite hands SIGINT ignored, one under
        # nohup SIGHUP: the commands keep an ignored signal ignored, as nohup asks)
        preexec_fn=_default_stop_signals,
    )


def _default_stop_signals() -> None:
    for signum in (signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, signal.SIG_DFL)


def stop_and_check(process: subprocess.Popen[str], signum: int, timeout: float = 60) -> str:
    """Send `signum` to the process alone; it must end by that signal leaving no descendant."""
    children = descendants(process.pid)
    assert children, "the command should have started children"
    process.send_signal(signum)
    try:
        output, _ = process.communicate(timeout=timeout)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while alive(children) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not alive(children), f"left running after {signal.Signals(signum).name}: {alive(children)}"
    assert process.returncode == -signum, output
    return output


def port_is_free(port: int) -> bool:
    """Whether a new server could listen there (as Streamlit does: SO_REUSEADDR, so the health
    checks' connections in TIME_WAIT do not count; a listener still does)."""
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


@pytest.mark.parametrize("signum", SIGNALS, ids=lambda s: signal.Signals(s).name)
def test_serve_stops_the_dashboard(tmp_path: Path, signum: int) -> None:
    port = free_port()
    process = start("serve", "--db", str(tmp_path / "s.duckdb"), "--port", str(port))
    wait_healthy(f"http://127.0.0.1:{port}", process)
    output = stop_and_check(process, signum)
    assert "dashboard stopped" in output
    assert port_is_free(port)


def test_demo_stops_the_dashboard(tmp_path: Path) -> None:
    port = free_port()
    db = tmp_path / "demo.duckdb"
    process = start("demo", "--db", str(db), "--port", str(port), "--requests", "100")
    wait_healthy(f"http://127.0.0.1:{port}", process, timeout=180)
    stop_and_check(process, signal.SIGTERM)
    assert port_is_free(port)


# SIGINT and SIGHUP on collect in the full tier (./test.sh --full): its receiver notes the three stop
# signals alike (tailscope.stop_signals.STOP_SIGNALS) and re-raises the one it got after the flush, which the
# entry point turns into an exit by that signal, as test_serve_stops_the_dashboard checks for each of them.
def _collect_signal(signum: int) -> object:
    if signum == signal.SIGTERM:
        return signum
    name = signal.Signals(signum).name
    covers = (
        "tests/test_stop_signals.py::test_collect_stores_what_it_accepted_then_ends_by_the_signal[SIGTERM]",
        f"tests/test_stop_signals.py::test_serve_stops_the_dashboard[{name}]",
    )
    return pytest.param(signum, marks=pytest.mark.full(covered_by=covers))


@pytest.mark.parametrize(
    "signum", [_collect_signal(s) for s in SIGNALS], ids=lambda s: signal.Signals(s).name
)
def test_collect_stores_what_it_accepted_then_ends_by_the_signal(tmp_path: Path, signum: int) -> None:
    collector = Collector(tmp_path / "c.duckdb", "live", "--flush-interval-ms", "5000")
    response = collector.post(proto_request("svc", spans_of(1, 7)), "application/x-protobuf")
    assert response.status_code == 200
    assert collector.stop(signum=signum) == -signum, collector.output()
    with connect_reader(collector.db_path) as conn:
        assert conn.execute("SELECT count(*) FROM otel_traces").fetchone()[0] == 7


needs_torch = pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="needs PyTorch")


def wait_for_children(process: subprocess.Popen[str], count: int, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while len(descendants(process.pid)) < count:
        assert process.poll() is None, process.communicate()[0]
        assert time.monotonic() < deadline, "the pipeline's children did not start"
        time.sleep(0.2)
    time.sleep(3)  # into the run: the service is loading or serving


def stop_pipeline_command(tmp_path: Path, children: int, signum: int, *args: str) -> None:
    """Start `tailscope pipeline ARGS` with its own TMPDIR, wait for `children`, stop it by `signum`:
    nothing may be left running, and its working folders must be gone (it cleaned up)."""
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    process = start("pipeline", *args, tmpdir=scratch)
    wait_for_children(process, children)
    stop_and_check(process, signum, timeout=90)
    assert list(scratch.iterdir()) == []


# SIGHUP in the full tier: the pipeline forwards SIGTERM to its children for it as for SIGTERM
# (signals.child_signal), and the entry point's SIGHUP handling is test_serve_stops_the_dashboard[SIGHUP]'s
SIGHUP_AS_SIGTERM = pytest.mark.full(
    covered_by=(
        "tests/test_stop_signals.py::test_pipeline_run_stops_its_service_and_downstream[SIGTERM]",
        "tests/test_stop_signals.py::test_serve_stops_the_dashboard[SIGHUP]",
    )
)


@needs_torch
@pytest.mark.torch
@pytest.mark.parametrize(
    "signum",
    [signal.SIGTERM, pytest.param(signal.SIGHUP, marks=SIGHUP_AS_SIGTERM)],
    ids=lambda s: signal.Signals(s).name,
)
def test_pipeline_run_stops_its_service_and_downstream(tmp_path: Path, signum: int) -> None:
    out = str(tmp_path / "run.jsonl")
    stop_pipeline_command(tmp_path, 2, signum, "run", "--duration", "120", "--rps", "4", "--out", out)


@needs_torch
@pytest.mark.torch
def test_pipeline_sweep_stops_its_children(tmp_path: Path) -> None:
    stop_pipeline_command(
        tmp_path, 2, signal.SIGTERM,
        "sweep", "--devices", "cpu", "--dtypes", "fp32", "--batch-policies", "8:5",
        "--duration", "120", "--rps", "4", "--out-dir", str(tmp_path / "sweep"),
    )  # fmt: skip


@needs_torch
@pytest.mark.torch
def test_pipeline_run_stops_its_load_processes(tmp_path: Path) -> None:
    stop_pipeline_command(
        tmp_path, 3, signal.SIGTERM,  # the service and two load processes
        "run", "--duration", "120", "--concurrency", "4", "--load-processes", "2",
        "--no-downstream", "--out", str(tmp_path / "run.jsonl"),
    )  # fmt: skip
