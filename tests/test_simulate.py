"""The simulator: determinism, span_model's structure, and each scenario's planted signature.

Signatures are measured here from the decoded OTLP file with numpy, independently of tailscope's own
analysis, so a test failing here means the simulator, not the diagnosis, is wrong.
"""

from __future__ import annotations

import functools
import io
from pathlib import Path

import numpy as np
import orjson
import pytest

from reference_pipeline import span_model as sm
from reference_pipeline.simulate import SCENARIOS, simulate_columns, simulate_to_file
from tailscope.cli.main import main

REQUESTS = 3000


class Decoded:
    """The spans of one OTLP/JSON-lines file as parallel arrays."""

    def __init__(self, path: Path) -> None:
        names, traces, spans, parents, starts, ends, instances, hosts, services = ([] for _ in range(9))
        self.attrs: list[dict] = []
        self.events: list[list] = []
        self.links: list[list] = []
        self.resources: list[dict] = []
        with open(path, "rb") as f:
            for line in f:
                for rs in orjson.loads(line)["resourceSpans"]:
                    res = {kv["key"]: _value(kv["value"]) for kv in rs["resource"]["attributes"]}
                    self.resources.append(res)
                    for ss in rs["scopeSpans"]:
                        for s in ss["spans"]:
                            names.append(s["name"])
                            traces.append(s["traceId"])
                            spans.append(s["spanId"])
                            parents.append(s.get("parentSpanId", ""))
                            starts.append(int(s["startTimeUnixNano"]))
                            ends.append(int(s["endTimeUnixNano"]))
                            instances.append(res["service.instance.id"])
                            hosts.append(res["host.name"])
                            services.append(res["service.name"])
                            self.attrs.append(
                                {kv["key"]: _value(kv["value"]) for kv in s.get("attributes", [])}
                            )
                            self.events.append(s.get("events", []))
                            self.links.append(s.get("links", []))
        self.name, self.trace, self.span_id, self.parent = (
            np.array(x, dtype=object) for x in (names, traces, spans, parents)
        )
        self.instance, self.host, self.service = (
            np.array(x, dtype=object) for x in (instances, hosts, services)
        )
        self.start, self.end = np.array(starts, dtype=np.int64), np.array(ends, dtype=np.int64)
        self.dur_ms = (self.end - self.start) / 1e6
        self.index = {s: k for k, s in enumerate(spans)}

    def of(self, name: str) -> np.ndarray:
        return np.flatnonzero(self.name == name)

    def by_trace(self, idx: np.ndarray) -> dict[str, int]:
        return {self.trace[k]: k for k in idx.tolist()}

    def attr(self, idx: np.ndarray, key: str) -> np.ndarray:
        return np.array([self.attrs[k].get(key) for k in idx.tolist()])


def _value(v: dict):
    ((kind, raw),) = v.items()
    return int(raw) if kind == "intValue" else raw


@functools.cache
def _file(
    tmp: Path, scenario: str, requests: int = REQUESTS, naming: str = "reference", seed: int = 1
) -> Path:
    path = tmp / f"{scenario}-{naming}-{requests}-{seed}.jsonl"
    simulate_to_file(path, scenario, requests, seed, naming=naming)
    return path


@functools.cache
def _decoded(tmp: Path, scenario: str, naming: str = "reference") -> Decoded:
    return Decoded(_file(tmp, scenario, naming=naming))


@pytest.fixture(scope="module")
def sim_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("simulate")


@pytest.fixture(scope="module")
def run(sim_dir):
    return lambda scenario, naming="reference": _decoded(sim_dir, scenario, naming)


def test_same_seed_same_bytes_other_seed_other_bytes(tmp_path) -> None:
    a, b, c = tmp_path / "a.jsonl", tmp_path / "b.jsonl", tmp_path / "c.jsonl"
    simulate_to_file(a, "gc-pressure", 400, seed=5)
    simulate_to_file(b, "gc-pressure", 400, seed=5)
    simulate_to_file(c, "gc-pressure", 400, seed=6)
    assert a.read_bytes() == b.read_bytes()
    assert a.read_bytes() != c.read_bytes()


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_every_request_has_span_models_structure(sim_dir, scenario) -> None:
    d = Decoded(_file(sim_dir, scenario, requests=600))
    roots = np.flatnonzero(d.parent == "")
    assert len(roots) == 600 and set(d.name[roots]) == {sm.ROOT_SPAN}
    assert set(d.service[roots]) == {sm.LOADGEN_SERVICE_NAME}
    required = {
        sm.ROOT_SPAN,
        sm.RECEIVE,
        sm.PARSE,
        sm.HYDRATE,
        sm.TOKENIZE,
        sm.QUEUE_WAIT,
        sm.FORWARD,
        sm.POSTPROCESS,
        sm.LOCK_WAIT,
        sm.DOWNSTREAM,
        sm.SERIALIZE,
        f"POST {sm.DOWNSTREAM_ROUTE}",
    }
    per_trace: dict[str, list[int]] = {}
    for k, t in enumerate(d.trace.tolist()):
        per_trace.setdefault(t, []).append(k)
    assert len(per_trace) == 600
    for spans in per_trace.values():
        names = [d.name[k] for k in spans]
        assert required <= set(names)
        assert names.count(sm.ROOT_SPAN) == 2  # loadgen CLIENT + api SERVER
        hydrate = next(k for k in spans if d.name[k] == sm.HYDRATE)
        assert (sm.STORE_GET in names) == (d.attrs[hydrate]["cache.hit"] is False)
    # parents resolve within the trace, children lie within their parents, stages match span_model
    for k in np.flatnonzero(d.parent != "").tolist():
        p = d.index[d.parent[k]]
        assert d.trace[p] == d.trace[k]
        assert d.start[p] <= d.start[k] <= d.end[k] <= d.end[p], (d.name[k], d.name[p])
        if d.service[k] == sm.SERVICE_NAME:
            assert d.attrs[k]["tailscope.stage"] == sm.STAGE_OF[d.name[k]]
    # a batch: every member's forward span has the batch's start/end and links to the leader's
    forward = d.of(sm.FORWARD)
    leaders = np.array([d.links[k][0]["spanId"] for k in forward.tolist()], dtype=object)
    for leader in set(leaders.tolist()):
        members = forward[leaders == leader]
        lead = d.index[leader]
        assert d.name[lead] == sm.FORWARD and lead in members.tolist()
        assert (d.start[members] == d.start[lead]).all() and (d.end[members] == d.end[lead]).all()
        assert set(d.attr(members, "batch.size").tolist()) == {len(members)}
    for res in d.resources:
        assert set(sm.RESOURCE_KEYS) - {"tailscope.gpu.name"} <= set(res)
        assert res["tailscope.model.weights"] == "simulated" and res["tailscope.scenario"] == scenario


def test_alt_naming_renames_everything_and_drops_tailscope_attributes(run) -> None:
    d = run("cold-cache", "alt")
    assert not set(d.name.tolist()) & set(sm.STAGE_OF)
    assert not {sm.SERVICE_NAME, sm.LOADGEN_SERVICE_NAME, sm.DOWNSTREAM_SERVICE_NAME} & set(
        d.service.tolist()
    )
    assert not any(key.startswith("tailscope.") for attrs in d.attrs for key in attrs)
    assert not any(key.startswith("tailscope.") for res in d.resources for key in res)
    assert set(d.attr(d.of("redis GET"), "db.system").tolist()) == {"redis"}
    client = d.of("call-risk-api")
    assert set(d.attr(client, "http.request.method").tolist()) == {"POST"}
    assert len(d.of("POST /score")) == REQUESTS


def _p(values: np.ndarray, q: float) -> float:
    return float(np.percentile(values, q))


def test_steady_shows_no_planted_signature(run) -> None:
    d = run("steady")
    assert _p(d.dur_ms[d.of(sm.QUEUE_WAIT)], 99) < 40
    assert _p(d.dur_ms[d.of(sm.DOWNSTREAM)], 99) < 10
    assert np.mean(d.attr(d.of(sm.HYDRATE), "cache.hit") == True) > 0.95  # noqa: E712
    assert _p(d.dur_ms[d.of(sm.LOCK_WAIT)], 99) < 1
    gens = [
        int(a["value"]["intValue"])
        for evs in d.events
        for e in evs
        for a in e["attributes"]
        if a["key"] == "gc.generation"
    ]
    assert gens and max(gens) < 2  # young-generation collections only, sub-millisecond to a few ms
    assert len(set(d.instance[d.of(sm.FORWARD)].tolist())) == 3  # no restarts


def test_burst_grows_queue_wait_then_drains(run) -> None:
    steady, d = run("steady"), run("burst")
    queue = d.of(sm.QUEUE_WAIT)
    assert _p(d.dur_ms[queue], 99) > 5 * _p(steady.dur_ms[steady.of(sm.QUEUE_WAIT)], 99)
    # arrivals per 250 ms vs mean queue wait of the requests enqueued then: the wait peaks after the rate
    bins = 250_000_000
    t0 = d.start.min()
    clients = np.flatnonzero(d.parent == "")
    rate = np.bincount((d.start[clients] - t0) // bins)
    qbin = (d.start[queue] - t0) // bins
    wait = np.bincount(qbin, weights=d.dur_ms[queue], minlength=len(rate)) / np.maximum(
        np.bincount(qbin, minlength=len(rate)), 1
    )
    assert wait.argmax() > rate.argmax()
    assert wait[-4:].mean() < wait.max() / 10  # drained by the end
    # batches fill up under the burst
    sizes = d.attr(d.of(sm.FORWARD), "batch.size")
    assert sizes.max() == 8 and sizes.mean() > steady.attr(steady.of(sm.FORWARD), "batch.size").mean()


def test_slow_downstream_moves_downstream_tail(run) -> None:
    steady, d = run("steady"), run("slow-downstream")
    call, base = d.dur_ms[d.of(sm.DOWNSTREAM)], steady.dur_ms[steady.of(sm.DOWNSTREAM)]
    assert _p(call, 99) > 5 * _p(base, 99)
    assert _p(call, 50) < 3 * _p(base, 50)
    server = d.dur_ms[d.of(f"POST {sm.DOWNSTREAM_ROUTE}")]
    assert _p(server, 99) > 0.9 * _p(call, 99)  # the time is spent in the dependency, not the network


def test_cold_cache_makes_hydration_bimodal_explained_by_cache_hit(run) -> None:
    d = run("cold-cache")
    hydrate = d.of(sm.HYDRATE)
    hit = d.attr(hydrate, "cache.hit") == True  # noqa: E712
    assert 0.2 < hit.mean() < 0.8
    fast, slow = d.dur_ms[hydrate[hit]], d.dur_ms[hydrate[~hit]]
    assert _p(slow, 5) > 5 * _p(fast, 99)  # two modes, split exactly by cache.hit
    assert len(d.of(sm.STORE_GET)) == (~hit).sum()


def test_key_expiry_misses_come_in_storms(run) -> None:
    steady, d = run("steady"), run("key-expiry")
    hydrate = d.of(sm.HYDRATE)
    miss = hydrate[d.attr(hydrate, "cache.hit") == False]  # noqa: E712
    assert len(miss) > 10 * max((steady.attr(steady.of(sm.HYDRATE), "cache.hit") == False).sum(), 1)  # noqa: E712
    bins = (d.start[hydrate] - d.start.min()) // 100_000_000
    rate = np.bincount(bins, weights=d.attr(hydrate, "cache.hit") == False) / np.bincount(bins)  # noqa: E712
    assert rate.max() > 0.8  # the first expiry: nearly every request misses at once
    storms = np.flatnonzero(rate > 0.25)
    clusters = np.split(storms, np.flatnonzero(np.diff(storms) > 5) + 1)
    assert len(clusters) >= 2  # they expire together again, about a TTL later
    assert len(storms) < 0.3 * len(rate) and np.median(rate) < 0.15  # storms, not a steady miss rate
    assert rate[: storms[0]].max() == 0  # nothing missed before the first expiry


def test_gc_pressure_stretches_every_span_in_flight(run) -> None:
    d = run("gc-pressure")
    pauses = {
        (e["timeUnixNano"], *(a["value"]["intValue"] for a in e["attributes"]))
        for evs in d.events
        for e in evs
    }
    major = [(int(ts), int(dur)) for ts, gen, dur, _ in pauses if gen == "2"]
    assert len(major) >= 5 and all(30e6 <= dur <= 150e6 for _, dur in major)
    roots = d.of(sm.ROOT_SPAN)
    server_roots = roots[d.service[roots] == sm.SERVICE_NAME]
    checked = 0
    for ts, dur in major:
        # the instance that paused: the one whose root spans carry the event
        carriers = [
            k for k in server_roots.tolist() if any(e["timeUnixNano"] == str(ts) for e in d.events[k])
        ]
        instance = d.instance[carriers[0]]
        in_flight = np.flatnonzero((d.instance == instance) & (d.start < ts) & (d.end > ts + dur))
        assert len(in_flight) and (d.end[in_flight] - d.start[in_flight] >= dur).all()
        # every root span in flight on that instance carries the event, whatever stage it was in
        live_roots = set(in_flight.tolist()) & set(server_roots.tolist())
        assert live_roots <= set(carriers)
        checked += len(in_flight)
    assert checked > 50
    with_major = [
        k
        for k in server_roots.tolist()
        if any(
            a["key"] == "gc.generation" and a["value"]["intValue"] == "2"
            for e in d.events[k]
            for a in e["attributes"]
        )
    ]
    others = np.setdiff1d(server_roots, with_major)
    assert np.median(d.dur_ms[with_major]) > np.median(d.dur_ms[others]) + 20


def test_lock_wait_grows_with_concurrency(run) -> None:
    steady, d = run("steady"), run("lock-contention")
    waits = d.of(sm.LOCK_WAIT)
    assert _p(d.dur_ms[waits], 99) > 10 * _p(steady.dur_ms[steady.of(sm.LOCK_WAIT)], 99)
    post = d.of(sm.POSTPROCESS)
    concurrent = np.empty(len(waits))
    for n, k in enumerate(waits.tolist()):
        same = post[d.instance[post] == d.instance[k]]
        concurrent[n] = ((d.start[same] <= d.start[k]) & (d.end[same] > d.start[k])).sum() - 1
    rank = lambda x: np.argsort(np.argsort(x))  # noqa: E731
    assert np.corrcoef(rank(concurrent), rank(d.dur_ms[waits]))[0, 1] > 0.5
    assert np.median(d.dur_ms[waits][concurrent >= 4]) > 4 * np.median(d.dur_ms[waits][concurrent <= 1])


def test_cold_start_is_slowest_first_and_decays(run) -> None:
    d = run("cold-start")
    forward = d.of(sm.FORWARD)
    instances = sorted(set(d.instance[forward].tolist()))
    assert len(instances) == 6  # three instances, each restarted once mid-run
    for instance in instances:
        mine = forward[d.instance[forward] == instance]
        durations = d.dur_ms[mine[np.argsort(d.start[mine], kind="stable")]]
        assert durations[:3].mean() > 5 * np.median(durations[50:])
        assert durations[:3].mean() > durations[10:20].mean() > np.median(durations[50:])


def test_network_jitter_separates_client_and_server_latency_for_some_clients(run) -> None:
    d = run("network-jitter")
    clients = np.flatnonzero(d.parent == "")
    servers = d.of(sm.ROOT_SPAN)
    servers = servers[d.service[servers] == sm.SERVICE_NAME]
    server_by_parent = {d.parent[k]: k for k in servers.tolist()}
    gap = np.array([d.dur_ms[c] - d.dur_ms[server_by_parent[d.span_id[c]]] for c in clients.tolist()])
    slow_host = np.isin(d.host[clients], ["loadgen-0", "loadgen-1"])
    assert np.median(gap[slow_host]) > 20 and np.median(gap[~slow_host]) < 2


def test_file_and_columns_agree_exactly(sim_dir) -> None:
    otlp_json = pytest.importorskip("ingest.otlp_json")
    path = _file(sim_dir, "gc-pressure", requests=500)
    with open(path, "rb") as f:
        decoded = [row for batch in otlp_json.decode(f, str(path), None) for row in batch.rows()]
    direct = [row for batch in simulate_columns("gc-pressure", 500, seed=1) for row in batch.rows()]
    key = lambda row: row["span_id"]  # noqa: E731
    assert sorted(decoded, key=key) == sorted(direct, key=key)


def test_jaeger_output_decodes_to_the_same_spans(tmp_path) -> None:
    jaeger = pytest.importorskip("ingest.jaeger")
    path = tmp_path / "run.json"
    simulate_to_file(path, "cold-start", 300, seed=2, fmt="jaeger")
    with open(path, "rb") as f:
        decoded = [
            row for batch in jaeger.decode(io.BufferedReader(f), str(path), None) for row in batch.rows()
        ]
    direct = {
        row["span_id"]: row for batch in simulate_columns("cold-start", 300, seed=2) for row in batch.rows()
    }
    assert len(decoded) == len(direct)
    for row in decoded:
        want = direct[row["span_id"]]
        assert (row["trace_id"], row["parent_span_id"], row["span_name"], row["service_name"]) == (
            want["trace_id"],
            want["parent_span_id"],
            want["span_name"],
            want["service_name"],
        )
        assert row["timestamp_ns"] == want["timestamp_ns"] // 1000 * 1000  # Jaeger keeps microseconds


def test_cli_writes_a_compressed_file_and_loads_it(tmp_path, capsys) -> None:
    out, db = tmp_path / "run.jsonl.gz", tmp_path / "store.duckdb"
    code = main(
        [
            "pipeline",
            "simulate",
            "--scenario",
            "burst",
            "--requests",
            "300",
            "--out",
            str(out),
            "--db",
            str(db),
            "--run-label",
            "sim-burst",
            "--json",
        ]
    )
    assert code == 0
    summary = orjson.loads(capsys.readouterr().out)
    assert summary["requests"] == 300 and summary["spans"] > 300 * 12 and out.read_bytes()[:2] == b"\x1f\x8b"
    assert summary["loaded"] == {"db": str(db), "run": "sim-burst", "traces": 300, "errors": []}
