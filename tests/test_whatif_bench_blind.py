"""bench/bench_whatif.py's blind mode never runs a held-out blind family (blind.UNTOUCHED): not by
default, not when named, and not when a family is added to the held-out list later."""

from __future__ import annotations

import pytest

blind = pytest.importorskip("reference_pipeline.simulate.blind")
bench = pytest.importorskip("bench.bench_whatif")

# the held-out families being written: wherever their module lands, they are untouched (ads-auction,
# fraud-check, rag-chat, feed-ranker, vision-moderation, search-bff, lambda-scorer, loan-pricing,
# mesh-triton, rails-recs, phoenix-nx and php-faiss were, until their first tries were recorded: open
# checks since)
HELD_OUT: tuple[str, ...] = ()


def test_the_default_selection_leaves_every_held_out_family_out() -> None:
    chosen = bench.blind_families()
    assert chosen and not set(chosen) & set(blind.UNTOUCHED)
    assert set(chosen) == {name for name in blind.available() if name not in blind.UNTOUCHED}
    assert not set(chosen) & set(HELD_OUT)
    for name in HELD_OUT:  # a held-out family whose module is in is on the untouched list
        if name in blind.MODULES:
            assert name in blind.UNTOUCHED, name


def test_a_family_added_to_the_held_out_list_is_skipped_and_refused(monkeypatch) -> None:
    name = bench.blind_families()[0]
    monkeypatch.setattr(blind, "UNTOUCHED", (*blind.UNTOUCHED, name))
    assert name not in bench.blind_families()
    written = []
    monkeypatch.setattr(blind, "write_run", lambda *a, **k: written.append(a))
    with pytest.raises(SystemExit, match="held-out"):
        bench.blind_rows([name], 100, 0)
    with pytest.raises(SystemExit, match="held-out"):
        bench.main(["blind", "--families", name, "--requests", "100"])
    assert written == []  # refused before anything of it was simulated


def _root_starts(table) -> list[int]:
    return sorted(row[6] for row in table.rows if row[1] == -1 and row[3] == "Server")


def test_a_pairs_healthy_run_takes_the_faulty_runs_arrival_rate_where_work_sets_the_rate() -> None:
    """event-enricher sets its rate as a share of its workers' capacity, so a cause that lengthens the
    work (a slow write) gets fewer arrivals than its steady run; a what-if keeps the arrivals, so the
    pair's healthy run is written at the faulty run's rate (RATE_OF)."""
    family = blind.family("event-enricher")
    faulty = _root_starts(family.generate("slow-write", 300, 1))
    own_rate = _root_starts(family.generate("steady", 300, 1))
    matched = _root_starts(family.generate("steady", 300, 1, **{family.RATE_OF: "slow-write"}))
    span_of = lambda starts: starts[-1] - starts[0]  # noqa: E731
    assert len(faulty) == len(matched) == 300
    assert span_of(own_rate) < 0.8 * span_of(faulty)  # its own rate: more arrivals per second
    assert span_of(matched) == pytest.approx(span_of(faulty), rel=0.01)
