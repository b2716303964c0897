"""A rule edit re-derives every run with progress (issue 29: a 100 M-span store takes minutes): the
store reports the fraction of its spans derived after each part of each run, from 0 to 1, naming
the run, so the Stage mapping page can move a progress bar instead of a spinner."""

from __future__ import annotations

from pathlib import Path

import pytest
from run_cache import cached, copy_store, simulated_file

from tailscope.analysis import list_rules, save_rules
from tailscope.cli.main import main
from tailscope.rules import StageRule
from tailscope.store.duckdb import derive
from tailscope.store.duckdb.store import DuckDBStore


@pytest.fixture
def store(tmp_path: Path, tmp_path_factory: pytest.TempPathFactory) -> DuckDBStore:
    """Two steady runs (seeds 1 and 2) ingested, built once per session (tests/run_cache.py), a copy of
    the store per test (each edits its rules)."""

    def build(folder: Path) -> None:
        for run, seed in (("first", 1), ("second", 2)):
            file = simulated_file(tmp_path_factory, "steady", 400, seed)
            assert main(["ingest", str(file), "--db", str(folder / "store.duckdb"), "--run", run]) == 0

    entry = cached(tmp_path_factory, "rule_edit_progress", (), build)
    return DuckDBStore(copy_store(entry, "store.duckdb", tmp_path / "store.duckdb"))


def test_a_rule_edit_reports_its_progress_run_by_run_and_part_by_part(
    store: DuckDBStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(derive, "PART_SPANS", 1000)  # each run derived in several parts
    told: list[tuple[float, str]] = []
    # a new attribute regex: the kept paths cannot answer it, every run is derived from its spans
    rules = [StageRule(1, "queue", attribute_regex="^never\\.seen="), *list_rules(store)]
    save_rules(store, rules, lambda fraction, step: told.append((fraction, step)))
    fractions = [fraction for fraction, _ in told]
    assert fractions[0] == 0.0 and fractions[-1] == 1.0
    assert fractions == sorted(fractions)
    assert len(told) > 2 * 3  # every part of both runs, not one report per run
    assert any("'first'" in step for _, step in told) and any("'second'" in step for _, step in told)
    assert "2 runs" in told[-1][1]


def test_a_rule_edit_from_kept_paths_reports_each_run(
    store: DuckDBStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_derive(*args: object, **kwargs: object) -> None:
        raise AssertionError("a run was derived from its spans")

    rules = list_rules(store)
    save_rules(store, rules)  # the first edit: every run from its spans, keeping its path rows
    monkeypatch.setattr(derive, "refresh_run", no_derive)  # the re-map must not need it
    told: list[tuple[float, str]] = []
    save_rules(store, [rules[-1], *rules[:-1]], lambda fraction, step: told.append((fraction, step)))
    fractions = [fraction for fraction, _ in told]
    assert fractions == sorted(fractions) and fractions[0] == 0.0 and fractions[-1] == 1.0
    assert [step for _, step in told if "100%" in step] == [
        "run 'first': 100% of its 5,200 spans",
        "run 'second': 100% of its 5,200 spans",
    ]
