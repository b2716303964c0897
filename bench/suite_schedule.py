"""How pytest-xdist's schedulers would spread phase 1 over N workers, replayed on a profile's per-test
times (bench/suite_profile.py's OUT/*.json: each file in a process of its own).

    PYTHONPATH=$PWD python bench/suite_schedule.py --out /tmp/prof [--workers 2] [--measure cpu|wall]

Each policy hands out units as xdist 3.8 does and a worker runs its tests one after the other:
- `loadfile` (xdist's LoadScopeScheduling): a unit is a file (or a SHARED_FIXTURE_GROUPS group, as
  tests/conftest.py's scheduler makes it); the queue in xdist's order (most tests first) with conftest's
  HEAVY_FIRST moved to the front (`--order heavy`), or every unit longest first by the profile (`lpt`);
  a worker gets its next unit when 2 or fewer of its tests are left.
- `worksteal`: each test a unit, the collection split in contiguous halves, an idle worker takes half of
  the other's pending tests. A file whose tests land on two workers builds its module fixtures on both:
  the second worker's first test of that file is charged the fixtures' setup again (the profile's
  module/package/session fixtures of that file).
The phase's wall is the last worker's end; the idle time is what the other workers wait for it.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import OrderedDict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))


def load_profile(out: Path, measure: str, only: set[str] | None = None) -> tuple[OrderedDict, dict]:
    """(file -> [(nodeid, seconds)] in run order, file -> seconds of its wide fixtures' setup); with
    `only`, the tests of that set of nodeids (e.g. the default tier's) and no other."""
    files: OrderedDict = OrderedDict()
    wide: dict[str, float] = {}
    for j in sorted(out.glob("*.json")):
        if j.name.endswith(".plugin.json"):
            continue
        d = json.loads(j.read_text())
        tests = [(k, v.get(measure, 0.0)) for k, v in d.get("tests", {}).items() if only is None or k in only]
        if tests:
            files[d["file"]] = tests
            wide[d["file"]] = sum(fx[measure] for fx in d.get("fixtures", [])
                                  if fx["scope"] in ("module", "package", "session"))
    return files, wide


def _units(files: OrderedDict) -> OrderedDict:
    from conftest import SHARED_FIXTURE_GROUPS

    units: OrderedDict = OrderedDict()
    for f, tests in files.items():
        scope = next((g for p, g in SHARED_FIXTURE_GROUPS.items() if f.startswith(p)), f)
        units.setdefault(scope, []).extend(tests)
    return units


def loadfile(files: OrderedDict, workers: int, order: str) -> tuple[float, list[float]]:
    from conftest import HEAVY_FIRST

    units = _units(files)
    if order == "lpt":
        queue = sorted(units.items(), key=lambda kv: -sum(t for _, t in kv[1]))
    else:
        queue = sorted(units.items(), key=lambda kv: -len(kv[1]))  # xdist's loadscopereorder (stable)
        if order == "heavy":
            first = [u for h in HEAVY_FIRST for u in queue if u[0] == h]
            queue = first + [u for u in queue if u not in first]
    queue = list(queue)
    pending: list[list[float]] = [[] for _ in range(workers)]
    clock = [0.0] * workers

    def assign(w: int) -> None:
        if queue:
            pending[w].extend(t for _, t in queue.pop(0)[1])

    for w in range(workers):
        assign(w)
    for w in range(workers):
        if len(pending[w]) <= 2:
            assign(w)
    while any(pending):
        w = min((i for i in range(workers) if pending[i]), key=lambda i: clock[i])
        clock[w] += pending[w].pop(0)
        if len(pending[w]) <= 2:
            assign(w)
    return max(clock), clock


def worksteal(files: OrderedDict, wide: dict, workers: int) -> tuple[float, list[float]]:
    tests = [(f, t) for f, ts in files.items() for _, t in ts]
    first_of = {f: ts[0][1] for f, ts in files.items()}
    n = len(tests)
    pending = [tests[i * n // workers:(i + 1) * n // workers] for i in range(workers)]
    clock = [0.0] * workers
    seen: list[set] = [set() for _ in range(workers)]
    while any(pending):
        idle = [i for i in range(workers) if not pending[i]]
        for i in idle:
            donor = max(range(workers), key=lambda k: len(pending[k]))
            if len(pending[donor]) > 1:
                half = len(pending[donor]) // 2
                pending[i], pending[donor] = pending[donor][-half:], pending[donor][:-half]
        w = min((i for i in range(workers) if pending[i]), key=lambda i: clock[i])
        f, t = pending[w].pop(0)
        if f not in seen[w]:
            seen[w].add(f)
            # the file's module fixtures are built here: the profile charged them to its first test
            if any(f in s for k, s in enumerate(seen) if k != w) and t != first_of[f]:
                t += wide.get(f, 0.0)
        clock[w] += t
    return max(clock), clock


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--measure", choices=("cpu", "wall"), default="wall")
    ap.add_argument("--only", type=Path, help="nodeids, one a line (pytest --collect-only -q)")
    a = ap.parse_args()
    only = set(a.only.read_text().split()) if a.only else None
    files, wide = load_profile(a.out, a.measure, only)
    total = sum(t for ts in files.values() for _, t in ts)
    tests = sum(len(v) for v in files.values())
    print(f"{len(files)} files, {tests} tests, {total:.0f} s of test {a.measure}; "
          f"ideal {total / a.workers:.0f} s on {a.workers} workers")
    for name, (wall, clocks) in {
        "loadfile, xdist order": loadfile(files, a.workers, "xdist"),
        "loadfile, HEAVY_FIRST then xdist order (main)": loadfile(files, a.workers, "heavy"),
        "loadfile, every unit longest first (profile)": loadfile(files, a.workers, "lpt"),
        "worksteal (module fixtures built again where a file is split)": worksteal(files, wide, a.workers),
    }.items():
        idle = sum(wall - c for c in clocks)
        print(f"| {name} | {wall:.0f} | {idle:.0f} |")


if __name__ == "__main__":
    main()
