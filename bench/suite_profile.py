"""Where the test suite's time goes: each test file in a pytest process of its own, CPU and wall per file,
per test and per fixture, then a table.

    PYTHONPATH=$PWD python bench/suite_profile.py --out /tmp/prof [--jobs 2] [--nice 10] [tests/test_x.py ...]
    PYTHONPATH=$PWD python bench/suite_profile.py --out /tmp/prof --table-only

Each file runs as `pytest -p no:xdist --durations=0 -p suite_profile FILE` (this module is also the pytest
plugin): CPU is user+sys of the pytest process and of the children it waited for (CLI runs, the pipeline's
processes, servers), so a test that starts processes is charged their CPU. A fixture's time is its own setup
(the fixtures it asks for are set up before it and counted apart); a module- or session-scoped one is
counted once, in the test that first asked for it. Results: OUT/FILE.json per file, OUT/table.md.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _cpu() -> float:
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


# ---- the plugin (runs inside each pytest process) ----

_RECORD: dict = {"tests": {}, "fixtures": [], "collect": None}
_T0: list[float] = []


def pytest_configure(config: pytest.Config) -> None:
    _T0[:] = [time.perf_counter(), _cpu()]


def pytest_collection_finish(session: pytest.Session) -> None:
    if _T0:
        _RECORD["collect"] = {"wall": time.perf_counter() - _T0[0], "cpu": _cpu() - _T0[1]}


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem):  # type: ignore[no-untyped-def]
    w, c = time.perf_counter(), _cpu()
    yield
    rec = _RECORD["tests"].setdefault(item.nodeid, {})
    rec["wall"], rec["cpu"] = time.perf_counter() - w, _cpu() - c


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call):  # type: ignore[no-untyped-def]
    outcome = yield
    rep = outcome.get_result()
    rec = _RECORD["tests"].setdefault(item.nodeid, {})
    if rep.when == "call" or rep.outcome != "passed":
        rec["outcome"] = rep.outcome
    rec[rep.when] = rep.duration


@pytest.hookimpl(hookwrapper=True)
def pytest_fixture_setup(fixturedef, request):  # type: ignore[no-untyped-def]
    w, c = time.perf_counter(), _cpu()
    yield
    _RECORD["fixtures"].append(
        {
            "name": fixturedef.argname,
            "scope": fixturedef.scope,
            "where": getattr(fixturedef, "baseid", ""),
            "test": request.node.nodeid,
            "wall": time.perf_counter() - w,
            "cpu": _cpu() - c,
        }
    )


def pytest_unconfigure(config: pytest.Config) -> None:
    out = os.environ.get("SUITE_PROFILE_OUT")
    if out:
        Path(out).write_text(json.dumps(_RECORD, indent=1))


# ---- the driver ----


def _files(args: list[str]) -> list[Path]:
    if args:
        return [Path(a) for a in args]
    files = sorted(p.relative_to(REPO) for p in (REPO / "tests").rglob("test_*.py"))
    sys.path.insert(0, str(REPO / "tests"))
    from conftest import HEAVY_FIRST  # the known long files first, so their figures come in early

    first = [f for h in HEAVY_FIRST for f in files if str(f).startswith(h)]
    rest = sorted((f for f in files if f not in first), key=lambda f: -(REPO / f).stat().st_size)
    return first + rest  # the rest largest first: a rough guess at the longest


def _key(f: Path) -> str:
    return str(f).replace("/", "__")


def _run(f: Path | list[Path], out: Path, nice: int, marks: str | None = None, calls: bool = False,
         key: str | None = None) -> None:
    """One pytest process for a file (or, with `key`, for a slice of files)."""
    files = f if isinstance(f, list) else [f]
    dest = out / f"{key or _key(files[0])}.json"
    env = dict(os.environ, SUITE_PROFILE_OUT=str(dest.with_suffix(".plugin.json")))
    if calls:
        env["SUITE_CALLS_OUT"] = str(dest.with_suffix(".calls"))
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # as ./test.sh
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), str(REPO / "bench"), env.get("PYTHONPATH", "")])
    cmd = ["nice", "-n", str(nice), sys.executable, "-m", "pytest", "-p", "no:xdist", "--durations=0",
           "-q", "-p", "suite_profile", *map(str, files)]
    cmd += ["-p", "suite_calls"] if calls else []
    cmd += ["-m", marks] if marks else []
    w = time.perf_counter()
    with open(dest.with_suffix(".log"), "w") as log:
        proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT)
        _, status, ru = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - w
    load = os.getloadavg()[0]
    plugin = {}
    pj = dest.with_suffix(".plugin.json")
    if pj.exists():
        plugin = json.loads(pj.read_text())
        pj.unlink()
    rc = os.waitstatus_to_exitcode(status)
    name = key or str(files[0])
    record = {"file": name, "files": [str(x) for x in files], "wall": wall, "cpu": ru.ru_utime + ru.ru_stime,
              "rc": rc, "load_end": load}
    dest.write_text(json.dumps({**record, **plugin}, indent=1))
    print(f"{name}: rc {rc} wall {wall:.1f} cpu {ru.ru_utime + ru.ru_stime:.1f} load {load:.1f}", flush=True)


def slices(files: list[Path], n: int) -> list[list[Path]]:
    """`n` slices of about the same size (the files' bytes as the guess), a SHARED_FIXTURE_GROUPS group
    kept in one slice (it shares its fixture in the suite too), each slice in collection order."""
    sys.path.insert(0, str(REPO / "tests"))
    from conftest import SHARED_FIXTURE_GROUPS

    units: dict[str, list[Path]] = {}
    for f in files:
        units.setdefault(next((g for p, g in SHARED_FIXTURE_GROUPS.items() if str(f).startswith(p)), str(f)),
                         []).append(f)
    out: list[list[Path]] = [[] for _ in range(n)]
    size = [0] * n
    for unit in sorted(units.values(), key=lambda u: -sum((REPO / f).stat().st_size for f in u)):
        i = size.index(min(size))
        out[i] += unit
        size[i] += sum((REPO / f).stat().st_size for f in unit)
    return [sorted(s) for s in out if s]


def table(out: Path) -> str:
    rows, fixtures = [], defaultdict(lambda: [0.0, 0.0, 0, set()])
    for j in sorted(out.glob("*.json")):
        if j.name.endswith(".plugin.json"):
            continue
        d = json.loads(j.read_text())
        tests = d.get("tests", {})
        worst = max(tests.items(), key=lambda kv: kv[1].get("cpu", 0), default=("", {}))
        outcomes = defaultdict(int)
        for t in tests.values():
            outcomes[t.get("outcome", "?")] += 1
        col = d.get("collect") or {}
        rows.append((d["cpu"], d["wall"], d["file"], len(tests), col.get("cpu", 0), d["rc"],
                     ",".join(f"{k} {v}" for k, v in sorted(outcomes.items())),
                     worst[0].split("::", 1)[-1], worst[1].get("cpu", 0)))
        for fx in d.get("fixtures", []):
            if fx["cpu"] < 0.05 and fx["wall"] < 0.05:
                continue
            k = (fx["name"], fx["where"] or "(plugin)")
            rec = fixtures[k]
            rec[0] += fx["cpu"]
            rec[1] += fx["wall"]
            rec[2] += 1
            rec[3].add(d["file"])
    rows.sort(reverse=True)
    lines = ["| file | tests | CPU s | wall s | collect CPU s | rc | outcomes | heaviest test (CPU s) |",
             "|---|---|---|---|---|---|---|---|"]
    for cpu, wall, f, n, ccpu, rc, oc, wt, wc in rows:
        lines.append(f"| {f} | {n} | {cpu:.1f} | {wall:.1f} | {ccpu:.1f} | {rc} | {oc} | {wt} ({wc:.1f}) |")
    lines.append(f"| **all {len(rows)} files** | {sum(r[3] for r in rows)} | {sum(r[0] for r in rows):.1f} | "
                 f"{sum(r[1] for r in rows):.1f} | {sum(r[4] for r in rows):.1f} | | | |")
    lines += ["", "| fixture (defined in) | setups | CPU s | wall s | files |", "|---|---|---|---|---|"]
    for (name, where), (cpu, wall, n, files) in sorted(fixtures.items(), key=lambda kv: -kv[1][0])[:60]:
        lines.append(f"| {name} ({where}) | {n} | {cpu:.1f} | {wall:.1f} | {len(files)} |")
    text = "\n".join(lines) + "\n"
    (out / "table.md").write_text(text)
    return text


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--nice", type=int, default=10)
    ap.add_argument("--table-only", action="store_true")
    ap.add_argument("--skip-done", action="store_true", help="leave out files OUT already holds")
    ap.add_argument("-m", dest="marks", help="pytest's -m for each file (e.g. the default tier's phase 1)")
    ap.add_argument("--slices", type=int, default=0,
                    help="N pytest processes over slices of the files instead of one per file (a slice keeps "
                         "what a worker shares: module fixtures, process-wide caches)")
    ap.add_argument("--calls", action="store_true",
                    help="also record each test's simulations, loads and diagnoses (bench/suite_calls.py)")
    ap.add_argument("files", nargs="*")
    a = ap.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    if not a.table_only:
        files = _files(a.files)
        if a.skip_done:
            files = [f for f in files if not (a.out / f"{_key(f)}.json").exists()]
        with ThreadPoolExecutor(a.jobs) as pool:
            if a.slices:
                parts = slices(files, a.slices)
                list(pool.map(lambda i: _run(parts[i], a.out, a.nice, a.marks, a.calls, f"slice{i:02d}"),
                              range(len(parts))))
            else:
                list(pool.map(lambda f: _run(f, a.out, a.nice, a.marks, a.calls), files))
    print(table(a.out))


if __name__ == "__main__":
    main()
