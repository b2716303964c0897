"""The scaled-out service: front-end processes over one model process (reference_pipeline.frontends,
frontend, handoff): one trace per request across the processes, SIGTERM stops them all, a front end
that dies is reported and does not hang the service."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import time
from pathlib import Path

import httpx
import pytest
from process_support import children_of

pytestmark = [
    pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="needs torch"),
    pytest.mark.skipif(importlib.util.find_spec("tokenizers") is None, reason="needs tokenizers"),
]


def alive(pid: int) -> bool:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return False
    return fields[0] != "Z"


def start_service(tmp_path: Path, frontends: int = 2, **cfg):
    from reference_pipeline.runner import Child
    from reference_pipeline.scenarios import ServiceConfig

    config = ServiceConfig(
        n_entities=50, torch_threads=1, max_wait_ms=2, frontends=frontends, max_batch=4, **cfg
    )
    child = Child(
        "service",
        [
            "reference_pipeline.service",
            "--config-json",
            config.to_json(),
            "--trace-out",
            str(tmp_path / "service.jsonl"),
        ],
        tmp_path / "service.log",
    )
    port = child.wait_ready(300)
    return child, f"http://127.0.0.1:{port}/v1/predict"


def post(url: str, i: int) -> httpx.Response:
    body = {"entity_id": f"ent-{i % 50:06d}", "text": f"hello number {i} there", "request_id": str(i)}
    return httpx.post(url, json=body, timeout=30)


def spans_of(path: Path) -> list[dict]:
    spans = []
    for line in path.read_text().splitlines():
        for resource in json.loads(line)["resourceSpans"]:
            pid = next(a["value"] for a in resource["resource"]["attributes"] if a["key"] == "process.pid")
            for scope in resource["scopeSpans"]:
                spans += [{**s, "pid": int(pid.get("intValue", 0))} for s in scope["spans"]]
    return spans


def test_a_request_spans_one_trace_across_processes_and_sigterm_stops_all(tmp_path) -> None:
    child, url = start_service(tmp_path)
    model_pid = child.proc.pid
    fronts = children_of(model_pid)
    assert len(fronts) == 2
    for i in range(12):
        assert post(url, i).status_code == 200
    assert child.stop(grace_s=60) == 0, child.tail()
    assert not any(alive(pid) for pid in fronts)
    spans = spans_of(tmp_path / "service.jsonl")
    roots = {s["traceId"]: s for s in spans if s["name"] == "POST /v1/predict"}
    assert len(roots) == 12 and {r["pid"] for r in roots.values()} <= set(fronts)
    for name in ("batch.queue_wait", "model.forward"):
        model_spans = [s for s in spans if s["name"] == name]
        assert len(model_spans) == 12 and {s["pid"] for s in model_spans} == {model_pid}
        for span in model_spans:  # a child of its request's span in the front end: one trace
            assert span["parentSpanId"] == roots[span["traceId"]]["spanId"]
    tokenize = [s for s in spans if s["name"] == "tokenize"]
    assert {s["pid"] for s in tokenize} <= set(fronts) and len(tokenize) == 12


LIGHT_STAGES = (
    "ingress", "parsing", "feature_hydration", "preprocessing", "queue", "model_forward",
    "postprocessing", "serialization",
)  # fmt: skip


@pytest.mark.parametrize("frontends", [2, 0])
def test_light_mode_across_processes_puts_every_stage_on_the_request_span(tmp_path, frontends) -> None:
    """Light mode in the scaled-out layout: one span per request, written by its front end, with the
    model process's queue wait and forward pass (timed there, sent back over the hand-off) among its
    stage times, and the request's own attributes set through the tally; in one process the same."""
    child, url = start_service(tmp_path, frontends, tracing_mode="light")
    fronts = children_of(child.proc.pid) if frontends else [child.proc.pid]
    for i in range(6):
        assert post(url, i).status_code == 200
    assert child.stop(grace_s=60) == 0, child.tail()
    spans = spans_of(tmp_path / "service.jsonl")
    assert {s["name"] for s in spans} == {"POST /v1/predict"} and len(spans) == 6
    for span in spans:
        assert span["pid"] in fronts
        attrs = {a["key"]: a["value"] for a in span["attributes"]}
        for stage in LIGHT_STAGES:
            assert "intValue" in attrs[f"tailscope.stage_us.{stage}"], stage
            assert "intValue" in attrs[f"tailscope.stage_end_us.{stage}"], stage
        assert attrs["http.response.status_code"] == {"intValue": "200"}
        assert attrs["tailscope.request.id"]["stringValue"].isdigit()


def test_a_dying_frontend_is_reported_and_the_others_serve_on(tmp_path) -> None:
    child, url = start_service(tmp_path, tracing=False)
    fronts = children_of(child.proc.pid)
    os.kill(fronts[0], signal.SIGKILL)
    deadline = time.monotonic() + 30
    while f"pid {fronts[0]}" not in child.tail() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert f"front end 0 (pid {fronts[0]}) exited with signal SIGKILL while serving" in child.tail()
    assert all(post(url, i).status_code == 200 for i in range(4))  # the other front end serves
    assert child.stop(grace_s=60) == 1  # the service says it lost one
    assert not alive(fronts[1])


def test_the_service_stops_by_itself_when_every_frontend_died(tmp_path) -> None:
    child, _ = start_service(tmp_path, frontends=1, tracing=False)
    (front,) = children_of(child.proc.pid)
    os.kill(front, signal.SIGKILL)
    child.proc.wait(timeout=60)  # not hung on the dead front end
    assert child.proc.returncode == 1
    assert "exited with signal SIGKILL" in child.tail()
