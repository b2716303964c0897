"""Every SQL statement tailscope runs lives in this folder, one statement per `.sql` file.

Python code never builds SQL from user values: it loads a statement by name and passes values as
bound parameters. Identifiers that must vary (rare) go through `quote_identifier`.

Two dialects: DuckDB (this folder, `?` parameters) and ClickHouse (`clickhouse/`, server-side
`{name:Type}` parameters). `load(name, dialect="clickhouse")` takes `clickhouse/<name>.sql` when it
exists and falls back to `<name>.sql`, so a statement both engines accept as written lives once.
"""

from __future__ import annotations

import re
from functools import cache
from importlib import resources
from typing import Literal

Dialect = Literal["duckdb", "clickhouse"]
DIALECTS: tuple[Dialect, ...] = ("duckdb", "clickhouse")


@cache
def load(name: str, dialect: Dialect = "duckdb") -> str:
    """Return the text of `<name>.sql` for the dialect (cached): `clickhouse/<name>.sql` first when
    the dialect is clickhouse, else `<name>.sql` from this package."""
    if dialect not in DIALECTS:
        raise ValueError(f"unknown SQL dialect {dialect!r} (one of {', '.join(DIALECTS)})")
    folder = resources.files(__package__)
    if dialect == "clickhouse":
        specific = folder.joinpath("clickhouse", f"{name}.sql")
        if specific.is_file():
            return specific.read_text(encoding="utf-8")
    return folder.joinpath(f"{name}.sql").read_text(encoding="utf-8")


def quote_identifier(name: str) -> str:
    """Quote a SQL identifier for DuckDB: wrap in double quotes, doubling any inside."""
    return '"' + name.replace('"', '""') + '"'


_INCLUDE = re.compile(r"\{include:(\w+)\}")
# a placeholder in a `--` comment (a file naming how others include it) is text, not an include
_COMMENT_OR_INCLUDE = re.compile(r"(--[^\n]*)|\{include:(\w+)\}")


def _includes(text: str) -> list[str]:
    """The names `text` includes (`{include:name}` outside comments), in order."""
    return [match.group(2) for match in _COMMENT_OR_INCLUDE.finditer(text) if match.group(2)]


WEIGHTED_SUFFIX = "_weighted"


def _specific(name: str, dialect: Dialect) -> bool:
    """Whether the dialect has its own `<name>.sql` (clickhouse/), not the shared file."""
    return (
        dialect == "clickhouse"
        and resources.files(__package__).joinpath("clickhouse", f"{name}.sql").is_file()
    )


@cache
def has_variant(name: str, dialect: Dialect = "duckdb") -> bool:
    """Whether `<name>_weighted.sql` exists beside the file `load(name, dialect)` reads (a
    dialect's own file and the shared one do not stand in for each other)."""
    folder = resources.files(__package__)
    weighted = f"{name}{WEIGHTED_SUFFIX}.sql"
    if _specific(name, dialect):
        return folder.joinpath("clickhouse", weighted).is_file()
    return folder.joinpath(weighted).is_file()


def variant(name: str, dialect: Dialect, weighted: bool) -> str:
    """The file a statement reads: `<name>_weighted` when `weighted` and there is one (the version
    for requests that stand for others, requests.Weight), else `name`."""
    return name + WEIGHTED_SUFFIX if weighted and has_variant(name, dialect) else name


def weights_matter(name: str, dialect: Dialect = "duckdb") -> bool:
    """Whether the statement, or a file it includes, has a weighted version."""
    return has_variant(name, dialect) or any(
        weights_matter(m, dialect) for m in _includes(load(name, dialect))
    )


_MAX_INCLUDE_DEPTH = 4


def _expand(text: str, dialect: Dialect, weighted: bool, depth: int = 0) -> str:
    """`text` with each `{include:other}` replaced by other.sql (its weighted version when `weighted`
    and it has one), right-stripped and itself expanded: an included file may include another."""
    if depth > _MAX_INCLUDE_DEPTH:
        raise ValueError(f"SQL includes nested deeper than {_MAX_INCLUDE_DEPTH}: {text[:60]!r}")

    def included(match: re.Match[str]) -> str:
        if match.group(1) is not None:
            return match.group(1)
        body = load(variant(match.group(2), dialect, weighted), dialect).rstrip()
        return _expand(body, dialect, weighted, depth + 1)

    return _COMMENT_OR_INCLUDE.sub(included, text)


@cache
def load_expanded(name: str, dialect: Dialect = "duckdb") -> str:
    """`<name>.sql` of the dialect with its `{include:other}` placeholders replaced (as load_filtered
    does, for a statement without a `{where}`)."""
    return _expand(load(name, dialect), dialect, False)


def load_filtered(name: str, dialect: Dialect, where: str, weighted: bool = False) -> str:
    """`<name>.sql` of the dialect with its `{include:other}` placeholders replaced by other.sql
    (shared CTEs or parts of them, which may include others in turn; a placeholder inside a `--`
    comment stays text) and its one `{where}` placeholder by `where` (fixed SQL: a filter's clauses).
    `weighted`: each file's weighted version where it has one (`variant`)."""
    text = _expand(load(variant(name, dialect, weighted), dialect), dialect, weighted)
    if text.count("{where}") != 1:
        raise ValueError(f"{name}.sql must use {{where}} exactly once")
    return text.replace("{where}", where)
