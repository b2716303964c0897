"""The layers and the store seam hold (pyproject.toml [tool.importlinter], also run by ./test.sh):
only tailscope.store's engine packages talk to a driver, nothing above the store names an engine,
the engines never import each other, and no package's modules import each other in a circle."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def test_every_import_contract_is_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    from importlinter.cli import lint_imports

    monkeypatch.chdir(REPO)
    monkeypatch.syspath_prepend(str(REPO))
    assert lint_imports(no_cache=True) == 0
