"""What tests/conftest.py does for the suite's speed without changing what a test sees: Streamlit's scan
for v2 components, done at each AppTest's first run, is done once per process; the module-level skip
checks ask whether a package is installed without importing it."""

from __future__ import annotations

import sys

import pytest
from browser_support import installed
from conftest import scan_streamlit_components_once


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
