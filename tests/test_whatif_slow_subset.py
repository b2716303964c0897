"""A dependency whose slow calls are a subset (one tenant's filter, a plan flipped for some
parameters), not a slow median: `dependency_p50` moves only that subset and keeps the others' own
tail; and the bench's pair measures a run's entry requests, not the roots a traced callee shows for
an untraced caller (a filler job's calls)."""

from __future__ import annotations

import numpy as np

from bench.whatif_common import entry_requests
from tailscope.analysis.whatif.engine import evaluate
from tests.hand_frames import hand_frame


def _run(slow_share: float) -> list[tuple]:
    """600 requests: 1 ms, a query of 5-25 ms (its own spread), 1 ms; `slow_share` of the queries
    (a tenant's) take 300 ms."""
    rng = np.random.default_rng(11)
    rows: list[tuple] = []
    for k in range(600):
        q = 300.0 if rng.random() < slow_share else float(rng.uniform(5, 25))
        root = len(rows)
        rows.append((k, -1, "POST /ask", "Server", k % 2, 10.0 * k, q + 2.0))
        rows.append((k, root, "query", "Client", k % 2, 10.0 * k + 1.0, q))
    return rows


def test_a_slow_subset_takes_the_fast_calls_times_and_the_tail_stays() -> None:
    finding = {"pattern": "slow_dependency", "confidence": 0.9, "span_name": "query",
               "evidence": {"stats": {}}}
    result = evaluate(hand_frame(_run(0.06)), [finding])
    fixed = next(o for o in result.outcomes if o.key == "dependency_p50:query")
    assert result.measured.p99_ms > 290
    # the queries' own p99 (~25 ms) + 2 ms, not every query at the median (~17 ms)
    assert 24.0 < fixed.p99_ms < 28.5, fixed.p99_ms


def test_entry_requests_leave_out_a_callees_roots_for_an_untraced_caller() -> None:
    rows: list[tuple] = []
    for k in range(100):  # the service's requests: an ask that calls the model server
        root = len(rows)
        rows.append((k, -1, "POST /ask", "Server", 0, 10.0 * k, 20.0))
        rows.append((k, root, "POST", "Client", 0, 10.0 * k + 1.0, 10.0))
        rows.append((k, root + 1, "POST /predict", "Server", 1, 10.0 * k + 1.5, 9.0))
    for k in range(300):  # a job's calls to the model server, its client untraced
        rows.append((100 + k, -1, "POST /predict", "Server", 1, 3.0 * k, 30.0))
    frame = hand_frame(rows)
    assert len(frame.requests) == 400
    entry = entry_requests(frame)
    assert entry is not None and len(entry.requests) == 100
    assert {entry.names[c] for c in entry.name[entry.requests.root]} == {"POST /ask"}
    # a run whose every root is the served span (no entry calls it): as it is
    assert entry_requests(hand_frame(rows[300:])) is None


def _pages_and_partner(partner: bool) -> list[tuple]:
    """Pages fetched by a browser (its traced CLIENT span calls the service); with `partner`, a
    partner's batch route beside them, no traced caller."""
    rows: list[tuple] = []
    for k in range(100):
        root = len(rows)
        rows.append((k, -1, "GET", "Client", 1, 10.0 * k, 12.0))
        rows.append((k, root, "GET /page", "Server", 0, 10.0 * k + 1.0, 10.0))
    for k in range(40 if partner else 0):
        rows.append((100 + k, -1, "POST /batch", "Server", 0, 25.0 * k, 30.0))
    return rows


def test_a_root_its_own_trace_shows_called_is_a_request_and_a_partners_route_is_not_scored() -> None:
    from bench.whatif_common import shared, units_of

    faulty, fixed = hand_frame(_pages_and_partner(True)), hand_frame(_pages_and_partner(False))
    # the browser's fetch is traced: the pages are the service's requests, not a callee's work
    assert entry_requests(faulty) is None
    units = units_of(faulty)
    scored = shared(units, units_of(fixed, like=units))
    assert scored is not None and scored.sum() == 100 and len(scored) == len(units.frame.requests)
    names = {units.frame.names[c] for c in units.frame.name[units.frame.requests.root[scored]]}
    assert names == {"GET /page"}
