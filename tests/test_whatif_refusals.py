"""A rate limit's refusals (whatif/refusals.py): a call refused with 429 and a Retry-After, slept and
made again, re-timed as the call within the limit, not as a slow callee at its median: from the
events on the call's one span (OpenInference's `retry` events), and from attempts as spans of their
own whose retries came back together and crowded the client's pool of connections."""

from __future__ import annotations

import heapq

import numpy as np

from tailscope.analysis.whatif.engine import evaluate
from tailscope.analysis.whatif.refusals import REFUSED
from tests.hand_frames import MS, hand_frame


def _events_run() -> tuple[list[tuple], dict[int, list[tuple[float, float]]]]:
    """200 requests, one a 40 ms: a step (tokenize 2 ms, then the chat call as the step's last child)
    whose chat call answers in 300-700 ms; from 80 to 120 every call is refused at 60 ms into it,
    sleeps a Retry-After of 20 s and is answered after; the retries are events on the chat span
    ((ms after its start, the wait asked in ms) per span index)."""
    rng = np.random.default_rng(3)
    rows: list[tuple] = []
    events: dict[int, list[tuple[float, float]]] = {}
    for i in range(200):
        t = 40.0 * i
        answer = float(rng.uniform(300, 700))
        refused = 80 <= i < 120
        chat = answer + (60.0 + 20_000.0 * 1.02 if refused else 0.0)
        root = len(rows)
        rows.append((i, -1, "POST /ask", "Server", 0, t, 2 + chat + 1))
        rows.append((i, root, "step", "Internal", 0, t, 2 + chat))
        rows.append((i, root + 1, "tokenize", "Internal", 0, t, 2))
        if refused:
            events[len(rows)] = [(60.0, 20_000.0)]
        rows.append((i, root + 1, "ChatOpenAI", "Client", 0, t + 2, chat))
    return rows, events


def _source(events: dict[int, list[tuple[float, float]]]):
    def read(name: str):
        if name != "ChatOpenAI":
            return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64)
        idx = [k for k, evs in events.items() for _ in evs]
        off = [o * MS for evs in events.values() for o, _ in evs]
        wait = [w * MS for evs in events.values() for _, w in evs]
        return np.array(idx, np.int64), np.array(off, np.int64), np.array(wait, np.int64)

    return read


def test_retry_after_sleeps_reported_as_events_go() -> None:
    rows, events = _events_run()
    frame = hand_frame(rows)
    frame.retry_source = _source(events)
    finding = {"pattern": "timeout_retry", "confidence": 0.9, "span_name": "ChatOpenAI",
               "evidence": {"stats": {}}}
    result = evaluate(frame, [finding])
    keys = {o.key: o for o in result.outcomes}
    assert "callee_p50:ChatOpenAI" not in keys  # the callee is not slow: it refused
    fixed = keys["no_refusals:ChatOpenAI"]
    assert result.measured.p99_ms > 20_000
    # healthy: 3 + 300-700 ms; the refused calls keep their first attempt's 60 ms and the jitter
    # their client added to the sleep (2 % of 20 s)
    assert fixed.p99_ms < 1_200, fixed.p99_ms


POOL, HOLD, REFUSE_MS, WINDOW_MS, N = 2, 50.0, 5.0, 1_500.0, 60


def _attempts_run(refusals: bool) -> list[tuple]:
    """Requests every 30 ms on one instance, each a chat call through a pool of 2 connections held
    50 ms per attempt (the attempt's span starts once it has one). With `refusals`, the calls asked
    from 300 to 600 ms are refused in 5 ms and sleep to the provider's next window (1.5 s): they all
    come back at once and queue for the 2 connections, with the calls asked then behind them."""
    rows: list[tuple] = []
    free = [0.0] * POOL
    asks = []  # (when it asks, request, attempt, refused)
    for i in range(N):
        t = 30.0 * i
        asks.append((t, i, 0, refusals and 300 <= t < 600))
    attempts: dict[int, list[tuple[float, float, bool]]] = {}
    heapq.heapify(asks)
    while asks:
        t, i, k, refused = heapq.heappop(asks)
        got = max(t, heapq.heappop(free))
        hold = REFUSE_MS if refused else HOLD
        heapq.heappush(free, got + hold)
        attempts.setdefault(i, []).append((got, hold, refused))
        if refused:
            heapq.heappush(asks, (WINDOW_MS, i, k + 1, False))
    for i in range(N):
        t = 30.0 * i
        end = max(a + h for a, h, _ in attempts[i])
        root = len(rows)
        rows.append((i, -1, "POST /ask", "Server", 0, t, end - t + 1))
        rows.append((i, root, "chat", "Internal", 0, t, end - t))
        for a, h, _ in attempts[i]:
            rows.append((i, root + 1, "POST", "Client", 0, a, h))
    return rows


def test_refused_attempts_and_the_crowd_of_retries_at_the_pool_go() -> None:
    faulty, healthy = hand_frame(_attempts_run(True)), hand_frame(_attempts_run(False))
    finding = {"pattern": "timeout_retry", "confidence": 0.9, "span_name": "POST",
               "evidence": {"stats": {"mechanism": REFUSED}}}
    result = evaluate(faulty, [finding])
    fixed = next(o for o in result.outcomes if o.key == "no_refusals:POST")
    measured = evaluate(healthy, []).measured.p99_ms
    assert result.measured.p99_ms > 1_000  # the sleep to the window, then the crowd at the pool
    assert abs(fixed.p99_ms - measured) <= 0.1 * measured, (fixed.p99_ms, measured)
    assert fixed.params["pool_waits_retimed"] > 0


def _otlp_span(trace: str, span: str, parent: str, name: str, start_ms: float, end_ms: float,
               events: list[tuple[float, float]] = ()) -> dict:
    t0 = 1_700_000_000_000_000_000
    return {"traceId": trace, "spanId": span, "parentSpanId": parent, "name": name,
            "kind": 3 if parent else 2,
            "startTimeUnixNano": str(t0 + int(start_ms * MS)), "endTimeUnixNano": str(t0 + int(end_ms * MS)),
            "events": [{"timeUnixNano": str(t0 + int(at * MS)), "name": "retry",
                        "attributes": [{"key": "http.status_code", "value": {"intValue": "429"}},
                                       {"key": "retry.after_s", "value": {"doubleValue": after}}]}
                       for at, after in events]}


def test_the_retry_events_are_read_from_the_store(tmp_path) -> None:
    # an OpenInference client's `retry` events on its chat span, through the loader and load_frame
    import json

    from ingest.loader import load_paths
    from tailscope.analysis.diagnosis.load import load_frame
    from tailscope.analysis.source import reading
    from tailscope.store.engine import open_store

    spans = []
    for i in range(3):
        trace = f"{i + 1:032x}"
        refused = [(i * 1000 + 60.0, 2.0)] if i else []
        chat_end = i * 1000 + (2_400.0 if i else 400.0)
        spans.append(_otlp_span(trace, f"{1:016x}", "", "POST /ask", i * 1000, chat_end + 1))
        spans.append(_otlp_span(trace, f"{2:016x}", f"{1:016x}", "ChatOpenAI", i * 1000 + 1, chat_end,
                                refused))
    doc = {"resourceSpans": [{"resource": {"attributes": [{"key": "service.name",
                                                          "value": {"stringValue": "agent"}}]},
                              "scopeSpans": [{"scope": {"name": "t"}, "spans": spans}]}]}
    path = tmp_path / "run.json"
    path.write_text(json.dumps(doc))
    assert not load_paths([path], tmp_path / "s.duckdb", "r").failed
    with reading(open_store(str(tmp_path / "s.duckdb"))) as conn:
        frame = load_frame(conn, "r")
        idx, offset, wait = frame.retries("ChatOpenAI")
    assert [frame.names[frame.name[i]] for i in idx] == ["ChatOpenAI", "ChatOpenAI"]
    assert (offset / MS).tolist() == [59.0, 59.0]  # after the chat span's start
    assert (wait / MS).tolist() == [2_000.0, 2_000.0]
