"""One request's long synchronous step on a single-threaded event loop (a partner's multi-MB body parsed
with one JSON.parse) delays every other request's callbacks on that instance: the payload lever that
cuts the parse to the median size must also cut the waits it caused (loop_blockers.py), and leave them
where the instance runs its callbacks beside each other (no loop)."""

from __future__ import annotations

import bisect

import numpy as np

from tailscope.analysis.whatif.engine import evaluate
from tailscope.analysis.whatif.payload_levers import payload_at_median
from tailscope.analysis.whatif.retime import request_latency, retime
from tests.hand_frames import MS, hand_frame, lever_inputs

FINDING = {"pattern": "large_payload", "confidence": 1.0, "span_name": "parse",
           "evidence": {"stats": {"size_attribute": "body", "size_on": "span"}}}


class _Loop:
    """The instance's one thread: a callback ready at t runs in the first idle stretch that holds it."""

    def __init__(self, single: bool) -> None:
        self.single, self.starts, self.ends = single, [], []

    def run(self, t: float, work: float) -> float:
        if not self.single:
            return t + work
        k = bisect.bisect_right(self.ends, t)
        start = t
        while k < len(self.starts) and self.starts[k] < start + work:
            start = max(start, self.ends[k])
            k += 1
        self.starts.insert(k, start)
        self.ends.insert(k, start + work)
        return start + work


def _frame(partner: bool, single: bool = True):
    """Pages every ~8 ms (Poisson): `parse` 0.3 ms, a 5 ms `fetch` whose answer is read by a 0.1 ms
    callback, `render` 0.5 ms; with `partner`, a partner's batch every ~60 ms whose `parse` of a
    4-12 MB body takes 4 ms per MB. All on one instance's loop (`single`), else each callback runs
    at once (threads)."""
    rng = np.random.default_rng(11)
    events = [(t, 0) for t in np.cumsum(rng.exponential(8.0, 3000))]
    if partner:
        events += [(t, 1) for t in np.cumsum(rng.exponential(60.0, 400))]
    loop = _Loop(single)
    rows, parses, sizes, pages = [], [], [], []
    for trace, (t, kind) in enumerate(sorted(events)):
        base = len(rows)
        if kind == 1:
            body = float(rng.uniform(4, 12))
            end = loop.run(t, 4.0 * body)
            rows.append((trace, -1, "POST batch", "Server", 0, t, end + 0.1 - t))
            parses.append(len(rows))
            rows.append((trace, base, "parse", "Internal", 0, end - 4.0 * body, 4.0 * body))
            sizes.append(body * 1e6)
            continue
        pages.append(trace)
        p1 = loop.run(t, 0.3)
        f1 = loop.run(p1 + 5.0, 0.1)
        r1 = loop.run(f1, 0.5)
        rows.append((trace, -1, "GET", "Server", 0, t, r1 + 0.1 - t))
        parses.append(len(rows))
        rows.append((trace, base, "parse", "Internal", 0, p1 - 0.3, 0.3))
        sizes.append(0.0)
        rows.append((trace, base, "fetch", "Client", 0, p1, f1 - p1))
        rows.append((trace, base, "render", "Internal", 0, r1 - 0.5, 0.5))
    f = hand_frame(rows)
    values = {"body": (np.array(parses), [str(s) for s in sizes])}
    f.attribute_source = lambda name: values if name == "parse" else {}
    root_trace = f.trace[f.requests.root]
    return f, np.isin(root_trace, pages)


def _pages_p99(f, pages: np.ndarray, edit=None) -> float:
    x = lever_inputs(f)
    dur = retime(f, edit, x.lay).dur if edit is not None else f.dur
    return float(np.percentile(request_latency(f, dur, client_side=False)[pages] / MS, 99))


def test_the_pages_waits_behind_a_partner_parse_go_with_its_excess() -> None:
    calm, calm_pages = _frame(partner=False)
    healthy = _pages_p99(calm, calm_pages)
    f, pages = _frame(partner=True)
    faulty = _pages_p99(f, pages)
    assert faulty > 2.0 * healthy, (faulty, healthy)
    lever = payload_at_median(lever_inputs(f), FINDING)
    assert lever is not None
    fixed = _pages_p99(f, pages, lever.edit)
    assert abs(fixed - healthy) < 0.1 * healthy, (fixed, healthy, faulty)
    assert lever.params["loop_waits_cut"] > 100
    # the engine scores the pages alone with the partner's spans still in the run
    result = evaluate(f, [FINDING], scored=pages, only={"payload_p50"})
    assert abs(result.measured.p99_ms - faulty) < 0.01 * faulty
    assert abs(result.outcomes[0].p99_ms - fixed) < 0.01 * fixed


def test_no_waits_are_cut_where_the_callbacks_run_beside_the_parse() -> None:
    f, _ = _frame(partner=True, single=False)
    lever = payload_at_median(lever_inputs(f), FINDING)
    assert lever is not None and lever.params["loop_waits_cut"] == 0
