"""Shared fixtures: where the repository and the real-world corpus are, and a fresh store."""

from __future__ import annotations

import contextlib
import functools
import gc
import io
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
CORPUS = REPO_ROOT.parent / "shared" / "fixtures" / "real"

# Files whose tests measure time under real load (the reference pipeline's latencies and batching, a
# receiver's pacing, readers beside a writer, an overloaded collector): ./test.sh runs them in a phase of
# their own, after the rest ran in parallel, so another test's CPU never skews them. A single such test
# elsewhere carries @pytest.mark.serial itself. Tests that start the pipeline but check no time (the
# front ends, the signals, the sweep's table, the CLI's run and a sampled run in test_pipeline_runs.py)
# run in the parallel phase: they passed at load 11 or more. The GC pair's collector-off run times
# nothing either, but asks every request of a 12 s gc-pressure run answered: beside two other pipeline
# runs at load 32 it lost 57 of 140 (bench/RESULTS.md, suite11), so it stays here.
SERIAL_FILES = frozenset(
    {
        "test_pipeline_e2e.py",
        "test_pipeline_gc_pair.py",
        "test_receiver_pacing.py",
        "test_reads_while_writing.py",
        "test_collect_load.py",
    }
)


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects: the tier check sees every collected test
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if item.path.name in SERIAL_FILES:
            item.add_marker(pytest.mark.serial)
    whole = not any("::" in str(arg) for arg in config.args)  # files collected whole: covers checkable
    problems = full_tier_problems([(item.nodeid, item.get_closest_marker("full")) for item in items], whole)
    if problems:
        raise pytest.UsageError("the full tier (`full` marker):\n  " + "\n  ".join(problems))


# The exhaustive tier: `@pytest.mark.full(covered_by="tests/test_x.py::test_y[case]")` marks a variant
# (another dtype, format, family or engine pair) of a behaviour that a default test already checks;
# ./test.sh leaves it out, ./test.sh --full runs it. `covered_by` names that default test (or a tuple of
# them, one per part of what it checks): each must be collected wherever its file is, and not be in the
# full tier itself.
# A second class, `full(covered_by=..., reason="simulator physics")`: a blind family's test of its
# simulator's fidelity to the physics of its system (a mechanism's timing signature against steady, each
# cause's p99 against steady's, both causes of a pair in the tail). What it checks changes only when that
# family's generator is edited, which `./test.sh --full` is for. Its `covered_by` names the family's
# contract test in the same file, which stays in the default tier: each seed's format through the real
# loader with its conventions, the truth naming what the run has, registration, one seed's same bytes.
# Only a test of tests/test_simulate*.py can be of this class.
FULL_REASONS = {"simulator physics": "tests/test_simulate"}


def full_tier_problems(marked: list[tuple[str, pytest.Mark | None]], whole_files: bool = True) -> list[str]:
    """What is wrong with the `full` marks of these (nodeid, mark) pairs: a mark without `covered_by`,
    a test of the full tier as its cover, (where the files were collected whole) a `covered_by` that
    names no collected test of a collected file, a `reason` that is not a class of FULL_REASONS, or a
    "simulator physics" test outside tests/test_simulate*.py or covered from another file."""
    tier = {nodeid for nodeid, mark in marked if mark is not None}
    collected = {nodeid for nodeid, _ in marked}
    files = {nodeid.split("::", 1)[0] for nodeid in collected}
    problems = []
    for nodeid, mark in marked:
        if mark is None:
            continue
        covers = mark.kwargs.get("covered_by")
        covers = (covers,) if isinstance(covers, str) else tuple(covers or ())
        if not covers or not all(isinstance(c, str) and "::" in c for c in covers):
            problems.append(f"{nodeid}: no covered_by naming the default test that checks its behaviour")
            continue
        reason = mark.kwargs.get("reason")
        if reason is not None:
            prefix = FULL_REASONS.get(reason)
            if prefix is None:
                known = ", ".join(FULL_REASONS)
                problems.append(f"{nodeid}: reason {reason!r} is not a class of the full tier ({known})")
                continue
            if not nodeid.startswith(prefix):
                problems.append(f"{nodeid}: reason {reason!r} is for the tests of {prefix}*.py only")
                continue
            if any(cover.split("::", 1)[0] != nodeid.split("::", 1)[0] for cover in covers):
                problems.append(f"{nodeid}: reason {reason!r} needs covered_by in its own file")
                continue
        for cover in covers:
            if cover in tier:
                problems.append(f"{nodeid}: covered_by {cover} is in the full tier itself")
            elif whole_files and cover.split("::", 1)[0] in files and cover not in collected:
                problems.append(f"{nodeid}: covered_by {cover} is not a collected test")
    return problems


def seed_variants(kept: int, *others: int):  # type: ignore[no-untyped-def]
    """`@pytest.mark.parametrize("seed", [kept, *others])` with each of `others` in the full tier, naming
    the test's `[kept]` case as its `covered_by`: the same builder and the same assertions on another seed
    of the same mechanism (another draw of the same input, not another kind of input)."""

    def parametrize(fn):  # type: ignore[no-untyped-def]
        path = Path(fn.__code__.co_filename).resolve().relative_to(REPO_ROOT).as_posix()
        cover = pytest.mark.full(covered_by=f"{path}::{fn.__name__}[{kept}]")
        return pytest.mark.parametrize("seed", [kept, *(pytest.param(s, marks=cover) for s in others)])(fn)

    return parametrize


def pytest_collection_finish(session: pytest.Session) -> None:
    """Where the collected test files use Streamlit's AppTest: its scan of every installed package for
    Streamlit's v2 components is done once for the process rather than at each AppTest's first run.
    Then the collector is settled for the tests (settle_collector)."""
    if "streamlit.testing.v1" in sys.modules:
        scan_streamlit_components_once()
    settle_collector()


# CPython's thresholds but the oldest generation's: a full collection waits for 100 collections of the
# middle one (10 by default), as well as for the long-lived objects to grow by a quarter (which stays)
GC_THRESHOLD = (700, 10, 100)


def settle_collector() -> None:
    """The cyclic collector in each test process (an xdist worker, the serial phase), after collection.
    What collection built (the imported packages, the test modules, their parameters) lives until the
    process ends: its garbage collected, it is moved out of the collector's reach (`gc.freeze()`), so a
    full collection during the tests scans what the tests made, not all of it again; and full
    collections come less often (GC_THRESHOLD). Full collections were most of the collector's CPU:
    3.9 s of test_whatif_blind's 47 s, 1.4 s of test_diagnosis_mechanisms' 18 s (bench/RESULTS.md,
    suite18). The young generations are collected as CPython's defaults have them, so tests that count
    young collections (test_json_decoders_gc) count what they did before."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLD)


def scan_streamlit_components_once() -> None:
    """Each AppTest's first run asks streamlit.components.v2 for the installed components: it reads and
    parses the metadata of every installed distribution (~470 here), 0.3-0.8 s of CPU per AppTest,
    most of an empty page's run (bench/RESULTS.md, suite14). The installed packages do not change
    during a test session, so the first scan's answer (an empty list for this project, which ships no
    v2 component) stands for the rest; each AppTest still registers what it lists."""
    try:
        from streamlit.components.v2 import manifest_scanner
    except ImportError:  # a Streamlit without v2 components scans nothing
        return
    scan = manifest_scanner.scan_component_manifests
    if not hasattr(scan, "cache_info"):
        manifest_scanner.scan_component_manifests = functools.cache(scan)  # type: ignore[assignment]


def _only_serial(config: pytest.Config) -> bool:
    return config.getoption("markexpr", "") in ("serial", "serial and not full")


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """With `-m serial` (./test.sh's second phase) only the files that can hold a serial test are
    imported: SERIAL_FILES and those that name the marker. Importing all the others to deselect them
    cost the phase ~12 s of CPU (torch, the simulators, the app)."""
    if not _only_serial(config) or collection_path.suffix != ".py":
        return None
    if not collection_path.name.startswith("test_") or collection_path.name in SERIAL_FILES:
        return None
    return None if "mark.serial" in collection_path.read_text(encoding="utf-8") else True


# Files that share a fixture wider than a module: pytest-xdist's `--dist loadfile` would hand them to
# different workers (or interleave them with other files, tearing a package fixture down between them),
# so each would build it again. Each group here goes to one worker as one unit, in collection order,
# and builds it once: the parity folder's store pair (~12 s of CPU a build) and the chdb demo load.
SHARED_FIXTURE_GROUPS = {
    "tests/parity/": "tests/parity/",
    "tests/test_clickhouse_demo.py": "chdb_demo",
    "tests/test_clickhouse_dashboard.py": "chdb_demo",
}


# The units of work that take longest in the parallel phase, longest first (CPU of each, one process,
# bench/RESULTS.md "Test suite time" suite9): handed out before the rest, so that the phase does not end
# with one worker alone on a long file while the other has nothing left. The blind families recsys and
# enricher left the list with their physics tests (the full tier): their default runs ~20 and ~8 s of loaded
# CPU (suite15).
HEAVY_FIRST = (
    "tests/parity/",  # ~60 s (suite8: 86 s with the chdb demo files)
    "tests/test_whatif_blind.py",  # 32 s
    "tests/test_pipeline_model.py",  # 28 s
    "tests/test_whatif_levers.py",  # 27 s
    "tests/test_sample_weights.py",  # 24 s
    "tests/test_pipeline_frontends.py",  # 21 s (58 s of wall: it waits on the pipeline's processes)
    "tests/test_serve_access.py",  # 14 s (47 s of wall)
    # few tests each (xdist's order would hand them out among the last), ~8 s and 22-25 s of wall each
    "tests/test_pipeline_sweep_e2e.py",
    "tests/test_pipeline_runs.py",
    "tests/test_disk_full.py",
    "tests/test_clickhouse_rules.py",
)


@pytest.hookimpl(optionalhook=True)  # phase 2 runs without xdist (-p no:xdist)
def pytest_xdist_make_scheduler(config: pytest.Config, log):  # type: ignore[no-untyped-def]
    """`--dist loadfile`, with the files of a SHARED_FIXTURE_GROUPS entry in one unit of work."""
    if config.getoption("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class SharedFixtureScheduling(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::", 1)[0]
            return next((g for prefix, g in SHARED_FIXTURE_GROUPS.items() if path.startswith(prefix)), path)

        def _assign_work_unit(self, node) -> None:  # type: ignore[no-untyped-def]
            """The first time: the HEAVY_FIRST units to the front of the queue (xdist's order, most
            tests first, is kept for the rest)."""
            if not getattr(self, "heavy_first_done", False):
                self.heavy_first_done = True
                for unit in reversed(HEAVY_FIRST):
                    if unit in self.workqueue:
                        self.workqueue.move_to_end(unit, last=False)
            super()._assign_work_unit(node)

    return SharedFixtureScheduling(config, log)


@pytest.fixture
def repo_root() -> Path:
    return REPO_ROOT


@pytest.fixture
def corpus_dir() -> Path:
    if not CORPUS.is_dir():
        pytest.skip(f"real-world corpus not found at {CORPUS} (it lives beside the checkout in shared/)")
    return CORPUS


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "store.duckdb"


@pytest.fixture
def chdb_store(tmp_path: Path):
    """A fresh chdb store with the exporter's otel_traces and tailscope's tables (skips without chdb)."""
    pytest.importorskip("chdb", reason="chdb not installed ([clickhouse] extra)")
    from tailscope.store.clickhouse.engine import ClickHouseStore
    from tailscope.store.engine import open_store

    store = open_store(f"chdb://{tmp_path / 'ch'}", time_limit_s=30)
    assert isinstance(store, ClickHouseStore)
    store.prepare(writing=True)
    yield store
    store.close()


@pytest.fixture(scope="session")
def chdb_demo(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """`tailscope demo --store chdb://FOLDER --requests 150 --no-serve`, run once: the folder and what
    the command printed. Its 12 runs are most of the CPU of the chdb demo tests: test_clickhouse_demo
    checks this load, test_clickhouse_dashboard opens the dashboard on a copy of the folder (the
    demo then reuses its runs). The command closes the folder before it returns (one chdb folder
    per process)."""
    pytest.importorskip("chdb", reason="chdb not installed ([clickhouse] extra)")
    pytest.importorskip("reference_pipeline.simulate.api", reason="the demo's simulator is not installed")
    from tailscope.cli.main import main

    folder = tmp_path_factory.mktemp("chdb-demo") / "store"
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        code = main(["demo", "--store", f"chdb://{folder}", "--requests", "150", "--no-serve"])
    assert code == 0, printed.getvalue()
    return folder, printed.getvalue()


@pytest.fixture
def memory_provider():
    """tailscope.instrument's provider for the test: (provider, in-memory exporter), the default
    provider and span-per-stage mode restored after (test_light_tracing, test_pipeline_request_span)."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from tailscope import instrument as ts

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    ts.use(provider)
    yield provider, exporter
    ts.use(None)
    ts.set_mode("spans")
