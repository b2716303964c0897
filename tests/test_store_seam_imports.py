"""Only tailscope.store talks to an engine's driver: the rest of the code goes through the seam
(tailscope.store.interface, engine.open_store; also the import-linter contracts in pyproject.toml),
so a second engine needs no change outside it."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DRIVERS = {"duckdb", "chdb", "clickhouse_connect"}
OUTSIDE_THE_STORE = ["tailscope", "ingest", "app"]


def driver_imports(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        names = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
        found += [f"{path.relative_to(REPO)}:{node.lineno} {n}" for n in names if n.split(".")[0] in DRIVERS]
    return found


def test_no_engine_driver_is_imported_outside_the_store() -> None:
    found = []
    for top in OUTSIDE_THE_STORE:
        for path in sorted((REPO / top).rglob("*.py")):
            if (REPO / "tailscope" / "store") not in path.parents:
                found += driver_imports(path)
    assert found == []
