"""A material tail is never left unexplained: where no detector names a mechanism, a finding says
which span carries the excess and what is known of it; no material tail, no such finding."""

from __future__ import annotations

import numpy as np
import pytest
from hand_frames import hand_frame

from tailscope.analysis.diagnosis import diagnose_frame
from tailscope.analysis.diagnosis.unexplained import PATTERN


def read_through_cache(
    requests: int = 400, miss_rate: float = 0.28, seed: int = 3, lookup_traced: bool = True
) -> list[tuple]:
    """A service of another shape: every request looks its features up in a fast cache; on a miss
    (28 %, at random) it also queries the feature database (~38 ms), a span present only then.
    `lookup_traced=False`: the cache lookup leaves no span, so nothing shows the call is a fallback
    (a conditional call of unknown mechanism)."""
    rng = np.random.default_rng(seed)
    rows: list[tuple] = []
    for t in range(requests):
        start = t * 100.0  # one request at a time, no queue, nothing shared
        miss = rng.random() < miss_rate
        lookup = 0.8 + rng.random() * 0.4
        fallback = 38.0 * rng.lognormal(0, 0.1) if miss else 0.0
        infer = 6.0 + rng.random()
        total = 0.3 + lookup + fallback + infer + 0.4
        root = len(rows)
        rows.append((t, -1, "GET /v2/score", "Server", t % 2, start, total))
        if lookup_traced:
            rows.append((t, root, "kv.get", "Client", t % 2, start + 0.3, lookup))
        if miss:
            rows.append((t, root, "pg.select_profile", "Client", t % 2, start + 0.3 + lookup, fallback))
        rows.append((t, root, "scorer.run", "Internal", t % 2, start + 0.3 + lookup + fallback, infer))
    return rows


@pytest.mark.parametrize("lookup_traced", [True, False])
def test_a_conditional_fallback_call_is_named_as_where_the_tail_goes(lookup_traced: bool) -> None:
    result = diagnose_frame(hand_frame(read_through_cache(lookup_traced=lookup_traced)))
    named = [f for f in result.findings if f.span_name == "pg.select_profile"]
    assert named, [(f.pattern, f.span_name, f.confidence) for f in result.findings]
    finding = named[0]
    if finding.pattern == PATTERN:  # no detector recognised the mechanism: still accounted for
        stats = finding.evidence["stats"]
        assert stats["character"] == "conditional"
        assert stats["present_in_body"] < 0.5 < stats["present_in_tail"]
        assert stats["tail_excess_share"] > 0.5
        assert "pg.select_profile" in finding.evidence["summary"]
        assert finding.evidence["chart"]["kind"] == "tail_excess_by_span"
        assert finding.confidence < 0.5


def test_the_shares_of_all_findings_stay_within_the_whole_excess() -> None:
    result = diagnose_frame(hand_frame(read_through_cache(miss_rate=0.4, seed=9, lookup_traced=False)))
    counted = [f for f in result.findings if f.confidence >= 0.5 or f.pattern == PATTERN]
    total = sum(float(f.evidence.get("stats", {}).get("tail_excess_share") or 0) for f in counted)
    assert total <= 1.0 + 1e-9


def test_no_material_tail_no_unexplained_finding() -> None:
    rows = read_through_cache(miss_rate=0.0)  # every request alike: p99 close to p50
    result = diagnose_frame(hand_frame(rows))
    assert [f for f in result.findings if f.pattern == PATTERN] == []


@pytest.mark.parametrize("miss_rate", [0.1, 0.28, 0.45])
def test_the_finding_holds_across_miss_rates(miss_rate: float) -> None:
    result = diagnose_frame(hand_frame(read_through_cache(miss_rate=miss_rate, seed=11)))
    assert any(f.span_name == "pg.select_profile" for f in result.findings), [
        (f.pattern, f.span_name, round(f.confidence, 2)) for f in result.findings
    ]


def test_the_unexplained_finding_has_a_chart_the_page_draws() -> None:
    pytest.importorskip("plotly")
    from app.views.diagnosis import TITLES, evidence_figure

    result = diagnose_frame(hand_frame(read_through_cache(lookup_traced=False)))
    finding = next(f for f in result.findings if f.pattern == PATTERN)
    assert PATTERN in TITLES
    assert evidence_figure(finding.evidence["chart"]).data
    assert PATTERN in [f["pattern"] for f in result.to_dict()["findings"]]  # `tailscope diagnose --json`
