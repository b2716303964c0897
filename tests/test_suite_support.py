"""What tests/conftest.py does for the suite's speed without changing what a test sees: Streamlit's scan
for v2 components, done at each AppTest's first run, is done once per process; the module-level skip
checks ask whether a package is installed without importing it; the cyclic collector leaves what
collection built alone and runs its full collections less often; the hand-built traces' lognormal draws
what it drew before, faster."""

from __future__ import annotations

import gc
import math
import sys

import numpy as np
import pytest
from browser_support import installed
from conftest import GC_THRESHOLD, scan_streamlit_components_once
from mechanism_frames import TraceBuilder, diagnosed, lognormal


def test_apptests_scan_the_installed_components_once(monkeypatch: pytest.MonkeyPatch) -> None:
    manifest_scanner = pytest.importorskip("streamlit.components.v2.manifest_scanner")
    from streamlit.components.v2.component_manager import BidiComponentManager

    scans: list[int | None] = []

    def scan(max_workers: int | None = None) -> list:
        scans.append(max_workers)
        return []

    monkeypatch.setattr(manifest_scanner, "scan_component_manifests", scan)
    scan_streamlit_components_once()
    for _ in range(3):  # what each AppTest's first run does (streamlit.testing.v1.app_test, _run)
        BidiComponentManager().discover_and_register_components(start_file_watching=False)
    assert scans == [None]


def test_installed_asks_without_importing() -> None:
    """The module-level skip checks (tests/browser_support.py `installed`) cost a worker that never runs
    the file no import."""
    assert "this" not in sys.modules  # the standard library's Zen, which nothing here imports
    assert installed("this") and "this" not in sys.modules
    assert not installed("no_such_package_here") and not installed("no_such_package_here.sub")


def test_the_tests_run_with_what_collection_built_frozen_and_fewer_full_collections() -> None:
    """conftest.settle_collector, run after collection in every test process: the modules and parameters
    frozen, the oldest generation's threshold raised and the young ones' as CPython has them."""
    assert gc.get_freeze_count() > 10_000  # the packages and the test modules collection imported
    assert gc.get_threshold() == GC_THRESHOLD
    assert GC_THRESHOLD[:2] == (700, 10) and GC_THRESHOLD[2] > 10


def test_lognormal_draws_what_the_generators_normal_drew() -> None:
    """The same values from the same seeds as `float(median * np.exp(rng.normal(0.0, sigma)))`, with the
    stream left where it left it (other draws of the builders come between). Equal to within a few units in
    the last place: numpy's vectorised exp rounds a few values the other way from the C library's on some
    CPUs (0.2897455593244464 against ...634 on this VM's, not on CI's); the product carries it."""
    old, new = np.random.default_rng(7), np.random.default_rng(7)
    for i in range(20_000):
        median, sigma = (0.5, 3.0, 40.0)[i % 3], (0.0, 0.05, 0.3, 1.2)[i % 4]
        expected = float(median * np.exp(old.normal(0.0, sigma)))
        assert math.isclose(lognormal(new, median, sigma), expected, rel_tol=1e-15, abs_tol=0.0)
        if i % 5 == 0:
            assert new.integers(10) == old.integers(10)


def test_diagnosed_builds_and_diagnoses_a_frame_once_and_hands_out_copies() -> None:
    built: list[int] = []

    def service(seed: int):  # a server whose tail is a few slow requests
        built.append(seed)
        b = TraceBuilder(seed)
        for t in b.arrivals(300, rps=100.0):
            b.new_trace()
            b.span(None, "GET /x", "Server", "api/0", float(t), lognormal(b.rng, 5.0, 0.6))
        return b.frame()

    first = diagnosed(service, 1)
    first.findings.append("changed by a test")
    again = diagnosed(service, 1)
    assert built == [1] and "changed by a test" not in again.findings
    assert again.requests == 300
    diagnosed(service, 2)  # other arguments: another frame
    assert built == [1, 2]
