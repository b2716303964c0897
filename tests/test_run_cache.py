"""tests/run_cache.py: a run built once per session for the same inputs and code, by one of the
processes that ask at once, never read after the code changed, rebuilt after a build that failed."""

from __future__ import annotations

import multiprocessing
from pathlib import Path

import pytest
import run_cache


class Factory:
    """What run_cache asks of pytest's TempPathFactory: the session's base folder."""

    def __init__(self, base: Path) -> None:
        self.base = base

    def getbasetemp(self) -> Path:
        return self.base


def _build_counting(folder: Path) -> None:
    counter = folder.parent / "builds"
    with open(counter, "a") as out:
        out.write("x")
    (folder / "run.json").write_text("spans")


def _ask(base: str) -> str:
    entry = run_cache.cached(Factory(Path(base)), "race", ("steady", 400, 1), _build_counting)  # type: ignore[arg-type]
    return (entry / "run.json").read_text()


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
    with multiprocessing.get_context("spawn").Pool(4) as pool:
        got = pool.map(_ask, [str(tmp_path)] * 8)
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
