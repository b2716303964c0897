"""Every SQL statement tailscope runs lives in this folder, one statement per `.sql` file.

Python code never builds SQL from user values: it loads a statement by name and passes values as
bound parameters. Identifiers that must vary (rare) go through `quote_identifier`.
"""

from __future__ import annotations

from functools import cache
from importlib import resources


@cache
def load(name: str) -> str:
    """Return the text of `<name>.sql` from this package (cached)."""
    return resources.files(__package__).joinpath(f"{name}.sql").read_text(encoding="utf-8")


def quote_identifier(name: str) -> str:
    """Quote a SQL identifier for DuckDB: wrap in double quotes, doubling any inside."""
    return '"' + name.replace('"', '""') + '"'
