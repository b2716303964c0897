"""SQL loader includes: a weighted statement and its unweighted twin read the SQL they share from one
file ({include:name}), an included file may include another, and a placeholder in a comment is text."""

from __future__ import annotations

import re
from importlib import resources

import pytest

from tailscope import sql

COMMENT = re.compile(r"--[^\n]*")


def _statements(dialect: sql.Dialect) -> list[str]:
    """Every statement of the dialect with a `{where}` or an include, less the weighted versions."""
    root = resources.files("tailscope.sql")
    folder = root.joinpath("clickhouse") if dialect == "clickhouse" else root
    names = {p.name[:-4] for p in folder.iterdir() if p.name.endswith(".sql")}
    if dialect == "clickhouse":
        names |= {p.name[:-4] for p in root.iterdir() if p.name.endswith(".sql")}
    return sorted(
        n
        for n in names
        if not n.endswith(sql.WEIGHTED_SUFFIX)
        and ("{where}" in sql.load(n, dialect) or "{include:" in sql.load(n, dialect))
    )


@pytest.mark.parametrize("dialect", sql.DIALECTS)
@pytest.mark.parametrize("weighted", [False, True])
def test_no_include_placeholder_is_left_outside_comments(dialect: sql.Dialect, weighted: bool) -> None:
    for name in _statements(dialect):
        try:
            text = sql.load_filtered(name, dialect, "TRUE", weighted)
        except ValueError:  # a file only ever included (no {where} of its own)
            continue
        assert "{include:" not in COMMENT.sub("", text), (name, dialect, weighted)


@pytest.mark.parametrize("weighted", [False, True])
def test_an_included_file_may_include_another(weighted: bool) -> None:
    text = sql.load_filtered("tail_stages", "duckdb", "TRUE", weighted)  # -> tail_selection -> tail_marked
    assert "ELSE f.Duration >= q.qd END AS selected" in text
    assert ("sum(Weight) OVER" in text) is weighted  # the weighted threshold only when weighted


def test_a_placeholder_in_a_comment_is_not_expanded() -> None:
    # tail_selection.sql's header names how others include it: "({include:tail_selection})"
    text = sql.load_filtered("tail_selection", "duckdb", "TRUE")
    assert "({include:tail_selection})" in text
    assert text.count("WITH f AS") == 1


@pytest.mark.parametrize(
    ("name", "dialect", "shared"),
    [
        ("waterfall", "duckdb", "waterfall_marked"),
        ("waterfall", "clickhouse", "waterfall_marked"),
        ("heatmap", "duckdb", "heatmap_bins"),
        ("heatmap", "clickhouse", "heatmap_bins"),
        ("tail_selection", "duckdb", "tail_marked"),
        ("stage_breakdown_scope", "duckdb", "band_window_fill"),
    ],
)
def test_a_statement_and_its_weighted_version_read_the_shared_part_once(
    name: str, dialect: sql.Dialect, shared: str
) -> None:
    part = sql.load(shared, dialect).rstrip()
    for weighted in (False, True):
        file = sql.variant(name, dialect, weighted)
        assert f"{{include:{shared}}}" in sql.load(file, dialect)
        assert part not in sql.load(file, dialect)
