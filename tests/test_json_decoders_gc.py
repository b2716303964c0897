"""The Jaeger and Zipkin decoders parse and walk their document with Python's cyclic collector paused
(span_json.collector_paused): none of the objects is in a cycle, and the collections that allocating
them set off scanned the whole document again and again (half the decode's CPU). The caller's own
work between batches, and everything after, runs with the collector as it was."""

from __future__ import annotations

import contextlib
import gc
import io
from collections.abc import Iterator
from typing import Any

import orjson
import pytest

from ingest import jaeger, zipkin
from ingest.errors import DecodeError

SPANS = 3000


def jaeger_document(spans: int = SPANS) -> bytes:
    traces = []
    for t in range(spans // 10):
        trace_id = f"{t + 1:032x}"
        traces.append(
            {
                "traceID": trace_id,
                "spans": [
                    {
                        "traceID": trace_id,
                        "spanID": f"{t * 10 + s + 1:016x}",
                        "operationName": f"op-{s}",
                        "references": [] if s == 0 else
                        [{"refType": "CHILD_OF", "traceID": trace_id, "spanID": f"{t * 10 + 1:016x}"}],
                        "startTime": 1_700_000_000_000_000 + t * 1000 + s,
                        "duration": 100 + s,
                        "tags": [{"key": f"k{i}", "type": "string", "value": f"v{i}"} for i in range(6)],
                        "logs": [],
                        "processID": "p1",
                    }
                    for s in range(10)
                ],
                "processes": {"p1": {"serviceName": "api", "tags": []}},
            }
        )  # fmt: skip
    return orjson.dumps({"data": traces})


def zipkin_document(spans: int = SPANS) -> bytes:
    return orjson.dumps(
        [
            {
                "traceId": f"{i // 10 + 1:032x}",
                "id": f"{i + 1:016x}",
                "name": "op",
                "timestamp": 1_700_000_000_000_000 + i,
                "duration": 100,
                "localEndpoint": {"serviceName": "api"},
                "tags": {f"k{k}": f"v{k}" for k in range(6)},
            }
            for i in range(spans)
        ]
    )


@contextlib.contextmanager
def collections() -> Iterator[list[int]]:
    """The generation of each cyclic collection that starts inside the block."""
    started: list[int] = []

    def count(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            started.append(info["generation"])

    gc.collect()
    gc.callbacks.append(count)
    try:
        yield started
    finally:
        gc.callbacks.remove(count)


@pytest.mark.parametrize(("decoder", "document"), [(jaeger, jaeger_document), (zipkin, zipkin_document)])
def test_no_collection_runs_while_a_document_is_decoded(decoder: Any, document: Any) -> None:
    data = document()
    assert gc.isenabled()
    with collections() as started:
        batches = list(decoder.decode(io.BytesIO(data), "t.json"))
    assert sum(len(b) for b in batches) == SPANS
    # none while parsing and walking; once the collector is back on, one young collection takes in
    # what the pause allocated (before: 56 young and 5 older collections in Jaeger's, 29 in Zipkin's;
    # 563 + 51 + 4 for 30,000 spans, where the paused decoders still take 1-2)
    assert len(started) <= 2 and set(started) <= {0}
    assert gc.isenabled()
    with collections() as after:
        garbage = [[] for _ in range(2000)]  # and the collector runs again afterwards
    assert after and garbage


def test_the_callers_work_between_batches_runs_with_the_collector_on(monkeypatch) -> None:
    monkeypatch.setattr(jaeger, "BATCH_SPANS", 700)
    seen = []
    for batch in jaeger.decode(io.BytesIO(jaeger_document()), "t.json"):
        seen.append((len(batch), gc.isenabled()))
    assert seen == [(700, True)] * 4 + [(200, True)]


@pytest.mark.parametrize(("decoder", "document"), [(jaeger, jaeger_document), (zipkin, zipkin_document)])
def test_the_collector_is_left_as_it_was_after_a_bad_document(decoder: Any, document: Any) -> None:
    with pytest.raises(DecodeError):
        list(decoder.decode(io.BytesIO(document()[:-5]), "t.json"))
    assert gc.isenabled()
    gc.disable()
    try:
        assert sum(len(b) for b in decoder.decode(io.BytesIO(document()), "t.json")) == SPANS
        assert not gc.isenabled()  # a caller that had it off (ingest.parallel's workers) keeps it off
    finally:
        gc.enable()
