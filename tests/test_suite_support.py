"""What tests/conftest.py does for the suite's speed without changing what a test sees: Streamlit's scan
for v2 components, done at each AppTest's first run, is done once per process."""

from __future__ import annotations

import pytest
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
