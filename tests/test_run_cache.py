"""tests/run_cache.py: a run built once per session for the same inputs and code, by one of the
processes that ask at once, never read after the code changed, rebuilt after a build that failed."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import run_cache


class Factory:
    """What run_cache asks of pytest's TempPathFactory: the session's base folder."""

    def __init__(self, base: Path) -> None:
        self.base = base

    def getbasetemp(self) -> Path:
        return self.base


ASK = """
import sys
from pathlib import Path
sys.path[:0] = [{tests!r}]
import run_cache

class Factory:
    def getbasetemp(self):
        return Path({base!r})

def build(folder):
    with open(folder.parent / "builds", "a") as out:
        out.write("x")
    (folder / "run.json").write_text("spans")

print((run_cache.cached(Factory(), "race", ("steady", 400, 1), build) / "run.json").read_text())
"""


def test_the_same_inputs_are_built_once_and_other_inputs_apart(tmp_path: Path) -> None:
    factory = Factory(tmp_path)
    built: list[tuple] = []

    def build(inputs: tuple):
        return lambda folder: (built.append(inputs), (folder / "f").write_text(repr(inputs)))

    a = run_cache.cached(factory, "sim", ("steady", 400, 1), build(("steady", 400, 1)))  # type: ignore[arg-type]
    again = run_cache.cached(factory, "sim", ("steady", 400, 1), build(("steady", 400, 1)))  # type: ignore[arg-type]
    other = run_cache.cached(factory, "sim", ("steady", 400, 2), build(("steady", 400, 2)))  # type: ignore[arg-type]
    assert a == again != other
    assert built == [("steady", 400, 1), ("steady", 400, 2)]
    assert (a / "f").read_text() == "('steady', 400, 1)" and (other / "f").read_text() == "('steady', 400, 2)"


def test_processes_asking_at_once_wait_for_one_build(tmp_path: Path) -> None:
    """Eight interpreters started at once (plain processes: a multiprocessing pool's spawn re-runs the
    parent's __main__, which an earlier Streamlit AppTest in the same worker leaves as app/main.py)."""
    script = ASK.format(tests=str(Path(__file__).resolve().parent), base=str(tmp_path))
    command = [sys.executable, "-c", script]
    askers = [subprocess.Popen(command, stdout=subprocess.PIPE, text=True) for _ in range(8)]
    got = [asker.communicate(timeout=120)[0].strip() for asker in askers]
    assert got == ["spans"] * 8
    assert (tmp_path / "run-cache" / "builds").read_text() == "x"


def test_a_failed_build_is_built_again(tmp_path: Path) -> None:
    factory = Factory(tmp_path)

    def broken(folder: Path) -> None:
        (folder / "half").write_text("written before it failed")
        raise RuntimeError("the simulator failed")

    with pytest.raises(RuntimeError):
        run_cache.cached(factory, "sim", (1,), broken)  # type: ignore[arg-type]
    entry = run_cache.cached(factory, "sim", (1,), lambda folder: (folder / "whole").write_text("ok"))  # type: ignore[arg-type]
    assert sorted(p.name for p in entry.iterdir()) == [".done", "whole"]


def test_the_key_holds_the_code_version_and_it_follows_any_source_edit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert run_cache.key("sim", (1,), "v1") != run_cache.key("sim", (1,), "v2")
    assert run_cache.key("sim", (1,), "v1") == run_cache.key("sim", (1,), "v1")
    source = tmp_path / "reference_pipeline" / "simulate" / "model.py"
    source.parent.mkdir(parents=True)
    source.write_text("RATE = 1\n")
    (tmp_path / "tailscope").mkdir()
    (tmp_path / "tailscope" / "q.sql").write_text("SELECT 1")
    monkeypatch.setattr(run_cache, "REPO", tmp_path)
    version = run_cache.code_version.__wrapped__
    first = version()
    source.write_text("RATE = 2\n")
    assert version() != first
    source.write_text("RATE = 1\n")
    assert version() == first
    (tmp_path / "tailscope" / "q.sql").write_text("SELECT 2")
    assert version() != first


def test_xdist_workers_share_the_sessions_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    worker = tmp_path / "pytest-7" / "popen-gw1"
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw1")
    assert run_cache.session_root(Factory(worker)) == tmp_path / "pytest-7"  # type: ignore[arg-type]
    monkeypatch.delenv("PYTEST_XDIST_WORKER")
    assert run_cache.session_root(Factory(tmp_path / "pytest-7")) == tmp_path / "pytest-7"  # type: ignore[arg-type]
